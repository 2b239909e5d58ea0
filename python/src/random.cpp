// tessera.random: threefry-2x32 keys and samplers, bitwise JAX's (with
// jax_threefry_partitionable, its default). A key is a key array: a u32
// Array whose last dim holds the key's two words (JAX's key_data), so keys
// shard, pass through shard_map in_specs, jit and vmap like any array.
#include "common.hpp"

namespace tessera_py {
namespace {

using namespace nb::literals;
constexpr std::source_location kNoLoc{};

// A seed as JAX reads a 64-bit one: a Python int in [-2^63, 2^64), negative
// ones as their two's complement.
std::uint64_t to_seed(nb::handle seed) {
  if (!PyLong_Check(seed.ptr()))
    throw nb::type_error(("key: seed must be an int, got " + nb::cast<std::string>(nb::repr(seed))).c_str());
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(seed.ptr(), &overflow);
  if (!overflow) return static_cast<std::uint64_t>(v);
  if (overflow > 0) {
    const unsigned long long u = PyLong_AsUnsignedLongLong(seed.ptr());
    if (!PyErr_Occurred()) return u;
    PyErr_Clear();
  }
  const std::string text = "key: seed " + nb::cast<std::string>(nb::str(seed)) + " does not fit in 64 bits";
  PyErr_SetString(PyExc_OverflowError, text.c_str());
  throw nb::python_error();
}

// fold_in's data as JAX takes it: modulo 2^32.
std::uint32_t to_u32(nb::handle data) {
  const nb::object i = nb::handle(data).attr("__index__")();
  const unsigned long long v = PyLong_AsUnsignedLongLongMask(i.ptr());  // any int, modulo 2^64
  if (PyErr_Occurred()) throw nb::python_error();
  return static_cast<std::uint32_t>(v);
}

ts::Array key_array(nb::handle key, const char* op) {
  if (nb::isinstance<ts::Array>(key)) return nb::cast<ts::Array>(key);
  return from_host(key, default_sharding(), {}, op);
}

}  // namespace

void init_random(nb::module_& m) {
  nb::module_ r = m.def_submodule("random", "Threefry keys and samplers (JAX's values, bitwise).");

  r.def("key", [](nb::handle seed) {
    return ts::random::key_data(ts::random::key(to_seed(seed)), default_sharding(), kNoLoc);
  }, "seed"_a, "A key from a seed: u32[2] (seed >> 32, seed & 0xffffffff), on device 0.");

  r.def("split", [](nb::handle key, int num) { return ts::random::split(key_array(key, "split"), num, kNoLoc); },
        "key"_a, "num"_a = 2, "Keys (*B, 2) -> (*B, num, 2); one key (2,) -> (num, 2).");

  r.def("fold_in", [](nb::handle key, nb::handle data) {
    const ts::Array k = key_array(key, "fold_in");
    if (nb::isinstance<ts::Array>(data)) return ts::random::fold_in(k, nb::cast<ts::Array>(data), kNoLoc);
    return ts::random::fold_in(k, to_u32(data), kNoLoc);
  }, "key"_a, "data"_a, "Each key folded with data: an int (modulo 2^32) or an integer Array (a scalar or one per key).");

  r.def("uniform", [](nb::handle key, nb::handle shape, nb::handle dtype, double minval, double maxval,
                      std::optional<ts::NamedSharding> out_sharding) {
    const ts::Array k = key_array(key, "uniform");
    const ts::DType t = to_dtype_or(dtype, ts::f32, "uniform");
    if (out_sharding) return ts::random::uniform(k, to_shape(shape), t, *out_sharding, minval, maxval, kNoLoc);
    return ts::random::uniform(k, to_shape(shape), t, minval, maxval, kNoLoc);
  }, "key"_a, "shape"_a = nb::tuple(), "dtype"_a = nb::none(), "minval"_a = 0.0, "maxval"_a = 1.0, nb::kw_only(),
  "out_sharding"_a = nb::none(),
  "Uniform in [minval, maxval). Without out_sharding the result is replicated on the key's mesh (inside a "
  "shard_map body: local).");

  r.def("normal", [](nb::handle key, nb::handle shape, nb::handle dtype, std::optional<ts::NamedSharding> out_sharding) {
    const ts::Array k = key_array(key, "normal");
    const ts::DType t = to_dtype_or(dtype, ts::f32, "normal");
    if (out_sharding) return ts::random::normal(k, to_shape(shape), t, *out_sharding, kNoLoc);
    return ts::random::normal(k, to_shape(shape), t, kNoLoc);
  }, "key"_a, "shape"_a = nb::tuple(), "dtype"_a = nb::none(), nb::kw_only(), "out_sharding"_a = nb::none(),
  "Standard normal. Without out_sharding the result is replicated on the key's mesh.");
}

}  // namespace tessera_py
