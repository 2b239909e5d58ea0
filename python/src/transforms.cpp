// jit, vmap and autodiff of Python functions. A Python function becomes the
// C++ transformations' TraceFn: its arguments are pytrees (tuples, lists,
// dicts, NamedTuples, dataclasses: pytree.hpp) whose Arrays are traced and
// whose other leaves are static (part of the cache key, passed through as
// they are); it returns a pytree of Arrays.
// Tracing calls the function on the calling thread, with the GIL held.
#include <any>
#include <memory>

#include "common.hpp"
#include "pytree.hpp"

namespace tessera_py {
namespace {

using namespace nb::literals;
constexpr std::source_location kNoLoc{};

// ------------------------------------------------------------ arguments

// The first tessera Array among h's leaves, if any: where the NumPy leaves
// of a call go (JAX's uncommitted arrays follow the committed ones).
std::optional<ts::Array> first_array(nb::handle h) {
  if (nb::isinstance<ts::Array>(h)) return nb::cast<ts::Array>(h);
  if (is_array_leaf(h)) return std::nullopt;
  const Node n = node_of(h);
  for (nb::handle c : n.children)
    if (auto a = first_array(c)) return a;
  return std::nullopt;
}

// Appends h's arrays to `leaves` (NumPy arrays placed replicated on the
// mesh of `like`, else of the first Array seen, else on device 0) and its
// structure and static leaves to `statics`.
void flatten_in(nb::handle h, std::vector<ts::Array>& leaves, std::string& statics,
                const std::optional<ts::Array>& like = std::nullopt) {
  if (is_array_leaf(h)) {
    leaves.push_back(to_array(h, like ? &*like : leaves.empty() ? nullptr : &leaves.front(), "jit"));
    statics += "a;";
    return;
  }
  const Node n = node_of(h);
  switch (n.kind) {
    case Node::Kind::Leaf:
      // Static: its type and repr are part of the cache key.
      statics += "s" + py_type_name(h) + ":" + nb::cast<std::string>(nb::repr(h)) + ";";
      return;
    case Node::Kind::Dataclass: statics += "D" + type_key(h) + "("; break;
    case Node::Kind::NamedTuple: statics += "N" + type_key(h) + "("; break;
    case Node::Kind::Tuple: statics += "("; break;
    case Node::Kind::List: statics += "["; break;
    case Node::Kind::Dict: statics += "{"; break;
  }
  for (std::size_t i = 0; i < n.children.size(); ++i) {
    if (n.kind == Node::Kind::Dict) statics += nb::cast<std::string>(nb::repr(n.keys[i])) + ":";
    flatten_in(n.children[i], leaves, statics, like);
  }
  statics += n.kind == Node::Kind::Dict ? "}" : ")";
}

// h with its arrays replaced by the next of `arrays`.
nb::object rebuild_in(nb::handle h, const std::vector<ts::Array>& arrays, std::size_t& k) {
  return map_leaves(h, is_array_leaf, [&](nb::handle) { return nb::cast(arrays.at(k++)); });
}

// -------------------------------------------------------------- results

nb::object unflatten_all(const std::shared_ptr<const std::any>& tree, const std::vector<ts::Array>& arrays) {
  const auto& def = std::any_cast<const std::shared_ptr<OutDef>&>(*tree);
  std::size_t k = 0;
  return unflatten_out(*def, arrays, k);
}

// The function called on `args` with their arrays replaced by `tracers`.
ts::detail::TraceFn trace_fn(nb::handle fun, const nb::args& args, const char* op,
                             const std::vector<bool>& is_static = {}) {
  return [fun, &args, op, is_static](const std::vector<ts::Array>& tracers, std::any& tree) {
    // Called with the GIL released (on the calling thread or a device's worker).
    nb::gil_scoped_acquire gil;
    std::size_t k = 0;
    nb::list call_args;
    for (std::size_t i = 0; i < args.size(); ++i)
      call_args.append(i < is_static.size() && is_static[i] ? nb::borrow(args[i]) : rebuild_in(args[i], tracers, k));
    nb::object r;
    {
      PythonTraceScope tracing;
      r = fun(*nb::tuple(call_args));
    }
    std::vector<ts::Array> outs;
    tree = std::make_shared<OutDef>(flatten_out(r, outs, op));
    return outs;
  };
}

std::vector<int> to_int_list(nb::handle h) {
  if (h.is_none()) return {};
  if (PyLong_Check(h.ptr())) return {nb::cast<int>(h)};
  return nb::cast<std::vector<int>>(h);
}

int normalize_argnum(int a, std::size_t n, const char* op) {
  const int nargs = static_cast<int>(n);
  if (a < -nargs || a >= nargs)
    throw nb::value_error((std::string(op) + ": argnums " + std::to_string(a) + " out of range for " +
                           std::to_string(n) + " positional arguments").c_str());
  return a < 0 ? a + nargs : a;
}

// Wrapped functions hold the Python function, which usually reaches the
// wrapper back (through its module's globals): the wrappers take part in
// Python's garbage collection so that such cycles are freed.
template <class T>
int traverse_fun(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  Py_VISIT(nb::inst_ptr<T>(self)->fun.ptr());
  return 0;
}
template <class T>
int clear_fun(PyObject* self) {
  nb::inst_ptr<T>(self)->fun = nb::object();
  return 0;
}
template <class T>
PyType_Slot* gc_slots() {
  static PyType_Slot slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(&traverse_fun<T>)},
                                {Py_tp_clear, reinterpret_cast<void*>(&clear_fun<T>)},
                                {0, nullptr}};
  return slots;
}

