// The elementwise kernels on CUDA GPUs (kernels.hpp): one kernel per dtype
// for unary, binary and select, switching on the op inside (the op is the
// same for every thread, so the branch costs nothing but a compare). Each
// element is computed by the same function of kernels/scalar_math.hpp that
// the CPU's loop calls for it (backend/cpu/elementwise.cpp), the f32
// polynomials with the C library's value for an element beyond their range,
// so an element gives the CPU's bits wherever the math stays in that source.
//
// Operands are walked by strides: output element i's row-major index gives
// each operand's offset (0-stride dims broadcast). Size-1 dims are dropped
// and dims that every operand steps through as one run are merged first,
// and when every array operand is contiguous the offset is i itself.
#include "kernels/scalar_math.hpp"  // first: see launch.cuh

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/kernels.hpp"
#include "backend/cuda/launch.cuh"
#include "tessera/error.hpp"
#include "core/dispatch.hpp"

namespace tessera::cuda {

namespace {

namespace math = detail::math;
namespace lm = detail::lm;
using std::int64_t;

const char* op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "negative";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Log1p: return "log1p";
    case UnaryOp::Expm1: return "expm1";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
    case UnaryOp::Sin: return "sin";
    case UnaryOp::Cos: return "cos";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Floor: return "floor";
    case UnaryOp::Ceil: return "ceil";
    case UnaryOp::Round: return "round";
    case UnaryOp::Sign: return "sign";
    case UnaryOp::IsNan: return "isnan";
    case UnaryOp::IsFinite: return "isfinite";
    case UnaryOp::Not: return "logical_not";
  }
  return "unary";
}

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "subtract";
    case BinaryOp::Mul: return "multiply";
    case BinaryOp::Div: return "divide";
    case BinaryOp::FloorDiv: return "floor_divide";
    case BinaryOp::Mod: return "remainder";
    case BinaryOp::Pow: return "pow";
    case BinaryOp::Max: return "maximum";
    case BinaryOp::Min: return "minimum";
    case BinaryOp::Eq: return "equal";
    case BinaryOp::Ne: return "not_equal";
    case BinaryOp::Lt: return "less";
    case BinaryOp::Le: return "less_equal";
    case BinaryOp::Gt: return "greater";
    case BinaryOp::Ge: return "greater_equal";
    case BinaryOp::And: return "logical_and";
    case BinaryOp::Or: return "logical_or";
    case BinaryOp::Xor: return "logical_xor";
  }
  return "binary";
}

using detail::dispatch;

// ------------------------------------------------------------ operands

/// One operand on the device: an array's data or a scalar in dtype T.
template <class T>
struct Arg {
  const T* data = nullptr;
  T scalar{};
  bool is_scalar = false;
  TESSERA_HD T at(int64_t off) const { return is_scalar ? scalar : data[off]; }
};

// The scalar as the CPU's scalar_of converts it.
template <class T>
Arg<T> arg_of(const Operand& o) {
  Arg<T> a;
  a.is_scalar = o.is_scalar;
  if (o.is_scalar) a.scalar = math::kFloat<T> ? static_cast<T>(o.f) : static_cast<T>(o.i);
  else a.data = static_cast<const T*>(o.data);
  return a;
}

/// Output element i's offsets into K operands: its row-major index over
/// `dims` dotted with each operand's strides, or i itself when `flat`.
template <int K>
struct Walk {
  int rank = 0;
  bool flat = true;
  int64_t dims[kMaxRank] = {};
  int64_t strides[K][kMaxRank] = {};

  // kFlat: the caller launched this walk only where `flat` holds, and the
  // kernel then has no division code (which holds registers even where no
  // element divides: fewer threads per SM).
  template <bool kFlat = false>
  TESSERA_HD void offsets(int64_t i, int64_t (&off)[K]) const {
    if constexpr (kFlat) {
      for (int k = 0; k < K; ++k) off[k] = i;
    } else {
      for (int k = 0; k < K; ++k) off[k] = flat ? i : 0;
      if (flat) return;
      for (int d = rank - 1; d >= 0; --d) {
        const int64_t q = i / dims[d], j = i - q * dims[d];
        i = q;
        for (int k = 0; k < K; ++k) off[k] += j * strides[k][d];
      }
    }
  }
};

