// Elementwise kernels. Each op is a small functor; loops are templated on it
// so the compiler vectorises the contiguous cases (same-shape operands, or an
// array with a scalar). Broadcast cases walk the output with NdIndex over
// all dims but the last and run a strided inner loop.
#include "backend/cpu/elementwise.hpp"
#include "core/dispatch.hpp"
#include "core/nd_index.hpp"
#include "kernels/scalar_math.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>

// Hot loops are compiled several times and the loader picks the clone the
// CPU runs. Every clone gives the same bits: this file is built with
// -ffp-contract=off, and the polynomials write each fused multiply-add they
// want as fma() (one instruction where the CPU has FMA, an exact libm call
// on the baseline).
//   TESSERA_MATH_CLONES: the polynomial kernels, for AVX-512, Haswell (AVX2
//     and FMA) and the baseline. GCC inlines nothing into an arch= clone
//     that is not always_inline, so these kernels call only the
//     always_inline helpers below and compiler builtins.
//   TESSERA_TARGET_CLONES: plain loops over an inlined lambda, for AVX-512,
//     AVX2 and the baseline.
// Sanitizer builds skip the clones: an instrumented ifunc resolver runs
// before the sanitizer runtime is up and crashes.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define TESSERA_TARGET_CLONES
#define TESSERA_MATH_CLONES
#else
#define TESSERA_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define TESSERA_MATH_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))
#endif

namespace tessera::cpu {

namespace {

namespace math = detail::math;
using namespace detail::math;

// ------------------------------------------------------------------ unary
//
// The per-element math is kernels/scalar_math.hpp's; these are its loops.

// True when some |x[i]| is not <= limit (or is NaN): a vectorised scan, so
// the scalar fix-up passes below cost nothing on ordinary inputs.
TESSERA_MATH_CLONES bool any_outside(const float* __restrict x, std::int64_t n, float limit) {
  // An integer or-reduction (a bool one does not vectorise).
  std::uint32_t out = 0;
  for (std::int64_t i = 0; i < n; ++i) out |= __builtin_fabsf(x[i]) <= limit ? 0u : 1u;
  return out != 0;
}

// sin (kPhase 0) or cos (1) of n elements by the polynomial. Returns true
// when some element is beyond its range: the check rides in the same
// vectorised loop, so ordinary inputs cost no second pass.
template <class T, int kPhase>
TESSERA_MATH_CLONES bool trig_fast_loop(const T* __restrict x, T* __restrict y, std::int64_t n) {
  std::uint32_t out = 0;
  for (std::int64_t i = 0; i < n; ++i) y[i] = trig_fast<T, kPhase>(x[i], out);
  return out != 0;
}

// The elements beyond the polynomial's range (not NaN) by the exact slow
// path (kernels/libm.hpp's sin_f64 / cos_f64: integer arithmetic and a
// chain of fma()s, so in the math clones too), by blocks of 64 elements.
// Branch-free, it vectorises: a block with many such elements computes
// the slow path for all of them and keeps it where due (f64: 13 ns an
// element, AVX-512 clone); one with a few computes those alone (30 ns
// each, scalar).
template <class T, int kPhase>
TESSERA_MATH_CLONES void trig_slow_loop(const T* x, T* y, std::int64_t n) {
  constexpr T limit = std::is_same_v<T, float> ? T(kTrigFastLimit) : T(kTrigFastLimitF64);
  constexpr std::int64_t kBlock = 64, kFew = 16;
  for (std::int64_t b = 0; b < n; b += kBlock) {
    const std::int64_t end = n - b < kBlock ? n : b + kBlock;
    std::int64_t count = 0;
    for (std::int64_t i = b; i < end; ++i) count += detail::lm::fabs(x[i]) > limit ? 1 : 0;
    if (count == 0) continue;
    if (count <= kFew) {
      for (std::int64_t i = b; i < end; ++i)
        if (detail::lm::fabs(x[i]) > limit) y[i] = trig_slow<T, kPhase>(x[i]);
      continue;
    }
    for (std::int64_t i = b; i < end; ++i) {
      const T v = trig_slow<T, kPhase>(x[i]);
      // NaN keeps the polynomial's value (its compare is false).
      y[i] = detail::lm::fabs(x[i]) > limit ? v : y[i];
    }
  }
}

// The fast loop, then the slow path for the elements beyond its range.
template <class T, bool kCos>
void trig_checked(const T* x, T* y, std::int64_t n) {
  if (trig_fast_loop<T, kCos ? 1 : 0>(x, y, n)) trig_slow_loop<T, kCos ? 1 : 0>(x, y, n);
}

TESSERA_MATH_CLONES void exp_f32(const float* __restrict x, float* __restrict y,
                                                              std::int64_t n, float sign) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = exp_f32_one(sign * x[i]);
}

void exp_f32_checked(const float* x, float* y, std::int64_t n, float sign) {
  exp_f32(x, y, n, sign);
  if (!any_outside(x, n, kExpFastLimit)) return;
  for (std::int64_t i = 0; i < n; ++i)
    if (exp_f32_outside(x[i])) y[i] = exp_f32_slow(sign * x[i]);
}

TESSERA_MATH_CLONES void tanh_f32_loop(const float* __restrict x, float* __restrict y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = tanh_f32(x[i]);
}

TESSERA_MATH_CLONES void log_f32(const float* __restrict x, float* __restrict y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = log_f32_one(x[i]);
}

// True when some x[i] is outside [FLT_MIN, FLT_MAX] (or NaN).
TESSERA_MATH_CLONES bool any_not_normal_positive(const float* __restrict x, std::int64_t n) {
  std::uint32_t out = 0;
  for (std::int64_t i = 0; i < n; ++i) out |= log_f32_outside(x[i]) ? 1u : 0u;
  return out != 0;
}

void log_f32_checked(const float* x, float* y, std::int64_t n) {
  log_f32(x, y, n);
  if (!any_not_normal_positive(x, n)) return;
  for (std::int64_t i = 0; i < n; ++i)
    if (log_f32_outside(x[i])) y[i] = log_f32_slow(x[i]);
}

// The functions of kernels/libm.hpp (f64, and f32 through f64), in the
// math clones: their fma()s want the FMA instructions, which the "avx2"
// target clone lacks (each would be a call).
template <class T, UnaryOp kOp>
TESSERA_MATH_CLONES void libm_loop(const T* __restrict x, T* __restrict y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if constexpr (kOp == UnaryOp::Exp) y[i] = math::exp(x[i]);
    else if constexpr (kOp == UnaryOp::Log) y[i] = math::log(x[i]);
    else if constexpr (kOp == UnaryOp::Log1p) y[i] = math::log1p(x[i]);
    else if constexpr (kOp == UnaryOp::Expm1) y[i] = math::expm1(x[i]);
    else if constexpr (kOp == UnaryOp::Tanh) y[i] = math::tanh(x[i]);
    else y[i] = math::sigmoid(x[i]);
  }
}

