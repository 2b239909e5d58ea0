// Conversions between Python values and Tessera's: dtypes, scalars, host
// arrays, axes and shapes.
#include <nanobind/ndarray.h>

#include <cstring>

#include "common.hpp"

namespace tessera_py {

using namespace nb::literals;

const char* numpy_name(ts::DType t) {
  switch (t) {
    case ts::DType::bool_: return "bool";
    case ts::DType::u8: return "uint8";
    case ts::DType::i8: return "int8";
    case ts::DType::u32: return "uint32";
    case ts::DType::i32: return "int32";
    case ts::DType::u64: return "uint64";
    case ts::DType::i64: return "int64";
    case ts::DType::f32: return "float32";
    case ts::DType::f64: return "float64";
  }
  return "?";
}

nb::object numpy_dtype(ts::DType t) { return nb::module_::import_("numpy").attr("dtype")(numpy_name(t)); }

namespace {
std::optional<ts::DType> from_numpy_name(const std::string& name) {
  static const std::pair<const char*, ts::DType> table[] = {
      {"bool", ts::DType::bool_}, {"uint8", ts::DType::u8},   {"int8", ts::DType::i8},
      {"uint32", ts::DType::u32}, {"int32", ts::DType::i32},  {"uint64", ts::DType::u64},
      {"int64", ts::DType::i64},  {"float32", ts::DType::f32}, {"float64", ts::DType::f64}};
  for (const auto& [n, t] : table)
    if (name == n) return t;
  return std::nullopt;
}
constexpr const char* kSupported = "bool, uint8, int8, uint32, int32, uint64, int64, float32, float64";
}  // namespace

ts::DType to_dtype(nb::handle obj, const char* op) {
  nb::object dt = nb::module_::import_("numpy").attr("dtype")(obj);
  const std::string name = nb::cast<std::string>(dt.attr("name"));
  if (auto t = from_numpy_name(name)) return *t;
  throw ts::DTypeError(std::string("[") + op + "] dtype " + name + " has no Tessera equivalent (supported: " +
                       kSupported + ")");
}

ts::DType to_dtype_or(nb::handle obj, ts::DType dflt, const char* op) {
  return obj.is_none() ? dflt : to_dtype(obj, op);
}

std::optional<ts::Scalar> as_scalar(nb::handle obj) {
  PyObject* p = obj.ptr();
  if (PyBool_Check(p)) return ts::Scalar(p == Py_True);
  if (PyLong_CheckExact(p)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(p, &overflow);
    if (!overflow) return ts::Scalar(v);
    if (overflow > 0) {
      const unsigned long long u = PyLong_AsUnsignedLongLong(p);
      if (!PyErr_Occurred()) return ts::Scalar(u);
      PyErr_Clear();
    }
    const std::string text = "Python int " + nb::cast<std::string>(nb::str(obj)) +
                             " is too large to convert to an array operand (beyond int64 and uint64)";
    PyErr_SetString(PyExc_OverflowError, text.c_str());
    throw nb::python_error();
  }
  if (PyFloat_CheckExact(p)) return ts::Scalar(PyFloat_AS_DOUBLE(p));
  return std::nullopt;
}

const ts::NamedSharding& default_sharding() {
  // Built on first use (it starts the runtime); never destroyed, so exit
  // order does not matter.
  static const ts::NamedSharding* s = new ts::NamedSharding(
      ts::Mesh(std::vector<ts::Device>{ts::devices().at(0)}, {1}, {"x"}), ts::P());
  return *s;
}

ts::Array from_host(nb::handle obj, const ts::NamedSharding& sharding, std::optional<ts::DType> dtype,
                    const char* op) {
  nb::module_ np = nb::module_::import_("numpy");
  // asarray, not ascontiguousarray: that one turns 0-d arrays into 1-d.
  nb::object arr = dtype ? np.attr("asarray")(obj, "dtype"_a = numpy_name(*dtype), "order"_a = "C")
                         : np.attr("asarray")(obj, "order"_a = "C");
  const std::string name = nb::cast<std::string>(arr.attr("dtype").attr("name"));
  auto t = from_numpy_name(name);
  if (!t)
    throw ts::DTypeError(std::string("[") + op + "] NumPy dtype " + name +
                         " has no Tessera equivalent (supported: " + kSupported + ")");
  ts::Shape shape = nb::cast<ts::Shape>(arr.attr("shape"));
  const std::uintptr_t ptr = nb::cast<std::uintptr_t>(arr.attr("ctypes").attr("data"));
  return ts::device_put_raw(reinterpret_cast<const void*>(ptr), *t, shape, sharding);
}

ts::Array to_array(nb::handle obj, const ts::Array* like, const char* op) {
  if (nb::isinstance<ts::Array>(obj)) return nb::cast<ts::Array>(obj);
  if (like && like->valid()) return from_host(obj, ts::NamedSharding(like->sharding().mesh(), ts::P()), {}, op);
  return from_host(obj, default_sharding(), {}, op);
}

nb::object to_numpy(const ts::Array& a) {
  nb::module_ np = nb::module_::import_("numpy");
  nb::object out = np.attr("empty")(nb::tuple(nb::cast(a.shape())), "dtype"_a = numpy_name(a.dtype()));
  const std::uintptr_t ptr = nb::cast<std::uintptr_t>(out.attr("ctypes").attr("data"));
  if (a.size() > 0) a.copy_to_host(reinterpret_cast<void*>(ptr), a.dtype(), "__array__");
  return out;
}

ts::Axes to_axes(nb::handle obj) {
  if (obj.is_none()) return ts::Axes();
  if (PyLong_Check(obj.ptr())) return ts::Axes(nb::cast<int>(obj));
  return ts::Axes(nb::cast<std::vector<int>>(obj));
}

ts::Shape to_shape(nb::handle obj) {
  if (!nb::hasattr(obj, "__len__")) return {nb::cast<std::int64_t>(obj.attr("__index__")())};
  ts::Shape out;
  for (nb::handle d : obj) out.push_back(nb::cast<std::int64_t>(d.attr("__index__")()));
  return out;
}

}  // namespace tessera_py
