// The copy kernels of the shape ops (see shape.hpp).
#include "backend/cpu/shape.hpp"

#include <algorithm>
#include <cstring>

#include "core/array_impl.hpp"
#include "core/nd_index.hpp"

namespace tessera::detail::cpu {

namespace {

template <class T>
void copy_line(const unsigned char* s, std::int64_t ss, unsigned char* d, std::int64_t ds, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, s + i * ss, sizeof(T));
    std::memcpy(d + i * ds, &v, sizeof(T));
  }
}

/// A 2-d strided copy in square tiles, so that both the reads along `a` and
/// the writes along `b` stay in cache (a transpose).
template <class T>
void copy_tiled(const unsigned char* s, unsigned char* d, std::int64_t an, std::int64_t as, std::int64_t ad,
                std::int64_t bn, std::int64_t bs, std::int64_t bd) {
  constexpr std::int64_t kTile = 32;
  for (std::int64_t a0 = 0; a0 < an; a0 += kTile)
    for (std::int64_t b0 = 0; b0 < bn; b0 += kTile) {
      const std::int64_t a1 = std::min(an, a0 + kTile), b1 = std::min(bn, b0 + kTile);
      for (std::int64_t a = a0; a < a1; ++a)
        for (std::int64_t b = b0; b < b1; ++b) {
          T v;
          std::memcpy(&v, s + a * as + b * bs, sizeof(T));
          std::memcpy(d + a * ad + b * bd, &v, sizeof(T));
        }
    }
}

}  // namespace

// Dims contiguous in both are merged so whole runs go through one memcpy;
// when the innermost destination dim reads with a stride and another dim
// reads contiguously (a transpose), the two are copied in tiles.
void strided_copy(const unsigned char* src, const std::vector<std::int64_t>& sstr, unsigned char* dst,
                  const std::vector<std::int64_t>& dstr, const Shape& len, std::size_t isz) {
  struct Dim {
    std::int64_t n, s, d;
  };
  std::vector<Dim> dims;
  for (size_t j = 0; j < len.size(); ++j) {
    if (len[j] == 0) return;
    if (len[j] == 1) continue;
    Dim x{len[j], sstr[j], dstr[j]};
    if (!dims.empty() && dims.back().s == x.n * x.s && dims.back().d == x.n * x.d)
      dims.back() = {dims.back().n * x.n, x.s, x.d};
    else
      dims.push_back(x);
  }
  if (dims.empty()) {
    std::memcpy(dst, src, isz);
    return;
  }
  // Extents and byte strides of the dims left in `dims` once the inner ones
  // are taken out. The NdIndex is built in place by each loop: one returned
  // from a call would have its address escape, and then every byte copy
  // could alias its offsets, which would be reloaded per row.
  struct Outer {
    std::vector<std::int64_t> n, s, d;
  };
  auto outer = [&dims] {
    Outer o;
    for (const Dim& x : dims) {
      o.n.push_back(x.n);
      o.s.push_back(x.s);
      o.d.push_back(x.d);
    }
    return o;
  };
  const auto step = static_cast<std::int64_t>(isz);
  if (dims.back().s != step && (isz == 1 || isz == 4 || isz == 8)) {
    int k = -1;  // the dim read contiguously, if any
    for (int i = static_cast<int>(dims.size()) - 2; i >= 0 && k < 0; --i)
      if (dims[i].s == step && dims[i].n >= 8) k = i;
    if (k >= 0 && dims.back().n >= 8) {
      const Dim a = dims[k], b = dims.back();
      dims.erase(dims.begin() + k);
      dims.pop_back();
      const Outer o = outer();
      for (NdIndex it(o.n, o.s, o.d); !it.done(); it.next()) {
        const unsigned char* s = src + it.offset(0);
        unsigned char* d = dst + it.offset(1);
        switch (isz) {
          case 1: copy_tiled<std::uint8_t>(s, d, a.n, a.s, a.d, b.n, b.s, b.d); break;
          case 4: copy_tiled<std::uint32_t>(s, d, a.n, a.s, a.d, b.n, b.s, b.d); break;
          default: copy_tiled<std::uint64_t>(s, d, a.n, a.s, a.d, b.n, b.s, b.d); break;
        }
      }
      return;
    }
  }
  const Dim in = dims.back();
  dims.pop_back();
  auto line = [&](const unsigned char* s, unsigned char* d) {
    if (in.s == step && in.d == step) {
      std::memcpy(d, s, static_cast<std::size_t>(in.n) * isz);
      return;
    }
    switch (isz) {
      case 1: copy_line<std::uint8_t>(s, in.s, d, in.d, in.n); break;
      case 4: copy_line<std::uint32_t>(s, in.s, d, in.d, in.n); break;
      case 8: copy_line<std::uint64_t>(s, in.s, d, in.d, in.n); break;
      default:
        for (std::int64_t i = 0; i < in.n; ++i) std::memcpy(d + i * in.d, s + i * in.s, isz);
    }
  };
  const Outer o = outer();
  for (NdIndex it(o.n, o.s, o.d); !it.done(); it.next()) line(src + it.offset(0), dst + it.offset(1));
}