/// The walk of `shape` for operands `ops` (checked: at most kMaxRank dims,
/// one stride per dim), and its element count in *n.
template <int K>
Walk<K> make_walk(const char* op, const std::vector<int64_t>& shape, const Operand* const (&ops)[K], int64_t* n) {
  const int r = static_cast<int>(shape.size());
  if (r > kMaxRank)
    throw ShapeError(std::string("[") + op + "] CUDA kernels take arrays of at most " + std::to_string(kMaxRank) +
                     " dims, got " + std::to_string(r));
  *n = 1;
  for (int64_t s : shape) *n *= s;
  Walk<K> w;
  for (int k = 0; k < K; ++k) {
    const Operand& o = *ops[k];
    if (o.is_scalar || r == 0) continue;
    if (static_cast<int>(o.strides.size()) != r)
      throw ShapeError(std::string("[") + op + "] internal: an operand has strides for " +
                       std::to_string(o.strides.size()) + " dims, the shape has " + std::to_string(r));
    int64_t acc = 1;
    for (int d = r - 1; d >= 0; --d) {
      if (shape[static_cast<std::size_t>(d)] != 1 && o.strides[static_cast<std::size_t>(d)] != acc) w.flat = false;
      acc *= shape[static_cast<std::size_t>(d)];
    }
  }
  if (w.flat) return w;
  for (int d = 0; d < r; ++d) {
    const int64_t s = shape[static_cast<std::size_t>(d)];
    if (s == 1) continue;  // contributes nothing to any offset
    int64_t st[K];
    for (int k = 0; k < K; ++k) st[k] = ops[k]->is_scalar ? 0 : ops[k]->strides[static_cast<std::size_t>(d)];
    // Merged into the dim before when every operand steps over this one as
    // one run of the other (both broadcast, or both contiguous together):
    // fewer divisions per element.
    bool merge = w.rank > 0;
    for (int k = 0; k < K && merge; ++k) merge = w.strides[k][w.rank - 1] == st[k] * s;
    if (merge) {
      w.dims[w.rank - 1] *= s;
      for (int k = 0; k < K; ++k) w.strides[k][w.rank - 1] = st[k];
      continue;
    }
    w.dims[w.rank] = s;
    for (int k = 0; k < K; ++k) w.strides[k][w.rank] = st[k];
    ++w.rank;
  }
  return w;
}

// ---------------------------------------------------------------- unary

// True for the ops the CPU kernel computes in T (the float-valued ones only
// in float dtypes).
template <class T>
bool unary_done(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: case UnaryOp::Abs: case UnaryOp::Sign: case UnaryOp::Floor: case UnaryOp::Ceil:
    case UnaryOp::Round: case UnaryOp::IsNan: case UnaryOp::IsFinite: case UnaryOp::Not:
      return true;
    default:
      return math::kFloat<T>;
  }
}

// The kernels below run as for_each_batched: a thread loads several
// elements' operands before it computes and stores any (one element at a
// time, a thread has one load in flight, and an SM's threads too few bytes
// in flight to keep memory busy). Each element reads only its own operands
// and writes only its own result, so an output that is an operand is fine.

// kHeavy: the transcendental functions (a polynomial and its slow path),
// whose registers would otherwise be every unary kernel's, leaving fewer
// threads per SM for `neg` or `abs` too.
template <class T, bool kHeavy>
struct UnaryKernel {
  UnaryOp op;
  const T* x;
  void* y;

