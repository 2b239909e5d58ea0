// shard_map of a Python function and the collectives of tessera.lax.
//
// Threading. The C++ shard_map runs the body once per device, each on that
// device's worker thread, all at once (they meet in collectives). So:
// - the call releases the GIL on the calling thread while the devices run
//   (ReleaseForDevices);
// - the body takes the GIL to call the Python function, and the collectives
//   release it while they wait for the other members: a member holding the
//   GIL in psum would otherwise keep every other member from reaching it;
// - a Python exception in a body is carried to the calling thread as a C++
//   exception (BodyError): run_spmd aborts the session with its message,
//   which wakes the members waiting in collectives, and rethrows the first
//   error that is not such an echo; the translator registered here raises
//   the original Python exception again. A collective cut short by another
//   member's failure raises the C++ echo (PeerFailed) again, so that the
//   caller sees the member that failed, as in C++.
// - jit's compiled programs and grad's backward pass call the body later,
//   from C++ that still holds the GIL (transforms.cpp does not release it
//   yet): the body raises then instead of waiting for the GIL forever.
//
// Python objects that C++ keeps (the function and the arguments' structure,
// inside a jit program's shard_map) are released with the GIL taken,
// whichever thread drops them last.
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "common.hpp"
#include "pytree.hpp"

namespace tessera_py {

namespace {
// Calls in progress that released the GIL for device work (see
// ReleaseForDevices): with none, no thread is waiting for the devices with
// the GIL free, so a body taking it would wait on its own caller.
std::atomic<int> g_released{0};
}  // namespace

ReleaseForDevices::ReleaseForDevices() { g_released.fetch_add(1); }
ReleaseForDevices::~ReleaseForDevices() { g_released.fetch_sub(1); }

namespace {

using namespace nb::literals;

// ---------------------------------------------------- Python objects in C++

struct PyRef {
  nb::object obj;
};

// Every live PyRef. A jit program keeps its shard_map's body, whose function
// usually reaches the jitted function back through its module: a cycle
// through C++ that Python's collector cannot see. At exit the references are
// dropped (release_all, registered with atexit), so the modules' objects are
// freed as usual.
std::mutex g_refs_mu;
std::vector<std::weak_ptr<PyRef>> g_refs;

// `o` held by C++ state that any thread may drop.
std::shared_ptr<PyRef> hold(nb::object o) {
  std::shared_ptr<PyRef> r(new PyRef{std::move(o)}, [](PyRef* p) {
    if (!Py_IsInitialized()) {  // at exit, after the interpreter: leak rather than crash
      (void)p->obj.release();
      delete p;
      return;
    }
    nb::gil_scoped_acquire gil;
    delete p;
  });
  std::lock_guard<std::mutex> lock(g_refs_mu);
  std::erase_if(g_refs, [](const std::weak_ptr<PyRef>& w) { return w.expired(); });
  g_refs.push_back(r);
  return r;
}

void release_all() {
  std::vector<std::shared_ptr<PyRef>> live;
  {
    std::lock_guard<std::mutex> lock(g_refs_mu);
    for (const auto& w : g_refs)
      if (auto r = w.lock()) live.push_back(std::move(r));
    g_refs.clear();
  }
  for (const auto& r : live) r->obj = nb::object();
}

// A Python exception raised by a body on a device's worker.
class BodyError : public std::runtime_error {
 public:
  BodyError(const std::string& what, std::shared_ptr<nb::python_error> err)
      : std::runtime_error(what), err_(std::move(err)) {}
  // Sets the Python error indicator to the original exception (with its
  // traceback). A copy each time: restoring consumes the python_error.
  void restore() const {
    nb::python_error copy(*err_);
    copy.restore();
  }