template <class T, class R, class F>
TESSERA_TARGET_CLONES void unary_loop(const T* x, R* y, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

template <class T>
void unary_typed(UnaryOp op, const T* x, void* out, std::int64_t n) {
  // An empty block may have no buffer at all, and memcpy/memset below must
  // not see a null pointer even for zero bytes.
  if (n == 0) return;
  T* y = static_cast<T*>(out);
  bool* yb = static_cast<bool*>(out);
  switch (op) {
    case UnaryOp::Neg: unary_loop(x, y, n, [](T v) { return neg(v); }); return;
    case UnaryOp::Abs: unary_loop(x, y, n, [](T v) { return math::abs(v); }); return;
    case UnaryOp::Sign: unary_loop(x, y, n, [](T v) { return sign(v); }); return;
    case UnaryOp::Floor:
      if constexpr (kFloat<T>) unary_loop(x, y, n, [](T v) { return math::floor(v); });
      else std::memcpy(y, x, static_cast<size_t>(n) * sizeof(T));
      return;
    case UnaryOp::Ceil:
      if constexpr (kFloat<T>) unary_loop(x, y, n, [](T v) { return math::ceil(v); });
      else std::memcpy(y, x, static_cast<size_t>(n) * sizeof(T));
      return;
    case UnaryOp::Round: unary_loop(x, y, n, [](T v) { return math::round(v); }); return;
    case UnaryOp::IsNan:
      if constexpr (kFloat<T>) unary_loop(x, yb, n, [](T v) { return is_nan(v); });
      else std::fill_n(yb, n, false);
      return;
    case UnaryOp::IsFinite:
      if constexpr (kFloat<T>) unary_loop(x, yb, n, [](T v) { return is_finite(v); });
      else std::fill_n(yb, n, true);
      return;
    case UnaryOp::Not: unary_loop(x, yb, n, [](T v) { return logical_not(v); }); return;
    default:
      break;
  }
  if constexpr (kFloat<T>) {
    constexpr bool f32 = std::is_same_v<T, float>;
    switch (op) {
      case UnaryOp::Exp:
        if constexpr (f32) exp_f32_checked(x, y, n, 1.0f);
        else libm_loop<T, UnaryOp::Exp>(x, y, n);
        return;
      case UnaryOp::Log:
        if constexpr (f32) log_f32_checked(x, y, n);
        else libm_loop<T, UnaryOp::Log>(x, y, n);
        return;
      case UnaryOp::Log1p: libm_loop<T, UnaryOp::Log1p>(x, y, n); return;
      case UnaryOp::Expm1: libm_loop<T, UnaryOp::Expm1>(x, y, n); return;
      case UnaryOp::Sqrt: unary_loop(x, y, n, [](T v) { return math::sqrt(v); }); return;
      case UnaryOp::Rsqrt: unary_loop(x, y, n, [](T v) { return math::rsqrt(v); }); return;
      case UnaryOp::Sin: trig_checked<T, false>(x, y, n); return;
      case UnaryOp::Cos: trig_checked<T, true>(x, y, n); return;
      case UnaryOp::Tanh:
        if constexpr (f32) tanh_f32_loop(x, y, n);
        else libm_loop<T, UnaryOp::Tanh>(x, y, n);
        return;
      case UnaryOp::Sigmoid:
        if constexpr (f32) {
          exp_f32_checked(x, y, n, -1.0f);
          for (std::int64_t i = 0; i < n; ++i) y[i] = sigmoid_of_exp(y[i]);
        } else {
          libm_loop<T, UnaryOp::Sigmoid>(x, y, n);
        }
        return;
      default: break;
    }
  }
  // The front end converts integer inputs of float-valued ops to f32 first.
}

// ----------------------------------------------------------------- binary

// pow of floats as a functor of its own: kernels/libm.hpp's pow_f64 is a
// chain of fma()s, which the "avx2" target clone (no FMA instructions)
// would run as calls, so its loops are the math clones (kMathOp). An
// always_inline call operator: GCC inlines nothing else into an arch= clone.
template <class T>
struct PowOp {
  TESSERA_SCALAR_FN T operator()(T u, T v) const { return Ops<T>::pow(u, v); }
};
template <class F>
constexpr bool kMathOp = false;
template <class T>
constexpr bool kMathOp<PowOp<T>> = true;

// The contiguous cases, the hot loops of elementwise ops and of fused tiles:
// cloned per instruction set like the math loops above (the math clones
// for kMathOp functors, the _math forms).
template <class T, class R, class F>
TESSERA_TARGET_CLONES void loop_vv(const T* a, const T* b, R* out, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}
template <class T, class R, class F>
TESSERA_TARGET_CLONES void loop_vs(const T* a, T b, R* out, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(a[i], b);
}
template <class T, class R, class F>
TESSERA_TARGET_CLONES void loop_sv(T a, const T* b, R* out, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(a, b[i]);
}
template <class T, class R, class F>
TESSERA_MATH_CLONES void loop_vv_math(const T* a, const T* b, R* out, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}
template <class T, class R, class F>
TESSERA_MATH_CLONES void loop_vs_math(const T* a, T b, R* out, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(a[i], b);
}
template <class T, class R, class F>
TESSERA_MATH_CLONES void loop_sv_math(T a, const T* b, R* out, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(a, b[i]);
}
// The broadcast cases' inner loop: strided runs (stride 0 for a scalar).
template <class T, class R, class F>
TESSERA_MATH_CLONES void loop_strided_math(const T* a, std::int64_t as, const T* b, std::int64_t bs, R* out,
                                           std::int64_t n, F f) {
  for (std::int64_t j = 0; j < n; ++j) out[j] = f(a[j * as], b[j * bs]);
}

template <class T>
T scalar_of(const Operand& o) {
  if (!o.is_scalar) return T{};
  return kFloat<T> ? static_cast<T>(o.f) : static_cast<T>(o.i);
}

// Operands that are contiguous runs of n elements or scalars (not both
// scalars): no shape walk.
template <class T, class R, class F>
void flat_loop(const Operand& a, const Operand& b, R* out, std::int64_t n, F f) {
  if (n == 0) return;
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  if constexpr (kMathOp<F>) {
    if (a.is_scalar) return loop_sv_math<T>(scalar_of<T>(a), pb, out, n, f);
    if (b.is_scalar) return loop_vs_math<T>(pa, scalar_of<T>(b), out, n, f);
    loop_vv_math<T>(pa, pb, out, n, f);
  } else {
    if (a.is_scalar) return loop_sv<T>(scalar_of<T>(a), pb, out, n, f);
    if (b.is_scalar) return loop_vs<T>(pa, scalar_of<T>(b), out, n, f);
    loop_vv<T>(pa, pb, out, n, f);
  }
}

template <class T, class R, class F>
void binary_loop(const Operand& a, const Operand& b, R* out, std::span<const std::int64_t> shape, F f) {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  if (n == 0) return;
  auto contiguous = [&](const Operand& o) {
    if (o.is_scalar) return false;
    std::int64_t acc = 1;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (shape[d] != 1 && o.strides[d] != acc) return false;
      acc *= shape[d];
    }
    return true;
  };
  const bool ca = contiguous(a), cb = contiguous(b);
  if ((ca || a.is_scalar) && (cb || b.is_scalar) && !(a.is_scalar && b.is_scalar))
    return flat_loop<T>(a, b, out, n, f);
  // General broadcast: NdIndex over the outer dims, strided inner loop.
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  const T sa = scalar_of<T>(a), sb = scalar_of<T>(b);
  const int r = static_cast<int>(shape.size());
  const std::int64_t inner = shape[r - 1];
  const std::vector<std::int64_t> none(r, 0);  // a scalar operand carries no strides
  const auto& ast = a.is_scalar ? none : a.strides;
  const auto& bst = b.is_scalar ? none : b.strides;
  const std::int64_t as = ast[r - 1], bs = bst[r - 1];
  const std::vector<std::int64_t> dims(shape.begin(), shape.end());
  std::int64_t o = 0;
  for (detail::NdIndex it(detail::first_dims(dims, r - 1), ast, bst); !it.done(); it.next(), o += inner) {
    const std::int64_t ao = it.offset(0), bo = it.offset(1);
    if constexpr (kMathOp<F>) {
      loop_strided_math<T>(a.is_scalar ? &sa : pa + ao, a.is_scalar ? 0 : as, b.is_scalar ? &sb : pb + bo,
                           b.is_scalar ? 0 : bs, out + o, inner, f);
    } else {
      for (std::int64_t j = 0; j < inner; ++j)
        out[o + j] = f(a.is_scalar ? sa : pa[ao + j * as], b.is_scalar ? sb : pb[bo + j * bs]);
    }
  }
}