// ------------------------------------------------------------------ jit

struct PyJit {
  nb::object fun;
  std::vector<int> static_argnums;
  std::optional<std::vector<ts::NamedSharding>> in_shardings;  // one for all (size 1) or one per argument
  std::shared_ptr<ts::detail::JitCache> cache;

  struct Flat {
    std::vector<ts::Array> arrays;
    std::string statics;
    std::vector<bool> is_static;
    std::vector<ts::NamedSharding> layouts;
  };

  Flat flatten(const nb::args& args) const {
    Flat f;
    f.is_static.assign(args.size(), false);
    for (int a : static_argnums) f.is_static[normalize_argnum(a, args.size(), "jit")] = true;
    const std::optional<ts::Array> like = first_array(args);
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::size_t before = f.arrays.size();
      if (f.is_static[i]) {
        f.statics += "S" + nb::cast<std::string>(nb::repr(args[i])) + ";";
      } else {
        flatten_in(args[i], f.arrays, f.statics, like);
      }
      if (in_shardings) {
        if (in_shardings->size() != 1 && in_shardings->size() != args.size())
          throw ts::ShardingError("[jit] in_shardings has " + std::to_string(in_shardings->size()) + " entries for " +
                                  std::to_string(args.size()) + " arguments");
        const auto& s = in_shardings->size() == 1 ? in_shardings->front() : (*in_shardings)[i];
        for (std::size_t j = before; j < f.arrays.size(); ++j) f.layouts.push_back(s);
      }
      f.statics += "|";
    }
    return f;
  }

  nb::object call(nb::args args, nb::kwargs kwargs) const {
    if (kwargs.size() == 0) return call_with(args, fun);
    // Keyword arguments are one more argument, a dict (a pytree: its arrays
    // traced, the rest static, as JAX does), spread again by a wrapper.
    if (in_shardings && in_shardings->size() != 1)
      throw ts::ShardingError("[jit] in_shardings has one entry per positional argument; keyword arguments (" +
                              std::to_string(kwargs.size()) +
                              " given) need a single in_shardings for all, or to be passed positionally");
    nb::list all;
    for (nb::handle a : args) all.append(a);
    all.append(nb::dict(kwargs));
    const std::size_t npos = args.size();
    nb::object spread = nb::cpp_function([f = fun, npos](nb::args a) {
      nb::list pos;
      for (std::size_t i = 0; i < npos; ++i) pos.append(a[i]);
      return f(*nb::tuple(pos), **nb::borrow<nb::dict>(a[npos]));
    });
    return call_with(nb::borrow<nb::args>(nb::tuple(all)), spread);
  }

  // A call of `f` (fun, or fun behind the keyword wrapper) on `args`.
  nb::object call_with(const nb::args& args, nb::handle f_) const {
    Flat f = flatten(args);
    const ts::detail::TraceFn fn = trace_fn(f_, args, "jit", f.is_static);
    ts::detail::JitResult res;
    {
      ReleaseForDevices release;
      res = cache->call(std::move(f.arrays), f.statics, fn, f.layouts);
    }
    return unflatten_all(res.tree, res.outs);
  }

  std::string lower(nb::args args) const {
    Flat f = flatten(args);
    const ts::detail::TraceFn fn = trace_fn(fun, args, "jit", f.is_static);
    ReleaseForDevices release;
    return cache->lower(std::move(f.arrays), f.statics, fn, f.layouts).as_text();
  }
};