void fill_bytes(unsigned char* dst, std::int64_t n, const std::vector<unsigned char>& value) {
  const std::size_t isz = value.size();
  if (n <= 0) return;
  std::memcpy(dst, value.data(), isz);
  // Doubling copies: log(n) memcpys.
  std::int64_t done = 1;
  while (done < n) {
    const std::int64_t c = std::min(done, n - done);
    std::memcpy(dst + done * isz, dst, static_cast<std::size_t>(c) * isz);
    done += c;
  }
}

void copy_affine(const Affine& m, const void* src, const Box& sbox, void* dst, const Box& blk, const Box& r,
                 std::size_t isz) {
  const auto is = static_cast<std::int64_t>(isz);
  const auto sst = strides_of(box_shape(sbox));
  const auto dst_st = strides_of(box_shape(blk));
  std::vector<std::int64_t> c(static_cast<std::size_t>(m.in_rank), 0);
  std::vector<std::int64_t> ss(r.size()), ds(r.size());
  std::int64_t doff = 0;
  for (size_t j = 0; j < r.size(); ++j) {
    if (m.src[j] >= 0) c[m.src[j]] = m.offset[j] + m.step[j] * r[j].start;
    ss[j] = m.src[j] >= 0 ? m.step[j] * sst[m.src[j]] * is : 0;
    ds[j] = dst_st[j] * is;
    doff += (r[j].start - blk[j].start) * dst_st[j];
  }
  std::int64_t soff = 0;
  for (int d = 0; d < m.in_rank; ++d) soff += (c[d] - sbox[d].start) * sst[d];
  strided_copy(static_cast<const unsigned char*>(src) + soff * is, ss, static_cast<unsigned char*>(dst) + doff * is,
               ds, box_shape(r), isz);
}

// The box is walked in input runs (its inner dims whole in the array and in
// the source buffer); each run is split into output segments at the edges of
// the block's rows, one memcpy each.
void copy_flat(const void* src, const Box& sbox, const Box& box, const Shape& in, void* dst, const Box& blk,
               const Shape& out, std::size_t isz) {
  if (box_empty(box)) return;
  const int ri = static_cast<int>(in.size()), ro = static_cast<int>(out.size());
  const auto gin = strides_of(in), sst = strides_of(box_shape(sbox));
  const auto gout = strides_of(out), bst = strides_of(box_shape(blk));
  // Input runs: dims after q are whole in the array and in the source buffer.
  int q = ri - 1;
  while (q > 0 && box[q].start == 0 && box[q].stop == in[q] && sbox[q] == box[q]) --q;
  std::int64_t run = 1;
  if (ri > 0) {
    run = box[q].size();
    for (int d = q + 1; d < ri; ++d) run *= in[d];
  }
  // Output segments: dims after p are whole in the array (hence in the block).
  int p = ro - 1;
  while (p > 0 && blk[p].start == 0 && blk[p].stop == out[p]) --p;
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  // Flat input index and source-buffer offset of the box's first element.
  std::int64_t f0 = 0, so0 = 0;
  for (int k = 0; k < ri; ++k) {
    f0 += box[k].start * gin[k];
    so0 += (box[k].start - sbox[k].start) * sst[k];
  }
  std::vector<std::int64_t> o(static_cast<std::size_t>(ro));
  const Shape bsz = box_shape(box);
  for (NdIndex it(first_dims(bsz, std::max(q, 0)), gin, sst); !it.done(); it.next()) {
    std::int64_t f = f0 + it.offset(0), so = so0 + it.offset(1);
    std::int64_t left = run;
    while (left > 0) {
      std::int64_t rem = f, doff = 0, inner = 0;
      for (int j = 0; j < ro; ++j) {
        o[j] = rem / gout[j];
        rem %= gout[j];
        doff += (o[j] - blk[j].start) * bst[j];
        if (j > p) inner += o[j] * gout[j];
      }
      std::int64_t seg = 1;
      if (ro > 0) seg = (blk[p].stop - o[p]) * gout[p] - inner;
      seg = std::min(seg, left);
      std::memcpy(d + doff * static_cast<std::int64_t>(isz), s + so * static_cast<std::int64_t>(isz),
                  static_cast<std::size_t>(seg) * isz);
      f += seg;
      so += seg;
      left -= seg;
    }
  }
}

}  // namespace tessera::detail::cpu
