// The creation kernels, dtype conversion and device copies on CUDA GPUs
// (kernels.hpp). Each element is computed as the CPU's kernel computes it
// (backend/cpu/creation.cpp, core/dtype.cpp's convert), with
// kernels/convert.hpp's convert_one; kernels that only place bytes (fill,
// eye) are written per element width.
#include "kernels/convert.hpp"  // first: see launch.cuh

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/cuda/kernels.hpp"
#include "backend/cuda/launch.cuh"
#include "core/dispatch.hpp"

namespace tessera::cuda {

namespace {

using std::int64_t;

using detail::dispatch;

// The unsigned integer of W bytes: what fill and eye write.
template <int W>
using Bits = std::conditional_t<W == 1, std::uint8_t, std::conditional_t<W == 4, std::uint32_t, std::uint64_t>>;

// Calls f(std::integral_constant<int, W>) for dtype t's width W.
template <class F>
void by_width(DType t, F&& f) {
  switch (itemsize(t)) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 4: return f(std::integral_constant<int, 4>{});
    default: return f(std::integral_constant<int, 8>{});
  }
}

// The bits of the element of dtype t equal to one (eye's ones).
std::uint64_t one_bits(DType t) {
  std::uint64_t bits = 0;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    const T one{1};
    std::memcpy(&bits, &one, sizeof(T));
  });
  return bits;
}

// -------------------------------------------------------------- convert

template <class From, class To>
TESSERA_HD void convert_at(const From* in, void* out, int64_t i) {
  static_cast<To*>(out)[i] = detail::convert_one<To>(in[i]);
}

template <class From>
struct ConvertKernel {
  const From* in;
  void* out;
  DType to;

  TESSERA_HD void operator()(int64_t i) const {
    switch (to) {
      case DType::bool_: return convert_at<From, bool>(in, out, i);
      case DType::u8: return convert_at<From, std::uint8_t>(in, out, i);
      case DType::i8: return convert_at<From, std::int8_t>(in, out, i);
      case DType::u32: return convert_at<From, std::uint32_t>(in, out, i);
      case DType::i32: return convert_at<From, std::int32_t>(in, out, i);
      case DType::u64: return convert_at<From, std::uint64_t>(in, out, i);
      case DType::i64: return convert_at<From, std::int64_t>(in, out, i);
      case DType::f32: return convert_at<From, float>(in, out, i);
      case DType::f64: return convert_at<From, double>(in, out, i);
    }
  }
};

// ------------------------------------------------------------- creation

template <int W>
struct FillKernel {
  Bits<W>* out;
  Bits<W> value;
  TESSERA_HD void operator()(int64_t i) const { out[i] = value; }
};

template <class T>
struct ArangeKernel {
  T* out;
  int64_t first;
  double start, step;
  TESSERA_HD void operator()(int64_t j) const {
    out[j] = detail::convert_one<T>(start + static_cast<double>(first + j) * step);
  }
};

template <class T>
struct LinspaceKernel {
  T* out;
  int64_t first;
  LinspaceParams p;
  TESSERA_HD void operator()(int64_t j) const {
    double y = detail::linspace_value(p, first + j);
    if constexpr (std::is_integral_v<T>) y = detail::lm::floor(y);
    out[j] = detail::convert_one<T>(y);
  }
};

template <int W>
struct EyeKernel {
  Bits<W>* out;
  int64_t row0, col0, width, k;
  Bits<W> one;
  TESSERA_HD void operator()(int64_t i) const {
    const int64_t q = i / width;
    const int64_t r = row0 + q, c = col0 + (i - q * width);
    out[i] = c == r + k ? one : Bits<W>(0);  // k is clamped by the caller: r + k does not overflow
  }
};

}  // namespace

void convert(const void* in, DType from, void* out, DType to, std::int64_t n) {
  if (n <= 0) return;
  if (from == to) return copy(out, in, static_cast<std::size_t>(n) * itemsize(from));
  dispatch(from, [&](auto tag) {
    using From = decltype(tag);
    for_each("convert", n, ConvertKernel<From>{static_cast<const From*>(in), out, to});
  });
}

void fill(DType t, void* out, std::int64_t n, const void* value) {
  if (n <= 0) return;
  by_width(t, [&](auto w) {
    constexpr int W = decltype(w)::value;
    Bits<W> v;
    std::memcpy(&v, value, W);
    for_each("fill", n, FillKernel<W>{static_cast<Bits<W>*>(out), v});
  });
}

void arange(DType t, void* out, Slice index, double start, double step) {
  if (index.size() <= 0) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    for_each("arange", index.size(), ArangeKernel<T>{static_cast<T*>(out), index.start, start, step});
  });
}

void linspace(DType t, void* out, Slice index, const LinspaceParams& p) {
  if (index.size() <= 0) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    for_each("linspace", index.size(), LinspaceKernel<T>{static_cast<T*>(out), index.start, p});
  });
}

void eye(DType t, void* out, Slice rows, Slice cols, std::int64_t k) {
  const int64_t width = cols.size();
  if (rows.size() <= 0 || width <= 0) return;
  const std::uint64_t one = one_bits(t);
  by_width(t, [&](auto w) {
    constexpr int W = decltype(w)::value;
    for_each("eye", rows.size() * width,
             EyeKernel<W>{static_cast<Bits<W>*>(out), rows.start, cols.start, width, k, static_cast<Bits<W>>(one)});
  });
}

void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  const Current& c = current("copy");
  if (c.emulated) {
    run_emulated([=] { std::memcpy(dst, src, bytes); });
    return;
  }
  check(static_cast<int>(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(c.stream))),
        "copy", "a device copy");
}

}  // namespace tessera::cuda