 private:
  std::shared_ptr<nb::python_error> err_;
};

// The C++ exception of the last collective that failed on this thread (a
// body's worker), to rethrow it when it leaves the body as it came in.
thread_local std::exception_ptr t_collective_error;

// A collective called from Python: the GIL released while it waits for the
// other members.
template <class F>
auto collective(F&& f) {
  try {
    nb::gil_scoped_release release;
    return f();
  } catch (...) {
    t_collective_error = std::current_exception();
    throw;
  }
}

// ---------------------------------------------------------------- pytrees

// Stands for an array in the skeleton of the arguments kept by the body.
nb::handle leaf_marker() {
  // Leaked: a static nb::object would be released after the interpreter is gone.
  static nb::handle marker = nb::object(nb::module_::import_("builtins").attr("object")()).release();
  return marker;
}

// Flattens argument `arg` against its in_specs entry `spec` (a JAX pytree
// prefix: a PartitionSpec stands for every array below it; a node of specs
// has the argument's node there, the same kind and class): appends its
// arrays (NumPy ones placed replicated on the mesh) and their specs, and
// returns the argument with its arrays replaced by the leaf marker.
nb::object flatten_arg(nb::handle arg, nb::handle spec, const ts::Mesh& mesh, std::vector<ts::Array>& leaves,
                       std::vector<ts::PartitionSpec>& specs, const std::string& what) {
  const bool array = is_array_leaf(arg);
  const Node n = array ? Node{} : node_of(arg);
  // Other leaves reach every device's body as they are (as in C++), whatever
  // their spec (a dataclass's static fields have no PartitionSpec).
  if (!array && n.kind == Node::Kind::Leaf) return nb::borrow(arg);
  const bool one_spec = nb::isinstance<ts::PartitionSpec>(spec);
  const Node spec_node = one_spec ? Node{} : node_of(spec);
  if (!one_spec && spec_node.kind == Node::Kind::Leaf)
    throw nb::type_error(("shard_map: " + what + " must be a PartitionSpec or a tuple, list, dict, NamedTuple or "
                          "dataclass of them, got " + nb::cast<std::string>(nb::repr(spec))).c_str());
  if (array) {
    if (!one_spec)
      throw ts::ShapeError("[shard_map] tree structure mismatch: " + what + " is a " + py_type_name(spec) +
                           " but the argument there is an array");
    leaves.push_back(nb::isinstance<ts::Array>(arg)
                         ? nb::cast<ts::Array>(arg)
                         : from_host(arg, ts::NamedSharding(mesh, ts::P()), {}, "shard_map"));
    specs.push_back(nb::cast<ts::PartitionSpec>(spec));
    return nb::borrow(leaf_marker());
  }
  if (!one_spec) {
    const bool same = spec_node.kind == n.kind &&
                      ((n.kind != Node::Kind::NamedTuple && n.kind != Node::Kind::Dataclass) ||
                       spec.type().is(arg.type())) &&
                      spec_node.children.size() == n.children.size() && spec_node.fields == n.fields &&
                      PyObject_RichCompareBool(spec_node.keys.ptr(), n.keys.ptr(), Py_EQ) == 1;
    if (!same)
      throw ts::ShapeError("[shard_map] tree structure mismatch: " + what + " is " +
                           nb::cast<std::string>(nb::repr(spec)) + " but the argument there is a " +
                           py_type_name(arg) + " of " + std::to_string(n.children.size()));
  }
  std::vector<nb::object> children;
  for (std::size_t i = 0; i < n.children.size(); ++i)
    children.push_back(flatten_arg(n.children[i], one_spec ? spec : nb::handle(spec_node.children[i]), mesh, leaves,
                                   specs, what + child_path(n, i)));
  return with_children(arg, n, children);
}

// out_specs: one PartitionSpec for every output, or a tree with one per
// output array; its structure as an OutDef (specs as leaves).
OutDef flatten_out_specs(nb::handle h, std::vector<ts::PartitionSpec>& specs) {
  TreeLeaves rules;
  rules.take = [&specs](nb::handle x) {
    if (!nb::isinstance<ts::PartitionSpec>(x)) return false;
    specs.push_back(nb::cast<ts::PartitionSpec>(x));
    return true;
  };
  rules.reject = [](nb::handle x) {
    throw nb::type_error(("shard_map: out_specs must be a PartitionSpec or a tuple, list, dict, NamedTuple or "
                          "dataclass of them, got " + nb::cast<std::string>(nb::repr(x))).c_str());
  };
  return flatten_tree(h, rules);
}

// --------------------------------------------------------------- the body

// What a body shares across its devices' runs and with the caller.
struct BodyState {
  std::shared_ptr<PyRef> fun;
  std::shared_ptr<PyRef> skeleton;  // the positional arguments, arrays replaced by the leaf marker
  std::mutex mu;
  std::optional<OutDef> out_def;  // from the first run that returned
};

std::string describe(const nb::python_error& e) {
  std::string text = py_type_name(e.value());
  const std::string msg = nb::cast<std::string>(nb::str(e.value()));
  if (!msg.empty()) text += ": " + msg;
  return text;
}

ts::detail::ShardMapBody make_body(std::shared_ptr<BodyState> st) {
  return [st](const std::vector<ts::Array>& local) -> std::vector<ts::Array> {
    if (!PyGILState_Check() && g_released.load() == 0)
      throw ts::Error(
          "[shard_map] the body is a Python function, and the call running it holds the GIL: jit's compiled "
          "programs and grad's backward pass do not release it yet, so the devices cannot run the body. Call the "
          "shard_map outside jit and grad (jit and grad inside the body work)");
    nb::gil_scoped_acquire gil;
    t_collective_error = nullptr;
    try {
      if (!st->fun->obj.is_valid()) throw ts::Error("[shard_map] the body's function was released at exit");
      std::size_t k = 0;
      nb::object args =
          map_leaves(st->skeleton->obj, [](nb::handle h) { return h.is(leaf_marker()); },
                     [&](nb::handle) { return nb::cast(local.at(k++)); });
      nb::object r;
      {
        PythonTraceScope tracing;  // errors of ops in the body name its line
        r = st->fun->obj(*args);
      }
      std::vector<ts::Array> outs;
      OutDef d = flatten_out(r, outs, "shard_map", "the body");
      std::lock_guard<std::mutex> lock(st->mu);
      if (!st->out_def) st->out_def = std::move(d);
      return outs;
    } catch (nb::python_error& e) {
      // The CollectiveError a collective raised here, come back unchanged:
      // the C++ exception again (an echo of another member's failure stays
      // one).
      std::exception_ptr c = std::exchange(t_collective_error, nullptr);
      if (c) {
        try {
          std::rethrow_exception(c);
        } catch (const std::exception& ce) {
          // (The Python message may end with where the body called it.)
          if (nb::cast<std::string>(nb::str(e.value())).rfind(ce.what(), 0) == 0) std::rethrow_exception(c);
        } catch (...) {
        }
      }
      // (The message first: moving the error empties it.)
      const std::string what = "[shard_map] the body raised " + describe(e);
      throw BodyError(what, std::make_shared<nb::python_error>(std::move(e)));
    }
  };
}

// ---------------------------------------------------------- the callable

struct PyShardMap {
  nb::object fun;
  ts::Mesh mesh;
  nb::object in_specs;   // a PartitionSpec, or a tuple/list with one entry per positional argument
  nb::object out_specs;  // a PartitionSpec, or a tree of them
  ts::ShardMapOptions opt;