// `run(out, f)` runs f over the operands: binary_loop for shaped operands,
// flat_loop for tiles.
template <class T, class Run>
void binary_typed(BinaryOp op, void* out, Run run) {
  using O = Ops<T>;
  T* y = static_cast<T*>(out);
  bool* yb = static_cast<bool*>(out);
  switch (op) {
    case BinaryOp::Add: return run(y, [](T u, T v) { return O::add(u, v); });
    case BinaryOp::Sub: return run(y, [](T u, T v) { return O::sub(u, v); });
    case BinaryOp::Mul: return run(y, [](T u, T v) { return O::mul(u, v); });
    case BinaryOp::Div: return run(y, [](T u, T v) { return O::div(u, v); });
    case BinaryOp::FloorDiv: return run(y, [](T u, T v) { return O::floordiv(u, v); });
    case BinaryOp::Mod: return run(y, [](T u, T v) { return O::mod(u, v); });
    case BinaryOp::Pow:
      if constexpr (kFloat<T>) return run(y, PowOp<T>{});
      else return run(y, [](T u, T v) { return O::pow(u, v); });
    case BinaryOp::Max: return run(y, [](T u, T v) { return O::max(u, v); });
    case BinaryOp::Min: return run(y, [](T u, T v) { return O::min(u, v); });
    case BinaryOp::Eq: return run(yb, [](T u, T v) { return O::eq(u, v); });
    case BinaryOp::Ne: return run(yb, [](T u, T v) { return O::ne(u, v); });
    case BinaryOp::Lt: return run(yb, [](T u, T v) { return O::lt(u, v); });
    case BinaryOp::Le: return run(yb, [](T u, T v) { return O::le(u, v); });
    case BinaryOp::Gt: return run(yb, [](T u, T v) { return O::gt(u, v); });
    case BinaryOp::Ge: return run(yb, [](T u, T v) { return O::ge(u, v); });
    case BinaryOp::And:
      return run(yb, [](T u, T v) { return O::logical_and(u, v); });
    case BinaryOp::Or:
      return run(yb, [](T u, T v) { return O::logical_or(u, v); });
    case BinaryOp::Xor:
      return run(yb, [](T u, T v) { return O::logical_xor(u, v); });
  }
}

}  // namespace