std::optional<std::vector<ts::NamedSharding>> shardings_of(nb::handle h) {
  if (h.is_none()) return std::nullopt;
  if (nb::isinstance<ts::NamedSharding>(h)) return std::vector<ts::NamedSharding>{nb::cast<ts::NamedSharding>(h)};
  return nb::cast<std::vector<ts::NamedSharding>>(h);
}

// ------------------------------------------------------------- autodiff

// value_and_grad / grad of a Python function.
struct PyGrad {
  nb::object fun;
  nb::object argnums;  // int or tuple of ints
  bool has_aux = false;
  bool with_value = true;
  const char* name = "value_and_grad";

  nb::object call(nb::args args) const {
    const bool many = !PyLong_Check(argnums.ptr());
    std::vector<int> nums = to_int_list(argnums);
    std::vector<bool> diff(args.size(), false);
    for (int& a : nums) diff[a = normalize_argnum(a, args.size(), name)] = true;
    // The differentiated arrays, in argument order.
    std::vector<ts::Array> leaves;
    const std::optional<ts::Array> like = first_array(args);
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (!diff[i]) continue;
      std::string ignored;
      flatten_in(args[i], leaves, ignored, like);
    }
    ts::detail::TraceFn fn = [&](const std::vector<ts::Array>& tracers, std::any& tree) {
      nb::gil_scoped_acquire gil;
      std::size_t k = 0;
      nb::list call_args;
      for (std::size_t i = 0; i < args.size(); ++i)
        call_args.append(diff[i] ? rebuild_in(args[i], tracers, k) : nb::borrow(args[i]));
      nb::object r;
      {
        PythonTraceScope tracing;
        r = fun(*nb::tuple(call_args));
      }
      std::vector<ts::Array> outs;
      if (has_aux) {
        if (!nb::isinstance<nb::tuple>(r) || nb::len(r) != 2)
          throw nb::type_error((std::string(name) + ": with has_aux=True the function must return a pair (value, aux)").c_str());
        OutDef d;
        d.kind = OutDef::Kind::Tuple;
        d.children.push_back(flatten_out(r[0], outs, name));
        d.children.push_back(flatten_out(r[1], outs, name));
        tree = std::make_shared<OutDef>(std::move(d));
      } else {
        tree = std::make_shared<OutDef>(flatten_out(r, outs, name));
      }
      return outs;
    };
    ts::detail::Pullback back;
    ts::detail::JitResult res;
    {
      ReleaseForDevices release;
      res = ts::detail::vjp_call(fn, leaves, back);
    }
    const auto& def = std::any_cast<const std::shared_ptr<OutDef>&>(*res.tree);
    const OutDef& value_def = has_aux ? def->children[0] : *def;
    if (value_def.kind != OutDef::Kind::Leaf || res.outs.empty())
      throw nb::type_error((std::string(name) + ": the function must return a scalar Array").c_str());
    const ts::Array& value = res.outs[0];
    if (value.ndim() != 0 || !(value.dtype() == ts::DType::f32 || value.dtype() == ts::DType::f64))
      throw ts::ShapeError("[" + std::string(name) + "] the function must return a float scalar" +
                           (has_aux ? " (with its aux)" : "") + ", got " + ts::typeof(value));
    std::vector<ts::Array> cts(res.outs.size());
    cts[0] = ts::ones({}, value.dtype(), value.sharding(), kNoLoc);
    std::vector<ts::Array> grads;
    {
      ReleaseForDevices release;
      grads = back(cts);
    }
    std::size_t k = 0;
    nb::list per_arg;
    for (int a : nums) per_arg.append(rebuild_in(args[a], grads, k));
    nb::object g = many ? nb::object(nb::tuple(per_arg)) : nb::object(per_arg[0]);
    nb::object r = unflatten_all(res.tree, res.outs);
    if (with_value) return nb::make_tuple(r, g);
    if (has_aux) return nb::make_tuple(g, r[1]);
    return g;
  }
};

struct PyJacobian {
  nb::object fun;
  std::int64_t chunk_size = 0;
  bool forward = true;
  const char* name = "jacfwd";