  TESSERA_HD T load(int64_t i) const { return x[i]; }
  TESSERA_HD void store(int64_t i, T v) const {
    T* yt = static_cast<T*>(y);
    bool* yb = static_cast<bool*>(y);
    switch (op) {
      case UnaryOp::Neg: yt[i] = math::neg(v); return;
      case UnaryOp::Abs: yt[i] = math::abs(v); return;
      case UnaryOp::Sign: yt[i] = math::sign(v); return;
      case UnaryOp::Floor: yt[i] = math::floor(v); return;
      case UnaryOp::Ceil: yt[i] = math::ceil(v); return;
      case UnaryOp::Round: yt[i] = math::round(v); return;
      case UnaryOp::IsNan: yb[i] = math::is_nan(v); return;
      case UnaryOp::IsFinite: yb[i] = math::is_finite(v); return;
      case UnaryOp::Not: yb[i] = math::logical_not(v); return;
      default: break;
    }
    if constexpr (math::kFloat<T>) {
      constexpr bool f32 = sizeof(T) == 4;
      switch (op) {
        case UnaryOp::Sqrt: yt[i] = math::sqrt(v); return;
        case UnaryOp::Rsqrt: yt[i] = math::rsqrt(v); return;
        default: break;
      }
      if constexpr (kHeavy) {
        switch (op) {
          case UnaryOp::Exp:
            if constexpr (f32) yt[i] = math::exp_f32_checked(v, 1.0f);
            else yt[i] = math::exp(v);
            return;
          case UnaryOp::Log:
            if constexpr (f32) yt[i] = math::log_f32_checked(v);
            else yt[i] = math::log(v);
            return;
          case UnaryOp::Log1p: yt[i] = math::log1p(v); return;
          case UnaryOp::Expm1: yt[i] = math::expm1(v); return;
          case UnaryOp::Sin: yt[i] = math::trig_checked<T, 0>(v); return;
          case UnaryOp::Cos: yt[i] = math::trig_checked<T, 1>(v); return;
          case UnaryOp::Tanh:
            if constexpr (f32) yt[i] = math::tanh_f32(v);
            else yt[i] = math::tanh(v);
            return;
          case UnaryOp::Sigmoid:
            if constexpr (f32) yt[i] = math::sigmoid_f32_checked(v);
            else yt[i] = math::sigmoid(v);
            return;
          default: return;
        }
      }
    }
  }
};

// Ops the light unary kernel computes.
constexpr bool unary_is_light(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: case UnaryOp::Abs: case UnaryOp::Sign: case UnaryOp::Floor: case UnaryOp::Ceil:
    case UnaryOp::Round: case UnaryOp::IsNan: case UnaryOp::IsFinite: case UnaryOp::Not: case UnaryOp::Sqrt:
    case UnaryOp::Rsqrt:
      return true;
    default:
      return false;
  }
}

// --------------------------------------------------------------- binary

// kPow: pow alone (in float dtypes a log and an exp, whose registers would
// otherwise be every binary kernel's); the other ops without it.
template <class T, bool kFlat, bool kPow>
struct BinaryKernel {
  BinaryOp op;
  Arg<T> a, b;
  void* out;
  Walk<2> w;