  nb::object call(nb::args args, nb::kwargs kwargs) const {
    if (kwargs.size() != 0)
      throw nb::type_error("shard_map: keyword arguments are not supported (in_specs describe positional ones)");
    const bool one = nb::isinstance<ts::PartitionSpec>(in_specs);
    if (!one && nb::len(in_specs) != args.size())
      throw ts::ShardingError("[shard_map] expected " + std::to_string(nb::len(in_specs)) +
                              " arguments (one per in_spec), got " + std::to_string(args.size()));
    std::vector<ts::Array> leaves;
    std::vector<ts::PartitionSpec> specs;
    nb::list skeleton;
    for (std::size_t i = 0; i < args.size(); ++i)
      skeleton.append(flatten_arg(args[i], one ? nb::handle(in_specs) : nb::handle(in_specs[nb::int_(i)]), mesh,
                                  leaves, specs, "in_specs entry " + std::to_string(i)));
    std::vector<ts::PartitionSpec> outs_specs;
    const OutDef spec_def = flatten_out_specs(out_specs, outs_specs);
    const bool spec_tree = !nb::isinstance<ts::PartitionSpec>(out_specs);

    auto st = std::make_shared<BodyState>();
    st->fun = hold(fun);
    st->skeleton = hold(nb::tuple(skeleton));
    ts::detail::ShardMapBody body = make_body(st);
    std::vector<ts::Array> outs;
    {
      ReleaseForDevices release;
      outs = ts::detail::shard_map_call(body, mesh, specs, outs_specs, opt, leaves);
    }
    if (!st->out_def) throw ts::Error("[shard_map] internal: no body returned");
    if (spec_tree && !same_structure(spec_def, *st->out_def))
      throw ts::ShapeError("[shard_map] tree structure mismatch: out_specs is " + structure_of(spec_def) +
                           " but the body returned " + structure_of(*st->out_def) +
                           " (give one PartitionSpec per output array, or one for all)");
    std::size_t k = 0;
    return unflatten_out(*st->out_def, outs, k);
  }
};

int traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  auto* p = nb::inst_ptr<PyShardMap>(self);
  Py_VISIT(p->fun.ptr());
  Py_VISIT(p->in_specs.ptr());
  Py_VISIT(p->out_specs.ptr());
  return 0;
}
int clear(PyObject* self) {
  auto* p = nb::inst_ptr<PyShardMap>(self);
  p->fun = nb::object();
  p->in_specs = nb::object();
  p->out_specs = nb::object();
  return 0;
}
PyType_Slot g_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(&traverse)},
                         {Py_tp_clear, reinterpret_cast<void*>(&clear)},
                         {0, nullptr}};

// ----------------------------------------------------------- collectives

