// The copy kernels of the shape ops on CUDA GPUs (shape.hpp). One thread
// per element of the destination walk: its row-major index over the walk's
// extents gives the byte offsets in both buffers, and the element is moved
// as one word of its width. Threads of a warp take consecutive indices, so
// the writes along the walk's inner dim are coalesced (a transpose reads
// with a stride). Dims are merged first where both buffers step over them
// as one run, so most walks are one to three dims; a walk that is one
// contiguous run in both buffers is a device memcpy.
#include "kernels/portable.hpp"  // first: see launch.cuh

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/kernels.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/shape.hpp"
#include "tessera/error.hpp"

namespace tessera::cuda {

namespace {

using std::int64_t;

// The unsigned integer of W bytes: one element as a word.
template <int W>
using Bits = std::conditional_t<
    W == 1, std::uint8_t,
    std::conditional_t<W == 2, std::uint16_t, std::conditional_t<W == 4, std::uint32_t, std::uint64_t>>>;

// Calls f(std::integral_constant<int, W>) for an element of `isz` bytes
// (1, 2, 4 or 8; the dtypes have no other width).
template <class F>
void by_width(const char* op, std::size_t isz, F&& f) {
  switch (isz) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default:
      throw Error(std::string("[") + op + "] internal: CUDA copy kernels move elements of 1, 2, 4 or 8 bytes, got " +
                  std::to_string(isz));
  }
}

void check_rank(const char* op, std::size_t r) {
  if (r > static_cast<std::size_t>(kMaxRank))
    throw ShapeError(std::string("[") + op + "] CUDA kernels take arrays of at most " + std::to_string(kMaxRank) +
                     " dims, got " + std::to_string(r));
}

// ------------------------------------------------------------ strided copy

/// Element i of the walk `n` (row-major) is read at src + sum k_j * s[j]
/// and written at dst + sum k_j * d[j] (byte strides, any sign).
template <int W>
struct StridedKernel {
  const unsigned char* src;
  unsigned char* dst;
  int rank;
  int64_t n[kMaxRank], s[kMaxRank], d[kMaxRank];

  TESSERA_HD void operator()(int64_t i) const {
    int64_t so = 0, dof = 0;
    for (int j = rank - 1; j > 0; --j) {
      const int64_t q = i / n[j], k = i - q * n[j];
      i = q;
      so += k * s[j];
      dof += k * d[j];
    }
    so += i * s[0];
    dof += i * d[0];
    *reinterpret_cast<Bits<W>*>(dst + dof) = *reinterpret_cast<const Bits<W>*>(src + so);
  }
};

template <int W>
struct FillKernel {
  Bits<W>* out;
  Bits<W> value;
  TESSERA_HD void operator()(int64_t i) const { out[i] = value; }
};

// -------------------------------------------------------------- flat copy

/// Reshape's copy: element i of the box (row-major over `bn`) has flat
/// index f0 + sum k_j * gin[j] in the input array and sits at so0 + sum k_j
/// * sst[j] in the source buffer; flat index f is output position (f /
/// gout[j]) per output dim j (the remainder going on), at (o_j - ostart[j])
/// * bst[j] summed in the destination block. Offsets in elements.
template <int W>
struct FlatKernel {
  const Bits<W>* src;
  Bits<W>* dst;
  int ri, ro;
  int64_t f0, so0;
  int64_t bn[kMaxRank], gin[kMaxRank], sst[kMaxRank];
  int64_t gout[kMaxRank], ostart[kMaxRank], bst[kMaxRank];

  TESSERA_HD void operator()(int64_t i) const {
    int64_t f = f0, so = so0;
    for (int j = ri - 1; j >= 0; --j) {
      const int64_t q = i / bn[j], k = i - q * bn[j];
      i = q;
      f += k * gin[j];
      so += k * sst[j];
    }
    int64_t doff = 0;
    for (int j = 0; j < ro; ++j) {
      const int64_t o = f / gout[j];
      f -= o * gout[j];
      doff += (o - ostart[j]) * bst[j];
    }
    dst[doff] = src[so];
  }
};

}  // namespace

void strided_copy(const char* op, const void* src, const std::vector<int64_t>& sstr, void* dst,
                  const std::vector<int64_t>& dstr, const std::vector<int64_t>& len, std::size_t isz) {
  // cpu::strided_copy's merge: size-1 dims dropped, a dim folded into the
  // one before when both buffers step over the pair as one run.
  struct Dim {
    int64_t n, s, d;
  };
  std::vector<Dim> dims;
  for (std::size_t j = 0; j < len.size(); ++j) {
    if (len[j] == 0) return;
    if (len[j] == 1) continue;
    const Dim x{len[j], sstr[j], dstr[j]};
    if (!dims.empty() && dims.back().s == x.n * x.s && dims.back().d == x.n * x.d)
      dims.back() = {dims.back().n * x.n, x.s, x.d};
    else
      dims.push_back(x);
  }
  const auto step = static_cast<int64_t>(isz);
  if (dims.empty()) return copy(dst, src, isz);
  if (dims.size() == 1 && dims[0].s == step && dims[0].d == step)
    return copy(dst, src, static_cast<std::size_t>(dims[0].n) * isz);
  check_rank(op, dims.size());
  by_width(op, isz, [&](auto w) {
    constexpr int W = decltype(w)::value;
    StridedKernel<W> k{static_cast<const unsigned char*>(src), static_cast<unsigned char*>(dst),
                       static_cast<int>(dims.size()), {}, {}, {}};
    int64_t n = 1;
    for (std::size_t j = 0; j < dims.size(); ++j) {
      k.n[j] = dims[j].n;
      k.s[j] = dims[j].s;
      k.d[j] = dims[j].d;
      n *= dims[j].n;
    }
    for_each(op, n, k);
  });
}

