// Pytrees of the bindings' transformations (pytree.hpp).
#include "pytree.hpp"

namespace tessera_py {
namespace {

// The Python callables used on every call, looked up once, at import
// (init_pytree): taken for the first time on devices' worker threads, a
// lookup that runs Python code could let another thread wait on the static's
// guard while holding the GIL. Leaked: static nb::objects would be released
// after the interpreter is gone.
struct Callables {
  nb::handle ndarray, is_dataclass, fields, copy, object_setattr;
};

const Callables& callables() {
  static const Callables c{
      nb::object(nb::module_::import_("numpy").attr("ndarray")).release(),
      nb::object(nb::module_::import_("dataclasses").attr("is_dataclass")).release(),
      nb::object(nb::module_::import_("dataclasses").attr("fields")).release(),
      nb::object(nb::module_::import_("copy").attr("copy")).release(),
      nb::object(nb::module_::import_("builtins").attr("object").attr("__setattr__")).release(),
  };
  return c;
}

// A copy of dataclass h with its fields set to `values` (frozen ones too).
nb::object replace_fields(nb::handle h, const std::vector<std::string>& names, const std::vector<nb::object>& values) {
  nb::object out = callables().copy(h);
  for (std::size_t i = 0; i < names.size(); ++i) callables().object_setattr(out, names[i].c_str(), values[i]);
  return out;
}

// A result's class, kept alive for the life of the process: OutDefs live in
// jit caches, which may be destroyed without the GIL (at exit).
PyObject* result_type(nb::handle h) {
  PyObject* t = reinterpret_cast<PyObject*>(Py_TYPE(h.ptr()));
  Py_INCREF(t);  // never released, on purpose
  return t;
}

}  // namespace

void init_pytree() { (void)callables(); }

// ------------------------------------------------------------ predicates

bool is_array_leaf(nb::handle h) {
  if (nb::isinstance<ts::Array>(h)) return true;
  return nb::isinstance(h, callables().ndarray);
}

bool is_namedtuple(nb::handle h) { return nb::isinstance<nb::tuple>(h) && nb::hasattr(h, "_fields"); }

bool is_dataclass(nb::handle h) {
  return !PyType_Check(h.ptr()) && nb::hasattr(h.type(), "__dataclass_fields__") &&
         nb::cast<bool>(callables().is_dataclass(h));
}

std::vector<std::string> dataclass_fields(nb::handle h) {
  std::vector<std::string> names;
  for (nb::handle f : callables().fields(h)) names.push_back(nb::cast<std::string>(f.attr("name")));
  return names;
}

nb::list sorted_keys(nb::handle dict) {
  nb::list keys = nb::list(dict.attr("keys")());
  keys.sort();
  return keys;
}

std::string type_key(nb::handle h) {
  return nb::cast<std::string>(nb::str(h.type().attr("__module__"))) + "." +
         nb::cast<std::string>(nb::str(h.type().attr("__qualname__")));
}

std::string py_type_name(nb::handle h) { return nb::cast<std::string>(nb::str(h.type().attr("__name__"))); }

// ------------------------------------------------------------ one level

Node node_of(nb::handle h) {
  Node n;
  if (is_dataclass(h)) {
    n.kind = Node::Kind::Dataclass;
    n.fields = dataclass_fields(h);
    for (const std::string& f : n.fields) n.children.push_back(h.attr(f.c_str()));
  } else if (nb::isinstance<nb::tuple>(h) || nb::isinstance<nb::list>(h)) {
    n.kind = is_namedtuple(h) ? Node::Kind::NamedTuple
             : nb::isinstance<nb::tuple>(h) ? Node::Kind::Tuple
                                            : Node::Kind::List;
    for (nb::handle c : h) n.children.push_back(nb::borrow(c));
  } else if (nb::isinstance<nb::dict>(h)) {
    n.kind = Node::Kind::Dict;
    n.keys = sorted_keys(h);
    for (nb::handle k : n.keys) n.children.push_back(h[k]);
  }
  return n;
}

nb::object with_children(nb::handle like, const Node& node, const std::vector<nb::object>& children) {
  switch (node.kind) {
    case Node::Kind::Leaf: return nb::borrow(like);
    case Node::Kind::Dataclass: return replace_fields(like, node.fields, children);
    case Node::Kind::Dict: {
      nb::dict out;
      for (std::size_t i = 0; i < children.size(); ++i) out[node.keys[i]] = children[i];
      return out;
    }
    case Node::Kind::Tuple:
    case Node::Kind::NamedTuple:
    case Node::Kind::List: {
      nb::list out;
      for (const nb::object& c : children) out.append(c);
      if (node.kind == Node::Kind::NamedTuple) return like.type()(*out);
      if (node.kind == Node::Kind::Tuple) return nb::tuple(out);
      return out;
    }
  }
  return nb::borrow(like);
}

std::string child_path(const Node& node, std::size_t i) {
  if (node.kind == Node::Kind::Dataclass) return "." + node.fields[i];
  if (node.kind == Node::Kind::Dict) return "[" + nb::cast<std::string>(nb::repr(node.keys[i])) + "]";
  return "[" + std::to_string(i) + "]";
}

nb::object map_leaves(nb::handle h, const std::function<bool(nb::handle)>& is_leaf,
                      const std::function<nb::object(nb::handle)>& f) {
  if (is_leaf(h)) return f(h);
  const Node n = node_of(h);
  if (n.kind == Node::Kind::Leaf) return nb::borrow(h);
  std::vector<nb::object> children;
  for (const nb::object& c : n.children) children.push_back(map_leaves(c, is_leaf, f));
  return with_children(h, n, children);
}

// ------------------------------------------------------- result structures

OutDef flatten_tree(nb::handle h, const TreeLeaves& leaves) {
  OutDef d;
  if (leaves.take(h)) return d;
  if (h.is_none()) {
    d.kind = OutDef::Kind::None;
    return d;
  }
  const Node n = node_of(h);
  switch (n.kind) {
    case Node::Kind::Leaf:
      leaves.reject(h);
      throw nb::type_error(("not a pytree: " + py_type_name(h)).c_str());  // (reject raises)
    case Node::Kind::Tuple: d.kind = OutDef::Kind::Tuple; break;
    case Node::Kind::List: d.kind = OutDef::Kind::List; break;
    case Node::Kind::NamedTuple:
      d.kind = OutDef::Kind::NamedTuple;
      d.type = result_type(h);
      break;
    case Node::Kind::Dataclass:
      d.kind = OutDef::Kind::Dataclass;
      d.type = result_type(h);
      d.keys = n.fields;
      break;
    case Node::Kind::Dict:
      d.kind = OutDef::Kind::Dict;
      for (nb::handle k : n.keys) {
        if (leaves.str_keys_op && !nb::isinstance<nb::str>(k))
          throw nb::type_error((std::string(leaves.str_keys_op) + ": result dict keys must be str").c_str());
        d.keys.push_back(nb::cast<std::string>(nb::str(k)));
      }
      break;
  }
  for (const nb::object& c : n.children) d.children.push_back(flatten_tree(c, leaves));
  return d;
}

OutDef flatten_out(nb::handle h, std::vector<ts::Array>& leaves, const char* op, const char* who) {
  TreeLeaves rules;
  rules.take = [&leaves](nb::handle x) {
    if (!nb::isinstance<ts::Array>(x)) return false;
    leaves.push_back(nb::cast<ts::Array>(x));
    return true;
  };
  rules.reject = [op, who](nb::handle x) {
    throw nb::type_error((std::string(op) + ": " + who +
                          " must return Arrays (or tuples, lists, dicts, NamedTuples, dataclasses of them), got " +
                          py_type_name(x)).c_str());
  };
  rules.str_keys_op = op;
  return flatten_tree(h, rules);
}

nb::object unflatten_out(const OutDef& d, const std::vector<ts::Array>& arrays, std::size_t& k) {
  switch (d.kind) {
    case OutDef::Kind::Leaf: return nb::cast(arrays.at(k++));
    case OutDef::Kind::None: return nb::none();
    case OutDef::Kind::Tuple:
    case OutDef::Kind::NamedTuple:
    case OutDef::Kind::List: {
      nb::list out;
      for (const auto& c : d.children) out.append(unflatten_out(c, arrays, k));
      if (d.kind == OutDef::Kind::NamedTuple) return nb::handle(d.type)(*out);
      if (d.kind == OutDef::Kind::Tuple) return nb::tuple(out);
      return out;
    }
    case OutDef::Kind::Dataclass: {
      // Built without __init__ (which may compute or check fields): the
      // fields as they were returned.
      nb::object out = nb::handle(d.type).attr("__new__")(nb::handle(d.type));
      for (std::size_t i = 0; i < d.keys.size(); ++i)
        callables().object_setattr(out, d.keys[i].c_str(), unflatten_out(d.children[i], arrays, k));
      return out;
    }
    case OutDef::Kind::Dict: {
      nb::dict out;
      for (std::size_t i = 0; i < d.keys.size(); ++i) out[d.keys[i].c_str()] = unflatten_out(d.children[i], arrays, k);
      return out;
    }
  }
  return nb::none();
}

bool same_structure(const OutDef& a, const OutDef& b) {
  if (a.kind != b.kind || a.type != b.type || a.keys != b.keys || a.children.size() != b.children.size()) return false;
  for (std::size_t i = 0; i < a.children.size(); ++i)
    if (!same_structure(a.children[i], b.children[i])) return false;
  return true;
}

std::string structure_of(const OutDef& d) {
  std::string open, close = ")";
  switch (d.kind) {
    case OutDef::Kind::Leaf: return "P";
    case OutDef::Kind::None: return "None";
    case OutDef::Kind::Tuple: open = "("; break;
    case OutDef::Kind::List:
      open = "[";
      close = "]";
      break;
    case OutDef::Kind::Dict:
      open = "{";
      close = "}";
      break;
    case OutDef::Kind::NamedTuple:
    case OutDef::Kind::Dataclass:
      open = nb::cast<std::string>(nb::str(nb::handle(d.type).attr("__name__"))) + "(";
      break;
  }
  std::string s = open;
  for (std::size_t i = 0; i < d.children.size(); ++i) {
    if (i) s += ", ";
    if (d.kind == OutDef::Kind::Dict) s += d.keys[i] + ": ";
    if (d.kind == OutDef::Kind::Dataclass) s += d.keys[i] + "=";
    s += structure_of(d.children[i]);
  }
  return s + close;
}

}  // namespace tessera_py
