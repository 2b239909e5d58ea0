// Every tessera::Error subclass as a Python exception class under tessera,
// with the C++ message unchanged. Each also derives from the builtin
// exception a Python user would catch for it (ShapeError is a ValueError,
// DTypeError a TypeError, ...), so `except ValueError` keeps working.
#include "common.hpp"

namespace tessera_py {
namespace {

PyObject* g_error = nullptr;
PyObject* g_shape = nullptr;
PyObject* g_dtype = nullptr;
PyObject* g_sharding = nullptr;
PyObject* g_collective = nullptr;
PyObject* g_value = nullptr;
PyObject* g_device = nullptr;

PyObject* make_class(nb::module_& m, const char* name, std::initializer_list<PyObject*> bases, const char* doc) {
  nb::tuple base_tuple = nb::steal<nb::tuple>(PyTuple_New(static_cast<Py_ssize_t>(bases.size())));
  Py_ssize_t i = 0;
  for (PyObject* b : bases) {
    Py_INCREF(b);
    PyTuple_SET_ITEM(base_tuple.ptr(), i++, b);
  }
  const std::string qualified = std::string("tessera.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base_tuple.ptr(), nullptr);
  if (!cls) throw nb::python_error();
  m.attr(name) = nb::handle(cls);  // the module keeps a reference; so do we (never released)
  return cls;
}

}  // namespace

void init_errors(nb::module_& m) {
  g_error = make_class(m, "Error", {PyExc_Exception}, "Base of all Tessera errors.");
  g_shape = make_class(m, "ShapeError", {g_error, PyExc_ValueError},
                       "A shape (rank, sizes, element count) does not fit the op.");
  g_dtype = make_class(m, "DTypeError", {g_error, PyExc_TypeError},
                       "A dtype is not supported by the op or does not match.");
  g_sharding = make_class(m, "ShardingError", {g_error, PyExc_ValueError},
                          "A mesh, partition spec or sharding is invalid or ambiguous.");
  g_collective = make_class(m, "CollectiveError", {g_error, PyExc_RuntimeError},
                            "A collective failed: mismatch, timeout, or a failed participant.");
  g_value = make_class(m, "ValueError", {g_error, PyExc_ValueError},
                       "A value does not fit the op (out of the range it supports).");
  g_device = make_class(m, "DeviceError", {g_error, PyExc_RuntimeError},
                        "A device or runtime problem: bad device count, configuration too late.");

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ts::ShapeError& e) {
      PyErr_SetString(g_shape, e.what());
    } catch (const ts::DTypeError& e) {
      PyErr_SetString(g_dtype, e.what());
    } catch (const ts::ShardingError& e) {
      PyErr_SetString(g_sharding, e.what());
    } catch (const ts::CollectiveError& e) {
      PyErr_SetString(g_collective, e.what());
    } catch (const ts::ValueError& e) {
      PyErr_SetString(g_value, e.what());
    } catch (const ts::DeviceError& e) {
      PyErr_SetString(g_device, e.what());
    } catch (const ts::Error& e) {
      PyErr_SetString(g_error, e.what());
    }
  });
}

}  // namespace tessera_py
