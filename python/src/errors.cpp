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

thread_local int t_trace_depth = 0;

void set(PyObject* cls, const std::exception& e) {
  const std::string text = e.what() + python_trace_site();
  PyErr_SetString(cls, text.c_str());
}

}  // namespace

PythonTraceScope::PythonTraceScope() { ++t_trace_depth; }
PythonTraceScope::~PythonTraceScope() { --t_trace_depth; }

std::string python_trace_site() {
  if (t_trace_depth == 0) return "";
  // The innermost frame outside the tessera package (its Python wrappers
  // call the bindings for the user): the user's line.
  static const std::string package = [] {
    nb::object os_path = nb::module_::import_("os.path");
    return nb::cast<std::string>(os_path.attr("dirname")(nb::module_::import_("tessera").attr("__file__"))) + "/";
  }();
  nb::object frame = nb::borrow(reinterpret_cast<PyObject*>(PyEval_GetFrame()));
  while (frame.ptr()) {
    auto* f = reinterpret_cast<PyFrameObject*>(frame.ptr());
    nb::object code = nb::steal(reinterpret_cast<PyObject*>(PyFrame_GetCode(f)));
    const std::string file = nb::cast<std::string>(nb::str(code.attr("co_filename")));
    if (file.rfind(package, 0) != 0)
      return " (traced at " + file + ":" + std::to_string(PyFrame_GetLineNumber(f)) + " in " +
             nb::cast<std::string>(nb::str(code.attr("co_name"))) + ")";
    frame = nb::steal(reinterpret_cast<PyObject*>(PyFrame_GetBack(f)));
  }
  return "";
}

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
      set(g_shape, e);
    } catch (const ts::DTypeError& e) {
      set(g_dtype, e);
    } catch (const ts::ShardingError& e) {
      set(g_sharding, e);
    } catch (const ts::CollectiveError& e) {
      set(g_collective, e);
    } catch (const ts::ValueError& e) {
      set(g_value, e);
    } catch (const ts::DeviceError& e) {
      set(g_device, e);
    } catch (const ts::Error& e) {
      set(g_error, e);
    }
  });
}

}  // namespace tessera_py
