// The random kernels on CUDA GPUs (random.hpp). One thread per element of
// the block: it finds the element's global row-major flat index from the
// block's box and evaluates kernels/random.hpp there, as the CPU's loop does
// (backend/cpu/random.cpp), so the walk order does not matter.
#include "kernels/random.hpp"  // first: see launch.cuh

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/launch.cuh"
#include "backend/cuda/random.hpp"
#include "tessera/error.hpp"

namespace tessera::cuda {

namespace {

using std::int64_t;

inline constexpr int kMaxRank = 8;

/// How a block's row-major offsets map to global flat indices: dims of the
/// block (sizes, first global index, global stride), plus `base`, the part
/// of the index fixed by the dims the block has one element of.
struct Walk {
  int rank = 0;
  int64_t size[kMaxRank] = {};
  int64_t start[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
  int64_t base = 0;

  TESSERA_HD std::uint64_t flat(int64_t off) const {
    int64_t i = base;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t q = off / size[d];
      i += (start[d] + (off - q * size[d])) * stride[d];
      off = q;
    }
    return static_cast<std::uint64_t>(i);
  }
};

/// The walk of block `box` of `shape`, with the dims of one element folded
/// into the base and each dim the block spans whole merged into the one
/// before it (their indices are then one contiguous range), so that any
/// rank fits unless the block is strided in more than kMaxRank dims.
/// Returns the block's element count (0: nothing to draw).
int64_t make_walk(const char* op, const std::vector<int64_t>& shape, const std::vector<Slice>& box, Walk& w) {
  const int r = static_cast<int>(shape.size());
  int64_t count = 1;
  for (const auto& s : box) count *= s.size() > 0 ? s.size() : 0;
  if (count == 0) return 0;
  std::vector<int64_t> gstride(r, 1);
  for (int d = r - 2; d >= 0; --d) gstride[d] = gstride[d + 1] * shape[d + 1];
  std::vector<int64_t> size, start, stride;  // innermost last
  for (int d = 0; d < r; ++d) {
    if (box[d].size() == 1) {
      w.base += box[d].start * gstride[d];
      continue;
    }
    size.push_back(box[d].size());
    start.push_back(box[d].start);
    stride.push_back(gstride[d]);
    // Merge the new innermost dim into the one before when it spans the
    // whole range between their strides.
    while (size.size() >= 2) {
      const size_t k = size.size() - 1;
      if (!(start[k] == 0 && size[k] * stride[k] == stride[k - 1])) break;
      start[k - 1] *= size[k];
      size[k - 1] *= size[k];
      stride[k - 1] = stride[k];
      size.pop_back(), start.pop_back(), stride.pop_back();
    }
  }
  if (size.size() > static_cast<size_t>(kMaxRank))
    throw ShapeError(std::string("[") + op + "] CUDA kernels take arrays of at most " + std::to_string(kMaxRank) +
                     " dims, got " + std::to_string(size.size()) + " (after merging the dims a block spans whole)");
  w.rank = static_cast<int>(size.size());
  for (int d = 0; d < w.rank; ++d) w.size[d] = size[d], w.start[d] = start[d], w.stride[d] = stride[d];
  return count;
}

TESSERA_HD inline void key_words(const SampleKey& key, std::uint32_t& k0, std::uint32_t& k1) {
  if (key.words) {
    k0 = key.words[0], k1 = key.words[1];
  } else {
    k0 = key.k0, k1 = key.k1;
  }
}

template <class T>
struct UniformKernel {
  T* out;
  Walk w;
  SampleKey key;
  T lo, hi;
  TESSERA_HD void operator()(int64_t i) const {
    std::uint32_t k0, k1;
    key_words(key, k0, k1);
    out[i] = detail::uniform_at(k0, k1, w.flat(i), lo, hi);
  }
};

template <class T>
struct NormalKernel {
  T* out;
  Walk w;
  SampleKey key;
  TESSERA_HD void operator()(int64_t i) const {
    std::uint32_t k0, k1;
    key_words(key, k0, k1);
    out[i] = detail::normal_at<T>(k0, k1, w.flat(i));
  }
};

struct SplitKernel {
  const std::uint32_t* keys;
  int num;
  std::uint32_t* out;
  // e = j * num + i: key j's i-th new key.
  TESSERA_HD void operator()(int64_t e) const {
    const int64_t j = e / num, i = e - j * num;
    const auto w = detail::threefry_at(keys[2 * j], keys[2 * j + 1], static_cast<std::uint64_t>(i));
    out[2 * e] = w[0];
    out[2 * e + 1] = w[1];
  }
};

struct FoldInKernel {
  const std::uint32_t* keys;
  const std::uint32_t* data;
  int64_t data_stride;
  std::uint32_t value;
  std::uint32_t* out;
  TESSERA_HD void operator()(int64_t j) const {
    const std::uint32_t d = data ? data[j * data_stride] : value;
    const auto w = detail::threefry2x32(keys[2 * j], keys[2 * j + 1], 0u, d);
    out[2 * j] = w[0];
    out[2 * j + 1] = w[1];
  }
};

}  // namespace

void uniform(DType t, void* out, const std::vector<std::int64_t>& shape, const std::vector<Slice>& box,
             const SampleKey& key, double lo, double hi) {
  Walk w;
  const int64_t n = make_walk("uniform", shape, box, w);
  if (t == DType::f32)
    for_each("uniform", n,
             UniformKernel<float>{static_cast<float*>(out), w, key, static_cast<float>(lo), static_cast<float>(hi)});
  else if (t == DType::f64)
    for_each("uniform", n, UniformKernel<double>{static_cast<double*>(out), w, key, lo, hi});
}

void normal(DType t, void* out, const std::vector<std::int64_t>& shape, const std::vector<Slice>& box,
            const SampleKey& key) {
  Walk w;
  const int64_t n = make_walk("normal", shape, box, w);
  if (t == DType::f32)
    for_each("normal", n, NormalKernel<float>{static_cast<float*>(out), w, key});
  else if (t == DType::f64)
    for_each("normal", n, NormalKernel<double>{static_cast<double*>(out), w, key});
}

void split_keys(const std::uint32_t* keys, std::int64_t n, int num, std::uint32_t* out) {
  if (num <= 0) return;
  for_each("split", n * num, SplitKernel{keys, num, out});
}

void fold_in_keys(const std::uint32_t* keys, std::int64_t n, const std::uint32_t* data, std::int64_t data_stride,
                  std::uint32_t value, std::uint32_t* out) {
  for_each("fold_in", n, FoldInKernel{keys, data, data_stride, value, out});
}

}  // namespace tessera::cuda
