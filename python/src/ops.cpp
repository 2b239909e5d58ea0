// tessera.numpy: jax.numpy's names and keyword arguments over the C++ ops.
// Functions take Arrays, Python scalars and NumPy values; creation functions
// take `device=` (a NamedSharding or a Device; default: device 0).
#include "common.hpp"

namespace tessera_py {
namespace {

using namespace nb::literals;
constexpr std::source_location kNoLoc{};

ts::NamedSharding sharding_or_default(nb::handle device) {
  if (device.is_none()) return default_sharding();
  if (nb::isinstance<ts::NamedSharding>(device)) return nb::cast<ts::NamedSharding>(device);
  if (nb::isinstance<ts::Device>(device))
    return ts::NamedSharding(ts::Mesh(std::vector<ts::Device>{nb::cast<ts::Device>(device)}, {1}, {"x"}), ts::P());
  throw nb::type_error(("device: expected a NamedSharding or a Device, got " +
                        nb::cast<std::string>(nb::repr(device))).c_str());
}

ts::Array arr(nb::handle h, const char* op) { return to_array(h, nullptr, op); }

using Unary = ts::Array (*)(const ts::Array&, std::source_location);
using Reduce = ts::Array (*)(const ts::Array&, const ts::Axes&, const ts::ReduceOptions&, std::source_location);

void def_unary(nb::module_& m, const char* name, Unary f, const char* op) {
  m.def(name, [f, op](nb::handle x) { return f(arr(x, op), kNoLoc); }, "x"_a);
}

void def_binary(nb::module_& m, const char* name, Bin op) {
  m.def(name, [op](nb::handle x1, nb::handle x2) { return binary(op, x1, x2); }, "x1"_a, "x2"_a);
}

void def_reduce(nb::module_& m, const char* name, Reduce f) {
  m.def(name, [f, name](nb::handle a, nb::handle axis, bool keepdims) {
    ts::ReduceOptions opt;
    opt.keepdims = keepdims;
    return f(arr(a, name), to_axes(axis), opt, kNoLoc);
  }, "a"_a, "axis"_a = nb::none(), "keepdims"_a = false);
}

// Python numbers for arange: all ints -> int32 (JAX's default), else float32.
bool is_int(nb::handle h) { return h.is_none() || (PyLong_Check(h.ptr()) && !PyBool_Check(h.ptr())); }

std::vector<ts::Array> arrays_of(nb::handle seq, const char* op) {
  std::vector<ts::Array> out;
  for (nb::handle h : seq) out.push_back(out.empty() ? arr(h, op) : to_array(h, &out.front(), op));
  return out;
}

}  // namespace

void init_ops(nb::module_& m) {
  nb::module_ np = m.def_submodule("numpy_ops", "The functions of tessera.numpy.");

  // ------------------------------------------------------------- creation
  np.def("zeros", [](nb::handle shape, nb::handle dtype, nb::handle device) {
    return ts::zeros(to_shape(shape), to_dtype_or(dtype, ts::f32, "zeros"), sharding_or_default(device), kNoLoc);
  }, "shape"_a, "dtype"_a = nb::none(), nb::kw_only(), "device"_a = nb::none());
  np.def("ones", [](nb::handle shape, nb::handle dtype, nb::handle device) {
    return ts::ones(to_shape(shape), to_dtype_or(dtype, ts::f32, "ones"), sharding_or_default(device), kNoLoc);
  }, "shape"_a, "dtype"_a = nb::none(), nb::kw_only(), "device"_a = nb::none());
  np.def("full", [](nb::handle shape, nb::handle fill_value, nb::handle dtype, nb::handle device) {
    auto v = as_scalar(fill_value);
    if (!v) throw nb::type_error("full: fill_value must be a Python bool, int or float so far");
    ts::DType dflt = v->kind() == ts::Scalar::Kind::Bool  ? ts::DType::bool_
                     : v->kind() == ts::Scalar::Kind::Int ? ts::DType::i32
                                                          : ts::DType::f32;
    return ts::full(to_shape(shape), *v, to_dtype_or(dtype, dflt, "full"), sharding_or_default(device), kNoLoc);
  }, "shape"_a, "fill_value"_a, "dtype"_a = nb::none(), nb::kw_only(), "device"_a = nb::none());
  np.def("zeros_like", [](const ts::Array& a, nb::handle dtype) {
    return ts::zeros(a.shape(), to_dtype_or(dtype, a.dtype(), "zeros_like"), a.sharding(), kNoLoc);
  }, "a"_a, "dtype"_a = nb::none());
  np.def("ones_like", [](const ts::Array& a, nb::handle dtype) {
    return ts::ones(a.shape(), to_dtype_or(dtype, a.dtype(), "ones_like"), a.sharding(), kNoLoc);
  }, "a"_a, "dtype"_a = nb::none());
  np.def("arange", [](nb::handle start, nb::handle stop, nb::handle step, nb::handle dtype, nb::handle device) {
    const bool ints = is_int(start) && is_int(stop) && is_int(step);
    double lo = 0, hi = nb::cast<double>(nb::float_(start)), st = 1;
    if (!stop.is_none()) lo = hi, hi = nb::cast<double>(nb::float_(stop));
    if (!step.is_none()) st = nb::cast<double>(nb::float_(step));
    return ts::arange(lo, hi, st, to_dtype_or(dtype, ints ? ts::i32 : ts::f32, "arange"), sharding_or_default(device),
                      kNoLoc);
  }, "start"_a, "stop"_a = nb::none(), "step"_a = nb::none(), "dtype"_a = nb::none(), nb::kw_only(),
  "device"_a = nb::none());
  np.def("linspace", [](double start, double stop, std::int64_t num, bool endpoint, nb::handle dtype, nb::handle device) {
    return ts::linspace(start, stop, num, to_dtype_or(dtype, ts::f32, "linspace"), sharding_or_default(device), endpoint,
                        kNoLoc);
  }, "start"_a, "stop"_a, "num"_a = 50, "endpoint"_a = true, "dtype"_a = nb::none(), nb::kw_only(),
  "device"_a = nb::none());
  np.def("eye", [](std::int64_t n, std::optional<std::int64_t> M, std::int64_t k, nb::handle dtype, nb::handle device) {
    return ts::eye(n, M.value_or(n), k, to_dtype_or(dtype, ts::f32, "eye"), sharding_or_default(device), kNoLoc);
  }, "N"_a, "M"_a = nb::none(), "k"_a = 0, "dtype"_a = nb::none(), nb::kw_only(), "device"_a = nb::none());
  auto asarray = [](nb::handle a, nb::handle dtype, nb::handle device) -> ts::Array {
    std::optional<ts::DType> dt;
    if (!dtype.is_none()) dt = to_dtype(dtype, "asarray");
    if (nb::isinstance<ts::Array>(a)) {
      ts::Array x = nb::cast<ts::Array>(a);
      if (dt && *dt != x.dtype()) x = ts::astype(x, *dt, kNoLoc);
      return device.is_none() ? x : ts::device_put(x, sharding_or_default(device));
    }
    return from_host(a, sharding_or_default(device), dt, "asarray");
  };
  np.def("asarray", asarray, "a"_a, "dtype"_a = nb::none(), nb::kw_only(), "device"_a = nb::none());
  np.def("array", asarray, "object"_a, "dtype"_a = nb::none(), nb::kw_only(), "device"_a = nb::none());

  // ---------------------------------------------------------- elementwise
  def_binary(np, "add", Bin::add);
  def_binary(np, "subtract", Bin::subtract);
  def_binary(np, "multiply", Bin::multiply);
  def_binary(np, "divide", Bin::divide);
  def_binary(np, "true_divide", Bin::divide);
  def_binary(np, "floor_divide", Bin::floor_divide);
  def_binary(np, "remainder", Bin::remainder);
  def_binary(np, "mod", Bin::remainder);
  def_binary(np, "power", Bin::pow);
  def_binary(np, "pow", Bin::pow);
  def_binary(np, "maximum", Bin::maximum);
  def_binary(np, "minimum", Bin::minimum);
  def_binary(np, "equal", Bin::equal);
  def_binary(np, "not_equal", Bin::not_equal);
  def_binary(np, "less", Bin::less);
  def_binary(np, "less_equal", Bin::less_equal);
  def_binary(np, "greater", Bin::greater);
  def_binary(np, "greater_equal", Bin::greater_equal);
  def_binary(np, "logical_and", Bin::logical_and);
  def_binary(np, "logical_or", Bin::logical_or);
  def_binary(np, "logical_xor", Bin::logical_xor);

  def_unary(np, "negative", &ts::negative, "negative");
  def_unary(np, "abs", &ts::abs, "abs");
  def_unary(np, "absolute", &ts::abs, "absolute");
  def_unary(np, "exp", &ts::exp, "exp");
  def_unary(np, "log", &ts::log, "log");
  def_unary(np, "log1p", &ts::log1p, "log1p");
  def_unary(np, "expm1", &ts::expm1, "expm1");
  def_unary(np, "sqrt", &ts::sqrt, "sqrt");
  def_unary(np, "sin", &ts::sin, "sin");
  def_unary(np, "cos", &ts::cos, "cos");
  def_unary(np, "tanh", &ts::tanh, "tanh");
  def_unary(np, "floor", &ts::floor, "floor");
  def_unary(np, "ceil", &ts::ceil, "ceil");
  def_unary(np, "round", &ts::round, "round");
  def_unary(np, "sign", &ts::sign, "sign");
  def_unary(np, "isnan", &ts::isnan, "isnan");
  def_unary(np, "isfinite", &ts::isfinite, "isfinite");
  def_unary(np, "logical_not", &ts::logical_not, "logical_not");
  np.def("square", [](nb::handle x) { ts::Array a = arr(x, "square"); return ts::multiply(a, a, {}, kNoLoc); }, "x"_a);
  np.def("astype", [](nb::handle x, nb::handle dtype) { return ts::astype(arr(x, "astype"), to_dtype(dtype, "astype"), kNoLoc); },
         "x"_a, "dtype"_a);
  np.def("where", [](nb::handle condition, nb::handle x, nb::handle y) {
    ts::Array c = arr(condition, "where");
    auto sx = as_scalar(x), sy = as_scalar(y);
    if (sx && sy) {
      ts::Array ax = ts::full(c.shape(), *sx, ts::f32, c.sharding(), kNoLoc);
      return ts::where(c, ax, *sy, kNoLoc);
    }
    if (sy) return ts::where(c, to_array(x, &c, "where"), *sy, kNoLoc);
    if (sx) return ts::where(c, *sx, to_array(y, &c, "where"), kNoLoc);
    return ts::where(c, to_array(x, &c, "where"), to_array(y, &c, "where"), {}, kNoLoc);
  }, "condition"_a, "x"_a, "y"_a);
  np.def("clip", [](nb::handle a, nb::handle lo, nb::handle hi) {
    auto num = [](nb::handle h) -> std::optional<ts::Scalar> {
      if (h.is_none()) return std::nullopt;
      auto s = as_scalar(h);
      if (!s) throw nb::type_error("clip: min and max must be Python numbers or None so far");
      return s;
    };
    return ts::clip(arr(a, "clip"), num(lo), num(hi), kNoLoc);
  }, "arr"_a, "min"_a = nb::none(), "max"_a = nb::none());

  // ----------------------------------------------------------- reductions
  def_reduce(np, "sum", &ts::sum);
  def_reduce(np, "mean", &ts::mean);
  def_reduce(np, "max", &ts::max);
  def_reduce(np, "min", &ts::min);
  def_reduce(np, "amax", &ts::max);
  def_reduce(np, "amin", &ts::min);
  def_reduce(np, "prod", &ts::prod);
  def_reduce(np, "any", &ts::any);
  def_reduce(np, "all", &ts::all);
  for (auto [name, f] : {std::pair{"argmax", &ts::argmax}, std::pair{"argmin", &ts::argmin}}) {
    np.def(name, [f, name](nb::handle a, std::optional<int> axis, bool keepdims) {
      ts::Array x = arr(a, name);
      ts::ReduceOptions opt;
      opt.keepdims = keepdims;
      if (!axis) {
        if (keepdims) throw nb::value_error("argmax/argmin: keepdims=True needs an axis so far");
        return f(ts::reshape(x, {-1}, {}, kNoLoc), 0, opt, kNoLoc);
      }
      return f(x, *axis, opt, kNoLoc);
    }, "a"_a, "axis"_a = nb::none(), "keepdims"_a = false);
  }
  np.def("cumsum", [](nb::handle a, std::optional<int> axis) {
    ts::Array x = arr(a, "cumsum");
    if (!axis) return ts::cumsum(ts::reshape(x, {-1}, {}, kNoLoc), 0, kNoLoc);
    return ts::cumsum(x, *axis, kNoLoc);
  }, "a"_a, "axis"_a = nb::none());

  // ------------------------------------------------------- linear algebra
  np.def("matmul", [](nb::handle a, nb::handle b) {
    ts::Array x = arr(a, "matmul");
    return ts::matmul(x, to_array(b, &x, "matmul"), {}, kNoLoc);
  }, "a"_a, "b"_a);
  np.def("dot", [](nb::handle a, nb::handle b) {
    ts::Array x = arr(a, "dot");
    return ts::dot(x, to_array(b, &x, "dot"), {}, kNoLoc);
  }, "a"_a, "b"_a);
  np.def("einsum", [](const std::string& subscripts, nb::handle a, nb::handle b) {
    ts::Array x = arr(a, "einsum");
    return ts::einsum(subscripts, x, to_array(b, &x, "einsum"), {}, kNoLoc);
  }, "subscripts"_a, "a"_a, "b"_a, "Two-operand einsum, e.g. 'bij,bjk->bik'.");

  // ---------------------------------------------------------------- shape
  np.def("reshape", [](nb::handle a, nb::handle shape) {
    return ts::reshape(arr(a, "reshape"), to_shape(shape), {}, kNoLoc);
  }, "a"_a, "shape"_a);
  np.def("transpose", [](nb::handle a, nb::handle axes) {
    std::vector<int> perm;
    if (!axes.is_none()) perm = nb::cast<std::vector<int>>(axes);
    return ts::transpose(arr(a, "transpose"), perm, kNoLoc);
  }, "a"_a, "axes"_a = nb::none());
  np.def("swapaxes", [](nb::handle a, int axis1, int axis2) { return ts::swapaxes(arr(a, "swapaxes"), axis1, axis2, kNoLoc); },
         "a"_a, "axis1"_a, "axis2"_a);
  np.def("expand_dims", [](nb::handle a, int axis) { return ts::expand_dims(arr(a, "expand_dims"), axis, kNoLoc); },
         "a"_a, "axis"_a);
  np.def("squeeze", [](nb::handle a, nb::handle axis) {
    std::vector<int> axes;
    if (!axis.is_none()) axes = to_axes(axis).axes();
    return ts::squeeze(arr(a, "squeeze"), axes, kNoLoc);
  }, "a"_a, "axis"_a = nb::none());
  np.def("broadcast_to", [](nb::handle a, nb::handle shape) {
    return ts::broadcast_to(arr(a, "broadcast_to"), to_shape(shape), kNoLoc);
  }, "array"_a, "shape"_a);
  np.def("concatenate", [](nb::handle arrays, int axis) {
    return ts::concatenate(arrays_of(arrays, "concatenate"), axis, kNoLoc);
  }, "arrays"_a, "axis"_a = 0);
  np.def("stack", [](nb::handle arrays, int axis) { return ts::stack(arrays_of(arrays, "stack"), axis, kNoLoc); },
         "arrays"_a, "axis"_a = 0);
  np.def("flip", [](nb::handle m, int axis) { return ts::flip(arr(m, "flip"), axis, kNoLoc); }, "m"_a, "axis"_a);
  np.def("roll", [](nb::handle a, std::int64_t shift, int axis) { return ts::roll(arr(a, "roll"), shift, axis, kNoLoc); },
         "a"_a, "shift"_a, "axis"_a);
  np.def("diff", [](nb::handle a, int n, int axis, nb::handle prepend, nb::handle append) {
    ts::Array x = arr(a, "diff");
    ts::DiffOptions opt;
    if (!prepend.is_none()) opt.prepend = to_array(prepend, &x, "diff");
    if (!append.is_none()) opt.append = to_array(append, &x, "diff");
    return ts::diff(x, n, axis, opt, kNoLoc);
  }, "a"_a, "n"_a = 1, "axis"_a = -1, "prepend"_a = nb::none(), "append"_a = nb::none());
  np.def("take", [](nb::handle a, nb::handle indices, std::optional<int> axis) {
    ts::Array x = arr(a, "take");
    ts::Array idx = to_array(indices, &x, "take");
    if (!axis) return ts::take(ts::reshape(x, {-1}, {}, kNoLoc), idx, 0, kNoLoc);
    return ts::take(x, idx, *axis, kNoLoc);
  }, "a"_a, "indices"_a, "axis"_a = nb::none());
}

}  // namespace tessera_py