  struct Pair {
    T u, v;
  };
  TESSERA_HD Pair load(int64_t i) const {
    int64_t off[2];
    w.template offsets<kFlat>(i, off);
    return {a.at(off[0]), b.at(off[1])};
  }
  TESSERA_HD void store(int64_t i, Pair p) const {
    const T u = p.u, v = p.v;
    using O = math::Ops<T>;
    T* y = static_cast<T*>(out);
    bool* yb = static_cast<bool*>(out);
    if constexpr (kPow) {
      y[i] = O::pow(u, v);
      return;
    }
    switch (op) {
      case BinaryOp::Add: y[i] = O::add(u, v); return;
      case BinaryOp::Sub: y[i] = O::sub(u, v); return;
      case BinaryOp::Mul: y[i] = O::mul(u, v); return;
      case BinaryOp::Div: y[i] = O::div(u, v); return;
      case BinaryOp::FloorDiv: y[i] = O::floordiv(u, v); return;
      case BinaryOp::Mod: y[i] = O::mod(u, v); return;
      case BinaryOp::Pow: return;  // (kPow)
      case BinaryOp::Max: y[i] = O::max(u, v); return;
      case BinaryOp::Min: y[i] = O::min(u, v); return;
      case BinaryOp::Eq: yb[i] = O::eq(u, v); return;
      case BinaryOp::Ne: yb[i] = O::ne(u, v); return;
      case BinaryOp::Lt: yb[i] = O::lt(u, v); return;
      case BinaryOp::Le: yb[i] = O::le(u, v); return;
      case BinaryOp::Gt: yb[i] = O::gt(u, v); return;
      case BinaryOp::Ge: yb[i] = O::ge(u, v); return;
      case BinaryOp::And: yb[i] = O::logical_and(u, v); return;
      case BinaryOp::Or: yb[i] = O::logical_or(u, v); return;
      case BinaryOp::Xor: yb[i] = O::logical_xor(u, v); return;
    }
  }
};

// --------------------------------------------------------------- select

template <class T, bool kFlat>
struct SelectKernel {
  Arg<bool> c;
  Arg<T> x, y;
  T* out;
  Walk<3> w;

  // Both values are read (as the CPU's select, which vectorises): the loads
  // stay independent of the condition, all in flight at once.
  struct Values {
    bool c;
    T x, y;
  };
  TESSERA_HD Values load(int64_t i) const {
    int64_t off[3];
    w.template offsets<kFlat>(i, off);
    return {c.at(off[0]), x.at(off[1]), y.at(off[2])};
  }
  TESSERA_HD void store(int64_t i, Values v) const { out[i] = v.c ? v.x : v.y; }
};

}  // namespace

void unary(UnaryOp op, DType t, const void* x, void* y, std::int64_t n) {
  if (n <= 0) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    if (!unary_done<T>(op)) return;  // as the CPU: the front end converts to f32 first
    if (unary_is_light(op))
      for_each_batched(op_name(op), n, UnaryKernel<T, false>{op, static_cast<const T*>(x), y});
    else
      for_each_batched(op_name(op), n, UnaryKernel<T, true>{op, static_cast<const T*>(x), y});
  });
}

void binary(BinaryOp op, DType t, const Operand& a, const Operand& b, void* out,
            const std::vector<std::int64_t>& shape) {
  const char* name = op_name(op);
  int64_t n = 0;
  const Operand* const ops[2] = {&a, &b};
  const Walk<2> w = make_walk(name, shape, ops, &n);
  if (n <= 0) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    const Arg<T> x = arg_of<T>(a), y = arg_of<T>(b);
    if (op == BinaryOp::Pow) {
      if (w.flat) for_each_batched(name, n, BinaryKernel<T, true, true>{op, x, y, out, w});
      else for_each_batched(name, n, BinaryKernel<T, false, true>{op, x, y, out, w});
    } else if (w.flat) {
      for_each_batched(name, n, BinaryKernel<T, true, false>{op, x, y, out, w});
    } else {
      for_each_batched(name, n, BinaryKernel<T, false, false>{op, x, y, out, w});
    }
  });
}

void select(DType t, const Operand& cond, const Operand& x, const Operand& y, void* out,
            const std::vector<std::int64_t>& shape) {
  int64_t n = 0;
  const Operand* const ops[3] = {&cond, &x, &y};
  const Walk<3> w = make_walk("select", shape, ops, &n);
  if (n <= 0) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    if (w.flat)
      for_each_batched("select", n,
                       SelectKernel<T, true>{arg_of<bool>(cond), arg_of<T>(x), arg_of<T>(y), static_cast<T*>(out), w});
    else
      for_each_batched("select", n,
                       SelectKernel<T, false>{arg_of<bool>(cond), arg_of<T>(x), arg_of<T>(y), static_cast<T*>(out), w});
  });
}

}  // namespace tessera::cuda
