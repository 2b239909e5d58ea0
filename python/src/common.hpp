// Helpers shared by the binding files: dtypes, Python scalars, operands.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include <tessera/tessera.hpp>

namespace nb = nanobind;
namespace ts = tessera;

namespace tessera_py {

void init_errors(nb::module_& m);
void init_sharding(nb::module_& m);
void init_array(nb::module_& m);
void init_ops(nb::module_& m);
void init_ops_more(nb::module_& m);  // after init_ops and init_shard_map: adds to numpy_ops and lax
void init_transforms(nb::module_& m);
void init_shard_map(nb::module_& m);
void init_random(nb::module_& m);
void init_explain(nb::module_& m);

/// Releases the GIL while this thread waits for device work that may call
/// back into Python: shard_map bodies run on the devices' worker threads and
/// take the GIL there. A body that finds no such release in progress raises
/// instead of waiting for a GIL that its caller holds (shard_map.cpp).
class ReleaseForDevices {
 public:
  ReleaseForDevices();
  ~ReleaseForDevices();
  ReleaseForDevices(const ReleaseForDevices&) = delete;
  ReleaseForDevices& operator=(const ReleaseForDevices&) = delete;

 private:
  nb::gil_scoped_release release_;
};

/// NumPy's name of a dtype: "float32", "int32", "bool", ...
const char* numpy_name(ts::DType t);
/// The numpy.dtype object for t.
nb::object numpy_dtype(ts::DType t);
/// A dtype from anything numpy.dtype() accepts (np.float32, "int32", float,
/// a numpy dtype); TypeError naming `op` for one Tessera has no equivalent.
ts::DType to_dtype(nb::handle obj, const char* op);
/// The same, with a default for None.
ts::DType to_dtype_or(nb::handle obj, ts::DType dflt, const char* op);

/// A Python bool, int or float (exactly those types: NumPy scalars are
/// strongly typed arrays) as a weakly typed Scalar; nullopt otherwise.
std::optional<ts::Scalar> as_scalar(nb::handle obj);

/// The sharding used where none is given: device 0 alone (JAX's default
/// placement), on a one-device mesh with axis "x".
const ts::NamedSharding& default_sharding();

/// A host value (NumPy array, list, NumPy scalar) placed per `sharding`,
/// keeping its NumPy dtype (converted to `dtype` first when given).
ts::Array from_host(nb::handle obj, const ts::NamedSharding& sharding, std::optional<ts::DType> dtype,
                    const char* op);
/// An operand as an Array: Arrays as they are, anything else through
/// from_host, replicated on `like`'s mesh (the default sharding without one).
ts::Array to_array(nb::handle obj, const ts::Array* like, const char* op);

/// Marks a Python function being traced on this thread (jit, grad, vmap,
/// shard_map bodies ...): while one is, Tessera errors raised by the ops it
/// calls name the Python file and line of the call (python_trace_site).
struct PythonTraceScope {
  PythonTraceScope();
  ~PythonTraceScope();
  PythonTraceScope(const PythonTraceScope&) = delete;
  PythonTraceScope& operator=(const PythonTraceScope&) = delete;
};
/// " (traced at FILE:LINE in FUNCTION)" for the Python frame now running
/// when inside a PythonTraceScope, "" otherwise. Needs the GIL.
std::string python_trace_site();

/// The gathered array as a new NumPy array.
nb::object to_numpy(const ts::Array& a);

/// Axis arguments of reductions: None (all), an int, or a tuple/list of ints.
ts::Axes to_axes(nb::handle obj);
/// A shape: an int or a sequence of ints.
ts::Shape to_shape(nb::handle obj);

}  // namespace tessera_py

namespace tessera_py {

/// Binary elementwise ops reachable from operators and tessera.numpy.
enum class Bin {
  add, subtract, multiply, divide, floor_divide, remainder, pow, maximum, minimum,
  equal, not_equal, less, less_equal, greater, greater_equal, logical_and, logical_or, logical_xor
};
/// True for what an operator accepts besides an Array: a Python bool, int or
/// float, a NumPy array or NumPy scalar.
bool is_operand(nb::handle h);
/// op(a, b): Python scalars stay weakly typed (the C++ Scalar overloads);
/// NumPy operands are placed replicated on the other operand's mesh.
ts::Array binary(Bin op, nb::handle a, nb::handle b);

/// A Python value that is a tuple of slices (Array and Shard indices).
nb::tuple index_to_py(const std::vector<ts::Slice>& index);

}  // namespace tessera_py