  ts::Array call(const ts::Array& x, nb::args rest) const {
    std::function<ts::Array(const ts::Array&)> f = [&](const ts::Array& a) {
      nb::gil_scoped_acquire gil;
      nb::list call_args;
      call_args.append(nb::cast(a));
      for (nb::handle r : rest) call_args.append(r);
      nb::object r;
      {
        PythonTraceScope tracing;
        r = fun(*nb::tuple(call_args));
      }
      if (!nb::isinstance<ts::Array>(r))
        throw nb::type_error((std::string(name) + ": the function must return one Array").c_str());
      return nb::cast<ts::Array>(r);
    };
    ReleaseForDevices release;
    return ts::detail::jacobian_call(f, x, chunk_size, forward, name);
  }
};

struct PyVmap {
  nb::object fun;
  nb::object in_axes, out_axes;
  std::int64_t chunk_size = 0;
  std::optional<std::string> spmd_axis_name;

  nb::object call(nb::args args) const {
    auto axis_of = [](nb::handle h) { return h.is_none() ? ts::not_mapped : nb::cast<int>(h); };
    std::vector<ts::Array> arrays;
    std::vector<int> axes;
    const bool per_arg = nb::isinstance<nb::tuple>(in_axes) || nb::isinstance<nb::list>(in_axes);
    if (per_arg && nb::len(in_axes) != args.size())
      throw ts::ShapeError("[vmap] in_axes has " + std::to_string(nb::len(in_axes)) + " entries for " +
                           std::to_string(args.size()) + " arguments");
    const std::optional<ts::Array> like = first_array(args);
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::size_t before = arrays.size();
      std::string ignored;
      flatten_in(args[i], arrays, ignored, like);
      const int axis = axis_of(per_arg ? nb::handle(in_axes[i]) : nb::handle(in_axes));
      axes.insert(axes.end(), arrays.size() - before, axis);
    }
    ts::VmapOptions opt;
    opt.chunk_size = chunk_size;
    opt.spmd_axis_name = spmd_axis_name;
    if (PyLong_Check(out_axes.ptr())) {
      if (nb::cast<int>(out_axes) != 0) opt.out_axes = {nb::cast<int>(out_axes)};
    } else {
      for (nb::handle h : out_axes) opt.out_axes.push_back(axis_of(h));
    }
    const ts::detail::TraceFn fn = trace_fn(fun, args, "vmap");
    ts::detail::JitResult res;
    {
      ReleaseForDevices release;
      res = ts::detail::vmap_call(arrays, axes, opt, fn, "vmap");
    }
    return unflatten_all(res.tree, res.outs);
  }
};

std::vector<ts::Array> leaves_of(nb::handle tree, const char* op) {
  std::vector<ts::Array> leaves;
  std::string ignored;
  const std::optional<ts::Array> like = first_array(tree);
  for (nb::handle h : tree) flatten_in(h, leaves, ignored, like);
  (void)op;
  return leaves;
}

}  // namespace