ts::AxisNames axis_names(nb::handle h) {
  if (nb::isinstance<nb::str>(h)) return ts::AxisNames(nb::cast<std::string>(h));
  if (nb::isinstance<nb::tuple>(h) || nb::isinstance<nb::list>(h)) {
    std::vector<std::string> names;
    for (nb::handle a : h) {
      if (!nb::isinstance<nb::str>(a))
        throw nb::type_error(("axis_name: expected a mesh axis name (str) or a tuple of them, got " +
                              nb::cast<std::string>(nb::repr(h))).c_str());
      names.push_back(nb::cast<std::string>(a));
    }
    return ts::AxisNames(std::move(names));
  }
  throw nb::type_error(("axis_name: expected a mesh axis name (str) or a tuple of them, got " +
                        nb::cast<std::string>(nb::repr(h))).c_str());
}

}  // namespace

void init_shard_map(nb::module_& m) {
  // Python objects that bodies use on the devices' worker threads, made on
  // the importing thread.
  init_pytree();
  (void)leaf_marker();
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const BodyError& e) {
      e.restore();
    }
  });

  m.def("_release_bodies", &release_all, "Drops the Python functions kept by compiled shard_map bodies (at exit).");
  nb::module_::import_("atexit").attr("register")(m.attr("_release_bodies"));

  nb::class_<PyShardMap>(m, "ShardMapped", nb::type_slots(g_slots))
      .def("__call__", &PyShardMap::call);

  m.def("_shard_map", [](nb::object f, const ts::Mesh& mesh, nb::object in_specs, nb::object out_specs,
                         bool check_vma) {
    if (!nb::isinstance<ts::PartitionSpec>(in_specs) && !nb::isinstance<nb::tuple>(in_specs) &&
        !nb::isinstance<nb::list>(in_specs))
      throw nb::type_error(("shard_map: in_specs must be a PartitionSpec or a tuple with one entry per positional "
                            "argument, got " + nb::cast<std::string>(nb::repr(in_specs))).c_str());
    ts::ShardMapOptions opt;
    opt.check_vma = check_vma;
    return PyShardMap{f, mesh, in_specs, out_specs, opt};
  }, "f"_a, "mesh"_a, "in_specs"_a, "out_specs"_a, "check_vma"_a,
  "f run once per device on its blocks (tessera.shard_map is the public form).");

  nb::module_ lax = m.def_submodule("lax", "The collectives of shard_map bodies.");
  lax.def("psum", [](const ts::Array& x, nb::handle axis_name) {
    ts::AxisNames a = axis_names(axis_name);
    return collective([&] { return ts::psum(x, a); });
  }, "x"_a, "axis_name"_a);
  lax.def("pmean", [](const ts::Array& x, nb::handle axis_name) {
    ts::AxisNames a = axis_names(axis_name);
    return collective([&] { return ts::pmean(x, a); });
  }, "x"_a, "axis_name"_a);
  lax.def("pmax", [](const ts::Array& x, nb::handle axis_name) {
    ts::AxisNames a = axis_names(axis_name);
    return collective([&] { return ts::pmax(x, a); });
  }, "x"_a, "axis_name"_a);
  lax.def("pmin", [](const ts::Array& x, nb::handle axis_name) {
    ts::AxisNames a = axis_names(axis_name);
    return collective([&] { return ts::pmin(x, a); });
  }, "x"_a, "axis_name"_a);
  lax.def("all_gather", [](const ts::Array& x, nb::handle axis_name, int axis, bool tiled) {
    ts::AxisNames a = axis_names(axis_name);
    return collective([&] { return ts::all_gather(x, a, axis, tiled); });
  }, "x"_a, "axis_name"_a, "axis"_a = 0, "tiled"_a = false);
  lax.def("psum_scatter", [](const ts::Array& x, nb::handle axis_name, int scatter_dimension, bool tiled) {
    ts::AxisNames a = axis_names(axis_name);
    return collective([&] { return ts::psum_scatter(x, a, scatter_dimension, tiled); });
  }, "x"_a, "axis_name"_a, "scatter_dimension"_a = 0, "tiled"_a = false);
  lax.def("ppermute", [](const ts::Array& x, nb::handle axis_name, const std::vector<std::pair<int, int>>& perm) {
    ts::AxisNames a = axis_names(axis_name);
    return collective([&] { return ts::ppermute(x, a, perm); });
  }, "x"_a, "axis_name"_a, "perm"_a);
  lax.def("all_to_all", [](const ts::Array& x, nb::handle axis_name, int split_axis, int concat_axis, bool tiled) {
    ts::AxisNames a = axis_names(axis_name);
    return collective([&] { return ts::all_to_all(x, a, split_axis, concat_axis, tiled); });
  }, "x"_a, "axis_name"_a, "split_axis"_a, "concat_axis"_a, "tiled"_a = false);
  // Neither waits for other devices.
  lax.def("axis_index", [](const std::string& axis_name) { return ts::axis_index(axis_name); }, "axis_name"_a);
  lax.def("axis_size", [](const std::string& axis_name) { return ts::axis_size(axis_name); }, "axis_name"_a);
}

}  // namespace tessera_py
