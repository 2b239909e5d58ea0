// Pytrees of the bindings' transformations (jit, grad, vmap, jvp, vjp and
// shard_map). As in JAX, tuples, lists, dicts (children in sorted key order),
// NamedTuples (tuples with _fields) and dataclass instances (children in
// field order) are nodes; everything else is a leaf. What counts as a leaf
// to collect (Arrays, NumPy arrays, PartitionSpecs) is the caller's.
//
// Everything here needs the GIL, except destroying an OutDef: it holds no
// owned Python reference, so it may outlive the call (jit caches) and be
// destroyed on any thread, at exit too.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common.hpp"

namespace tessera_py {

/// Looks up the Python callables used here (numpy.ndarray, dataclasses'
/// functions ...) once; called at import, on the importing thread, by every
/// binding file that uses pytrees (a second call does nothing).
void init_pytree();

// ------------------------------------------------------------ predicates

/// True for an Array or a NumPy array: the leaves that transformations trace.
bool is_array_leaf(nb::handle h);
/// True for a NamedTuple instance (a tuple with _fields).
bool is_namedtuple(nb::handle h);
/// True for a dataclass instance (not a dataclass class).
bool is_dataclass(nb::handle h);
/// The dataclass's field names, in order.
std::vector<std::string> dataclass_fields(nb::handle h);
/// A dict's keys, sorted.
nb::list sorted_keys(nb::handle dict);
/// "module.QualName" of h's class.
std::string type_key(nb::handle h);
/// __name__ of h's class.
std::string py_type_name(nb::handle h);

// ------------------------------------------------------------ one level

/// One level of a Python value: its kind and its children, in flattening
/// order. Leaf for anything that is not a pytree node.
struct Node {
  enum class Kind { Leaf, Tuple, List, Dict, NamedTuple, Dataclass } kind = Kind::Leaf;
  std::vector<nb::object> children;
  nb::list keys;                    // Dict: the keys, sorted (children in that order)
  std::vector<std::string> fields;  // Dataclass: the field names
};
Node node_of(nb::handle h);

/// A node like `like` (node_of(like) is `node`) with other children: the
/// same kind and class; a dataclass is a copy of `like` with its fields set
/// (frozen ones too), a dict has the keys in sorted order.
nb::object with_children(nb::handle like, const Node& node, const std::vector<nb::object>& children);

/// Where child i of `node` is, to name it in errors: "[0]", "['w']", ".w".
std::string child_path(const Node& node, std::size_t i);

/// h with each leaf for which is_leaf is true replaced by f(leaf), in
/// flattening order; other leaves stay as they are.
nb::object map_leaves(nb::handle h, const std::function<bool(nb::handle)>& is_leaf,
                      const std::function<nb::object(nb::handle)>& f);

// ------------------------------------------------------- result structures

/// The structure of a flattened tree (a function's result, a tree of
/// specs), without owned Python references: the classes of NamedTuples and
/// dataclasses are kept through references that are never released, so
/// that an OutDef may be destroyed without the GIL (jit caches, at exit).
struct OutDef {
  enum class Kind { Leaf, None, Tuple, List, Dict, NamedTuple, Dataclass } kind = Kind::Leaf;
  std::vector<OutDef> children;
  std::vector<std::string> keys;  // Dict: the keys; Dataclass: the field names
  PyObject* type = nullptr;       // NamedTuple, Dataclass: the class (leaked reference)
};

/// How flatten_tree treats what is not a node.
struct TreeLeaves {
  /// Takes h (appending it wherever the caller collects leaves) and returns
  /// true when h is a leaf; false for anything else.
  std::function<bool(nb::handle)> take;
  /// Raises for a value that is neither a leaf, None nor a node.
  std::function<void(nb::handle)> reject;
  /// Dict keys must be str: a TypeError "<op>: result dict keys must be str"
  /// otherwise. nullptr: any key, as str(key).
  const char* str_keys_op = nullptr;
};

/// h's structure; its leaves go to `leaves.take`; None stays None.
OutDef flatten_tree(nb::handle h, const TreeLeaves& leaves);

/// flatten_tree of a function's result, whose leaves must be Arrays:
/// appended to `leaves`. Errors are TypeErrors "<op>: <who> must return
/// Arrays (...)" and "<op>: result dict keys must be str".
OutDef flatten_out(nb::handle h, std::vector<ts::Array>& leaves, const char* op, const char* who = "the function");

/// The tree of `d` with its leaves the next of `arrays` (from k on).
nb::object unflatten_out(const OutDef& d, const std::vector<ts::Array>& arrays, std::size_t& k);

/// True when a and b have the same nodes (kinds, classes, keys) and leaves.
bool same_structure(const OutDef& a, const OutDef& b);

/// The structure as text, "P" for each leaf: "(P, [P, P], Params(P, P),
/// Layer(w=P, b=P), {k: P})".
std::string structure_of(const OutDef& d);

}  // namespace tessera_py