void init_transforms(nb::module_& m) {
  init_pytree();
  nb::class_<PyJit>(m, "Jitted", nb::type_slots(gc_slots<PyJit>()),
                   "A function traced once per input signature, partitioned, fused and cached.")
      .def("__call__", &PyJit::call)
      .def("lower", &PyJit::lower, "The program text for these arguments: values, shardings, communication steps.")
      .def("cache_size", [](const PyJit& j) { return j.cache->size(); })
      .def_prop_ro("__wrapped__", [](const PyJit& j) { return j.fun; });

  m.def("jit", [](nb::object fun, nb::handle in_shardings, nb::handle out_shardings, nb::handle static_argnums) {
    ts::JitOptions opt;
    if (auto outs = shardings_of(out_shardings)) opt.out_shardings = *outs;
    std::string name = nb::hasattr(fun, "__name__") ? nb::cast<std::string>(nb::str(fun.attr("__name__"))) : "jit";
    if (name == "<lambda>") name = "jit";
    return PyJit{fun, to_int_list(static_argnums), shardings_of(in_shardings),
                 std::make_shared<ts::detail::JitCache>(name, std::move(opt))};
  }, "fun"_a, nb::kw_only(), "in_shardings"_a = nb::none(), "out_shardings"_a = nb::none(),
  "static_argnums"_a = nb::none(),
  "Traces fun once per signature (shapes, dtypes, shardings of its arrays, values of its other arguments), "
  "partitions and fuses the program, and caches it.");

  nb::class_<PyGrad>(m, "GradFunction", nb::type_slots(gc_slots<PyGrad>()))
      .def("__call__", [](const PyGrad& g, nb::args args) { return g.call(args); });

  m.def("value_and_grad", [](nb::object fun, nb::object argnums, bool has_aux) {
    return PyGrad{fun, argnums, has_aux, true, "value_and_grad"};
  }, "fun"_a, "argnums"_a = 0, "has_aux"_a = false);
  m.def("grad", [](nb::object fun, nb::object argnums, bool has_aux) {
    return PyGrad{fun, argnums, has_aux, false, "grad"};
  }, "fun"_a, "argnums"_a = 0, "has_aux"_a = false);

  m.def("jvp", [](nb::object fun, nb::tuple primals, nb::tuple tangents) {
    if (primals.size() != tangents.size())
      throw nb::value_error("jvp: primals and tangents must have the same number of arguments");
    std::vector<ts::Array> p = leaves_of(primals, "jvp"), t = leaves_of(tangents, "jvp"), t_out;
    nb::args args = nb::borrow<nb::args>(primals);
    const ts::detail::TraceFn fn = trace_fn(fun, args, "jvp");
    ts::detail::JitResult res;
    {
      ReleaseForDevices release;
      res = ts::detail::jvp_call(fn, p, t, t_out);
    }
    return nb::make_tuple(unflatten_all(res.tree, res.outs), unflatten_all(res.tree, t_out));
  }, "fun"_a, "primals"_a, "tangents"_a, "The value of fun at primals and its tangent along tangents.");

  m.def("vjp", [](nb::object fun, nb::args primals) {
    std::vector<ts::Array> p = leaves_of(primals, "vjp");
    ts::detail::Pullback back;
    const ts::detail::TraceFn fn = trace_fn(fun, primals, "vjp");
    ts::detail::JitResult res;
    {
      ReleaseForDevices release;
      res = ts::detail::vjp_call(fn, p, back);
    }
    nb::object out = unflatten_all(res.tree, res.outs);
    nb::tuple shapes = nb::borrow<nb::tuple>(primals);
    auto tree = res.tree;
    nb::object pullback = nb::cpp_function([back, shapes, tree](nb::handle ct) {
      std::vector<ts::Array> ct_leaves;
      flatten_out(ct, ct_leaves, "vjp");
      std::vector<ts::Array> cts;
      {
        ReleaseForDevices release;
        cts = back(ct_leaves);
      }
      std::size_t k = 0;
      nb::list out;
      for (nb::handle a : shapes) out.append(rebuild_in(a, cts, k));
      return nb::tuple(out);
    });
    return nb::make_tuple(out, pullback);
  }, "fun"_a, "primals"_a, "The value of fun at primals and the pullback from result cotangents to the arguments'.");

  nb::class_<PyJacobian>(m, "JacobianFunction", nb::type_slots(gc_slots<PyJacobian>()))
      .def("__call__", &PyJacobian::call, "x"_a, "rest"_a);
  for (auto [name, forward] : {std::pair{"jacfwd", true}, std::pair{"jacrev", false}}) {
    m.def(name, [name, forward](nb::object fun, std::int64_t chunk_size) {
      return PyJacobian{fun, chunk_size, forward, name};
    }, "fun"_a, nb::kw_only(), "chunk_size"_a = 0,
    "The Jacobian of fun (Array -> Array) in its first argument: shape fun(x).shape + x.shape. chunk_size bounds "
    "the directions per batch.");
  }

  nb::class_<PyVmap>(m, "VmappedFunction", nb::type_slots(gc_slots<PyVmap>()))
      .def("__call__", &PyVmap::call);
  m.def("vmap", [](nb::object fun, nb::object in_axes, nb::object out_axes, std::int64_t chunk_size,
                   std::optional<std::string> spmd_axis_name) {
    return PyVmap{fun, in_axes, out_axes, chunk_size, spmd_axis_name};
  }, "fun"_a, "in_axes"_a = 0, "out_axes"_a = 0, nb::kw_only(), "chunk_size"_a = 0, "spmd_axis_name"_a = nb::none(),
  "fun mapped over a batch dim of its arguments (None: not mapped). chunk_size bounds the examples per step.");

  m.def("stop_gradient", [](const ts::Array& x) { return ts::stop_gradient(x, kNoLoc); }, "x"_a);
}

}  // namespace tessera_py