void unary(UnaryOp op, DType t, const void* x, void* y, std::int64_t n) {
  detail::dispatch(t, [&](auto tag) { unary_typed<decltype(tag)>(op, static_cast<const decltype(tag)*>(x), y, n); });
}

void binary(BinaryOp op, DType t, const Operand& a, const Operand& b, void* out,
            const std::vector<std::int64_t>& shape) {
  if (shape.empty()) {  // rank 0: one element
    std::vector<std::int64_t> one{1};
    Operand a1 = a, b1 = b;
    if (!a1.is_scalar) a1.strides = {0};
    if (!b1.is_scalar) b1.strides = {0};
    return binary(op, t, a1, b1, out, one);
  }
  detail::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    binary_typed<T>(op, out, [&](auto* y, auto f) { binary_loop<T>(a, b, y, shape, f); });
  });
}

void binary_flat(BinaryOp op, DType t, const Operand& a, const Operand& b, void* out, std::int64_t n) {
  detail::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    binary_typed<T>(op, out, [&](auto* y, auto f) { flat_loop<T>(a, b, y, n, f); });
  });
}

template <class T>
TESSERA_TARGET_CLONES void select_loop(const bool* c, const T* x, T xs, const T* y, T ys, T* o, std::int64_t n) {
  if (x && y) {
    for (std::int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : y[i];
  } else if (x) {
    for (std::int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : ys;
  } else if (y) {
    for (std::int64_t i = 0; i < n; ++i) o[i] = c[i] ? xs : y[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i) o[i] = c[i] ? xs : ys;
  }
}

void select_flat(DType t, const Operand& cond, const Operand& x, const Operand& y, void* out, std::int64_t n) {
  if (n == 0) return;
  detail::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out);
    if (cond.is_scalar) {
      const Operand& pick = cond.i != 0 ? x : y;
      if (pick.is_scalar) std::fill_n(o, n, scalar_of<T>(pick));
      else std::memcpy(o, pick.data, static_cast<std::size_t>(n) * sizeof(T));
      return;
    }
    select_loop<T>(static_cast<const bool*>(cond.data), x.is_scalar ? nullptr : static_cast<const T*>(x.data),
                   scalar_of<T>(x), y.is_scalar ? nullptr : static_cast<const T*>(y.data), scalar_of<T>(y), o, n);
  });
}