void fill_bytes(const char* op, void* dst, std::int64_t n, const std::vector<unsigned char>& value) {
  if (n <= 0) return;
  by_width(op, value.size(), [&](auto w) {
    constexpr int W = decltype(w)::value;
    Bits<W> v;
    std::memcpy(&v, value.data(), W);
    for_each(op, n, FillKernel<W>{static_cast<Bits<W>*>(dst), v});
  });
}

void flat_copy(const char* op, const void* src, const std::vector<Slice>& sbox, const std::vector<Slice>& box,
               const std::vector<int64_t>& in, void* dst, const std::vector<Slice>& blk,
               const std::vector<int64_t>& out, std::size_t isz) {
  int64_t count = 1;
  for (const Slice& s : box) count *= s.size();
  if (count <= 0) return;
  const int ri = static_cast<int>(in.size()), ro = static_cast<int>(out.size());
  // Row-major strides (elements) of the input array, the source buffer, the
  // output array and the destination block.
  auto strides = [](auto size_of, int r) {
    std::vector<int64_t> st(static_cast<std::size_t>(r));
    int64_t acc = 1;
    for (int d = r - 1; d >= 0; --d) {
      st[static_cast<std::size_t>(d)] = acc;
      acc *= size_of(d);
    }
    return st;
  };
  const auto gin = strides([&](int d) { return in[static_cast<std::size_t>(d)]; }, ri);
  const auto sst = strides([&](int d) { return sbox[static_cast<std::size_t>(d)].size(); }, ri);
  const auto gout = strides([&](int d) { return out[static_cast<std::size_t>(d)]; }, ro);
  const auto bst = strides([&](int d) { return blk[static_cast<std::size_t>(d)].size(); }, ro);
  int64_t f0 = 0, so0 = 0;
  for (int k = 0; k < ri; ++k) {
    f0 += box[static_cast<std::size_t>(k)].start * gin[static_cast<std::size_t>(k)];
    so0 += (box[static_cast<std::size_t>(k)].start - sbox[static_cast<std::size_t>(k)].start) *
           sst[static_cast<std::size_t>(k)];
  }
  // The box's walk: size-1 dims dropped, a dim folded into the one before
  // when the array and the source buffer both step over the pair as one run.
  struct In {
    int64_t n, g, s;
  };
  std::vector<In> iw;
  for (int k = 0; k < ri; ++k) {
    const auto u = static_cast<std::size_t>(k);
    const In x{box[u].size(), gin[u], sst[u]};
    if (x.n == 1) continue;
    if (!iw.empty() && iw.back().g == x.n * x.g && iw.back().s == x.n * x.s)
      iw.back() = {iw.back().n * x.n, x.g, x.s};
    else
      iw.push_back(x);
  }
  // The output dims: size-1 dims of the array dropped (their index is 0), a
  // dim whole in the block folded into the one before (the block steps over
  // the pair as one run).
  struct Out {
    int64_t g, start, b, size;
  };
  std::vector<Out> ow;
  for (int j = 0; j < ro; ++j) {
    const auto u = static_cast<std::size_t>(j);
    if (out[u] == 1) continue;
    const bool whole = blk[u].start == 0 && blk[u].stop == out[u];
    if (!ow.empty() && whole) {
      Out& p = ow.back();
      p = {gout[u], p.start * out[u], bst[u], p.size * out[u]};
    } else {
      ow.push_back({gout[u], blk[u].start, bst[u], out[u]});
    }
  }
  auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  // One run in both: the box's flat range lands as one range of the block.
  if (iw.size() <= 1 && (iw.empty() || (iw[0].g == 1 && iw[0].s == 1)) && ow.size() <= 1 &&
      (ow.empty() || ow[0].b == 1)) {
    const int64_t doff = ow.empty() ? 0 : f0 - ow[0].start;
    return copy(d + doff * static_cast<int64_t>(isz), s + so0 * static_cast<int64_t>(isz),
                static_cast<std::size_t>(count) * isz);
  }
  check_rank(op, std::max(iw.size(), ow.size()));
  by_width(op, isz, [&](auto w) {
    constexpr int W = decltype(w)::value;
    FlatKernel<W> k{reinterpret_cast<const Bits<W>*>(s), reinterpret_cast<Bits<W>*>(d),
                    static_cast<int>(iw.size()), static_cast<int>(ow.size()), f0, so0, {}, {}, {}, {}, {}, {}};
    for (std::size_t j = 0; j < iw.size(); ++j) {
      k.bn[j] = iw[j].n;
      k.gin[j] = iw[j].g;
      k.sst[j] = iw[j].s;
    }
    for (std::size_t j = 0; j < ow.size(); ++j) {
      k.gout[j] = ow[j].g;
      k.ostart[j] = ow[j].start;
      k.bst[j] = ow[j].b;
    }
    for_each(op, count, k);
  });
}

}  // namespace tessera::cuda