void select(DType t, const Operand& cond, const Operand& x, const Operand& y, void* out,
            const std::vector<std::int64_t>& shape) {
  const std::vector<std::int64_t> sh = shape.empty() ? std::vector<std::int64_t>{1} : shape;
  auto fix = [&](Operand o) {
    if (!o.is_scalar && shape.empty()) o.strides = {0};
    return o;
  };
  const Operand c = fix(cond), a = fix(x), b = fix(y);
  std::int64_t n = 1;
  for (auto s : sh) n *= s;
  if (n == 0) return;
  detail::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out);
    const int r = static_cast<int>(sh.size());
    auto val = [](const Operand& op, std::int64_t off) -> T {
      if (op.is_scalar) return kFloat<T> ? static_cast<T>(op.f) : static_cast<T>(op.i);
      return static_cast<const T*>(op.data)[off];
    };
    // NdIndex over the outer dims, a strided run along the last.
    const std::vector<std::int64_t> none(r, 0);  // a scalar operand carries no strides
    const auto& cst = c.is_scalar ? none : c.strides;
    const auto& xst = a.is_scalar ? none : a.strides;
    const auto& yst = b.is_scalar ? none : b.strides;
    const std::int64_t inner = sh[r - 1], cs = cst[r - 1], xs = xst[r - 1], ys = yst[r - 1];
    for (detail::NdIndex it(detail::first_dims(sh, r - 1), cst, xst, yst); !it.done(); it.next(), o += inner) {
      const std::int64_t co = it.offset(0), xo = it.offset(1), yo = it.offset(2);
      for (std::int64_t j = 0; j < inner; ++j) {
        const bool pick = c.is_scalar ? c.i != 0 : static_cast<const bool*>(c.data)[co + j * cs];
        o[j] = pick ? val(a, xo + j * xs) : val(b, yo + j * ys);
      }
    }
  });
}


}  // namespace tessera::cpu
