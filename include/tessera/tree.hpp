// Pytrees: nested containers of arrays that transformations take and return
// as one value (JAX's pytrees).
//
//   struct Stars { ts::Array coords, velocity, mass, age, metallicity; };
//   TESSERA_TREE(Stars, coords, velocity, mass, age, metallicity)   // at namespace scope
//
//   std::vector<ts::Array> leaves = ts::tree_leaves(stars);        // in field order
//   Stars moved = ts::tree_map([](ts::Array a) { return a * 2.0f; }, stars);
//   std::string s = ts::tree_structure(stars).str();               // "Stars(coords=*, velocity=*, ...)"
//
// Nodes are std::vector<T>, std::array<T, N>, std::tuple<T...>, std::pair,
// std::map<std::string, T> and structs registered with TESSERA_TREE (or
// TESSERA_TREE_TEMPLATE for a template over its leaf type, so that
// StarsT<NamedSharding> mirrors StarsT<Array>). Everything else is a leaf:
// Array leaves are the tree's arrays; other leaves (numbers, strings,
// shardings) are carried along unchanged.
//
// Leaves are visited depth first, in field, element and key order, each with
// its path ("stars.mass", "xs[3]", "params['w']") for messages.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/array.hpp"
#include "tessera/error.hpp"

namespace tessera {

/// Specialised by TESSERA_TREE for a struct: its name and its fields.
template <class T>
struct TreeFields;

namespace tree_detail {

template <class T, class = void>
struct registered : std::false_type {};
template <class T>
struct registered<T, std::void_t<decltype(TreeFields<T>::name)>> : std::true_type {};

template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T>
struct is_array : std::false_type {};
template <class T, std::size_t N>
struct is_array<std::array<T, N>> : std::true_type {};
template <class T>
struct is_tuple : std::false_type {};
template <class... T>
struct is_tuple<std::tuple<T...>> : std::true_type {};
template <class A, class B>
struct is_tuple<std::pair<A, B>> : std::true_type {};
template <class T>
struct is_string_map : std::false_type {};
template <class V, class C, class A>
struct is_string_map<std::map<std::string, V, C, A>> : std::true_type {};

}  // namespace tree_detail

/// True for the node types above; everything else is a leaf.
template <class T>
inline constexpr bool is_tree_node =
    tree_detail::registered<T>::value || tree_detail::is_vector<T>::value || tree_detail::is_array<T>::value ||
    tree_detail::is_tuple<T>::value || tree_detail::is_string_map<T>::value;

namespace tree_detail {

/// How a node names a child: a struct field, a position, a string key.
struct ChildKey {
  enum Kind { Field, Index, Key } kind;
  std::string_view name;  // Field, Key
  std::size_t index;      // Index
};

/// Calls f(key, child) for every child of node `t`, in order (`t` const or
/// not).
template <class T, class F>
void for_each_child(T& t, F&& f) {
  using U = std::remove_const_t<T>;
  if constexpr (registered<U>::value) {
    TreeFields<U>::each(t, [&](const char* field, auto& member) { f(ChildKey{ChildKey::Field, field, 0}, member); });
  } else if constexpr (is_vector<U>::value || is_array<U>::value) {
    for (std::size_t i = 0; i < t.size(); ++i) f(ChildKey{ChildKey::Index, {}, i}, t[i]);
  } else if constexpr (is_tuple<U>::value) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (f(ChildKey{ChildKey::Index, {}, I}, std::get<I>(t)), ...);
    }(std::make_index_sequence<std::tuple_size_v<U>>{});
  } else {
    static_assert(is_string_map<U>::value);
    for (auto& [k, v] : t) f(ChildKey{ChildKey::Key, k, 0}, v);
  }
}

}  // namespace tree_detail

/// Calls f(path, leaf) for every leaf of `t`, depth first. `T` may be const
/// (leaves are then const references) or not (f may replace them).
template <class T, class F>
void tree_visit(T& t, F&& f, const std::string& path = "") {
  if constexpr (is_tree_node<std::remove_const_t<T>>) {
    tree_detail::for_each_child(t, [&](const tree_detail::ChildKey& key, auto& child) {
      using K = tree_detail::ChildKey;
      // Appended piece by piece: GCC 12 warns (-Wrestrict, wrongly) on
      // "literal" + std::string here.
      std::string p = path;
      if (key.kind == K::Field) {
        if (!p.empty()) p += '.';
        p += key.name;
      } else if (key.kind == K::Index) {
        p += '[';
        p += std::to_string(key.index);
        p += ']';
      } else {
        p += "['";
        p += key.name;
        p += "']";
      }
      tree_visit(child, f, p);
    });
  } else {
    f(path, t);
  }
}

/// The arrays of `t`, in visiting order.
template <class T>
std::vector<Array> tree_leaves(const T& t) {
  std::vector<Array> out;
  tree_visit(t, [&](const std::string&, const auto& leaf) {
    if constexpr (std::is_same_v<std::decay_t<decltype(leaf)>, Array>) out.push_back(leaf);
  });
  return out;
}

/// The paths of the arrays of `t`, in visiting order ("" for a lone array).
template <class T>
std::vector<std::string> tree_paths(const T& t) {
  std::vector<std::string> out;
  tree_visit(t, [&](const std::string& path, const auto& leaf) {
    if constexpr (std::is_same_v<std::decay_t<decltype(leaf)>, Array>) out.push_back(path);
  });
  return out;
}

/// A copy of `t` with every array replaced by f(array).
template <class F, class T>
T tree_map(F&& f, T t) {
  tree_visit(t, [&](const std::string&, auto& leaf) {
    if constexpr (std::is_same_v<std::decay_t<decltype(leaf)>, Array>) leaf = f(static_cast<const Array&>(leaf));
  });
  return t;
}

/// A copy of `like` whose arrays are `leaves`, in visiting order. Raises
/// ShapeError when the counts differ.
template <class T>
T tree_unflatten(T like, const std::vector<Array>& leaves) {
  std::size_t k = 0;
  tree_visit(like, [&](const std::string& path, auto& leaf) {
    if constexpr (std::is_same_v<std::decay_t<decltype(leaf)>, Array>) {
      if (k >= leaves.size())
        throw ShapeError("[tree_unflatten] the tree has more arrays than the " + std::to_string(leaves.size()) +
                         " leaves given (the first without one is at '" + path + "')");
      leaf = leaves[k++];
    }
  });
  if (k != leaves.size())
    throw ShapeError("[tree_unflatten] the tree has " + std::to_string(k) + " arrays, but " +
                     std::to_string(leaves.size()) + " leaves were given");
  return like;
}

/// The shape of a tree without its leaves: node kinds, struct names and
/// fields, lengths and keys; every leaf prints as "*", whatever its type, so
/// a tree of shardings has the structure of the tree of arrays it describes.
class TreeStructure {
 public:
  explicit TreeStructure(std::string text) : text_(std::move(text)) {}
  const std::string& str() const { return text_; }
  bool operator==(const TreeStructure& o) const { return text_ == o.text_; }

 private:
  std::string text_;
};

namespace tree_detail {
template <class T>
void structure_text(const T& t, std::string& s) {
  if constexpr (is_tree_node<T>) {
    const char* brackets = registered<T>::value ? "()" : is_tuple<T>::value ? "()" : is_string_map<T>::value ? "{}" : "[]";
    if constexpr (registered<T>::value) s += TreeFields<T>::name;
    s += brackets[0];
    bool first = true;
    for_each_child(t, [&](const ChildKey& key, const auto& child) {
      if (!first) s += ", ";
      first = false;
      if (key.kind == ChildKey::Field) {
        s += key.name;
        s += '=';
      } else if (key.kind == ChildKey::Key) {
        s += '\'';
        s += key.name;
        s += "': ";
      }
      structure_text(child, s);
    });
    s += brackets[1];
  } else {
    s += '*';
  }
}
}  // namespace tree_detail

template <class T>
TreeStructure tree_structure(const T& t) {
  std::string s;
  tree_detail::structure_text(t, s);
  return TreeStructure(std::move(s));
}

/// Checks that `b` has the structure of `a`; raises ShapeError naming `op`,
/// both structures and the first path where they part.
template <class A, class B>
void check_same_structure(const A& a, const B& b, const char* op, const char* what_a, const char* what_b) {
  const TreeStructure sa = tree_structure(a), sb = tree_structure(b);
  if (sa == sb) return;
  std::vector<std::string> pa, pb;
  tree_visit(a, [&](const std::string& p, const auto&) { pa.push_back(p); });
  tree_visit(b, [&](const std::string& p, const auto&) { pb.push_back(p); });
  std::string where;
  for (std::size_t i = 0; i < std::max(pa.size(), pb.size()) && where.empty(); ++i)
    if (i >= pa.size() || i >= pb.size() || pa[i] != pb[i]) where = i < pa.size() ? pa[i] : pb[i];
  throw ShapeError(std::string("[") + op + "] tree structure mismatch: " + what_a + " is " + sa.str() + ", " + what_b +
                   " is " + sb.str() + (where.empty() ? std::string() : " (they part at '" + where + "')"));
}

/// A value for every array of one argument: one value for all of them, or a
/// tree of values with the argument's structure (JAX's trees of shardings:
/// a NamedSharding per field of a struct, a PartitionSpec per entry of a
/// map). Leaves of the tree that are not values (the numbers of a
/// templated struct, say) are skipped, as the argument's non-array leaves
/// are. ShardingTree and SpecTree name the two uses.
template <class L>
class PerArray {
 public:
  PerArray(L one) : values_{std::move(one)} {}
  template <class T>
    requires is_tree_node<T>
  PerArray(const T& tree) : tree_(true) {
    tree_visit(tree, [&](const std::string& path, const auto& leaf) {
      if constexpr (std::is_convertible_v<const std::decay_t<decltype(leaf)>&, const L&>) {
        values_.push_back(leaf);
        paths_.push_back(path);
      }
    });
    structure_ = tree_structure(tree).str();
  }
  bool is_tree() const { return tree_; }
  const std::vector<L>& values() const { return values_; }

  /// The value of every array of `arg`, in tree_leaves order. A tree must
  /// hold a value exactly where `arg` holds an array: otherwise ShapeError
  /// "[op] tree structure mismatch: ..." naming `what` and the first path
  /// where they part.
  template <class A>
  std::vector<L> expand(const A& arg, const char* op, const std::string& what) const {
    const std::vector<std::string> paths = tree_paths(arg);
    if (!tree_) return std::vector<L>(paths.size(), values_.front());
    if (paths == paths_) return values_;
    std::string where;
    for (std::size_t i = 0; i < std::max(paths.size(), paths_.size()) && where.empty(); ++i)
      if (i >= paths.size() || i >= paths_.size() || paths[i] != paths_[i]) {
        const bool theirs = i < paths.size() && (i >= paths_.size() || paths[i] < paths_[i]);
        where = theirs ? "no value for the array at '" + paths[i] + "'" : "a value at '" + paths_[i] + "' where the argument has no array";
      }
    throw ShapeError(std::string("[") + op + "] tree structure mismatch: " + what + " is " + structure_ +
                     " but the argument is " + tree_structure(arg).str() + ": " + where);
  }

 private:
  std::vector<L> values_;
  std::vector<std::string> paths_;
  std::string structure_;
  bool tree_ = false;
};

using ShardingTree = PerArray<NamedSharding>;
using SpecTree = PerArray<PartitionSpec>;

}  // namespace tessera

// ------------------------------------------------------------ registration

#define TESSERA_TREE_PP_N(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, _19, \
                          _20, _21, _22, _23, _24, N, ...)                                                      \
  N
#define TESSERA_TREE_F1(m, a) m(a)
#define TESSERA_TREE_F2(m, a, ...) m(a) TESSERA_TREE_F1(m, __VA_ARGS__)
#define TESSERA_TREE_F3(m, a, ...) m(a) TESSERA_TREE_F2(m, __VA_ARGS__)
#define TESSERA_TREE_F4(m, a, ...) m(a) TESSERA_TREE_F3(m, __VA_ARGS__)
#define TESSERA_TREE_F5(m, a, ...) m(a) TESSERA_TREE_F4(m, __VA_ARGS__)
#define TESSERA_TREE_F6(m, a, ...) m(a) TESSERA_TREE_F5(m, __VA_ARGS__)
#define TESSERA_TREE_F7(m, a, ...) m(a) TESSERA_TREE_F6(m, __VA_ARGS__)
#define TESSERA_TREE_F8(m, a, ...) m(a) TESSERA_TREE_F7(m, __VA_ARGS__)
#define TESSERA_TREE_F9(m, a, ...) m(a) TESSERA_TREE_F8(m, __VA_ARGS__)
#define TESSERA_TREE_F10(m, a, ...) m(a) TESSERA_TREE_F9(m, __VA_ARGS__)
#define TESSERA_TREE_F11(m, a, ...) m(a) TESSERA_TREE_F10(m, __VA_ARGS__)
#define TESSERA_TREE_F12(m, a, ...) m(a) TESSERA_TREE_F11(m, __VA_ARGS__)
#define TESSERA_TREE_F13(m, a, ...) m(a) TESSERA_TREE_F12(m, __VA_ARGS__)
#define TESSERA_TREE_F14(m, a, ...) m(a) TESSERA_TREE_F13(m, __VA_ARGS__)
#define TESSERA_TREE_F15(m, a, ...) m(a) TESSERA_TREE_F14(m, __VA_ARGS__)
#define TESSERA_TREE_F16(m, a, ...) m(a) TESSERA_TREE_F15(m, __VA_ARGS__)
#define TESSERA_TREE_F17(m, a, ...) m(a) TESSERA_TREE_F16(m, __VA_ARGS__)
#define TESSERA_TREE_F18(m, a, ...) m(a) TESSERA_TREE_F17(m, __VA_ARGS__)
#define TESSERA_TREE_F19(m, a, ...) m(a) TESSERA_TREE_F18(m, __VA_ARGS__)
#define TESSERA_TREE_F20(m, a, ...) m(a) TESSERA_TREE_F19(m, __VA_ARGS__)
#define TESSERA_TREE_F21(m, a, ...) m(a) TESSERA_TREE_F20(m, __VA_ARGS__)
#define TESSERA_TREE_F22(m, a, ...) m(a) TESSERA_TREE_F21(m, __VA_ARGS__)
#define TESSERA_TREE_F23(m, a, ...) m(a) TESSERA_TREE_F22(m, __VA_ARGS__)
#define TESSERA_TREE_F24(m, a, ...) m(a) TESSERA_TREE_F23(m, __VA_ARGS__)
#define TESSERA_TREE_FOR_EACH(m, ...)                                                                             \
  TESSERA_TREE_PP_N(__VA_ARGS__, TESSERA_TREE_F24, TESSERA_TREE_F23, TESSERA_TREE_F22, TESSERA_TREE_F21,         \
                    TESSERA_TREE_F20, TESSERA_TREE_F19, TESSERA_TREE_F18, TESSERA_TREE_F17, TESSERA_TREE_F16,    \
                    TESSERA_TREE_F15, TESSERA_TREE_F14, TESSERA_TREE_F13, TESSERA_TREE_F12, TESSERA_TREE_F11,    \
                    TESSERA_TREE_F10, TESSERA_TREE_F9, TESSERA_TREE_F8, TESSERA_TREE_F7, TESSERA_TREE_F6,        \
                    TESSERA_TREE_F5, TESSERA_TREE_F4, TESSERA_TREE_F3, TESSERA_TREE_F2, TESSERA_TREE_F1)         \
  (m, __VA_ARGS__)
#define TESSERA_TREE_FIELD(field) f(#field, s.field);

/// Registers struct `Type` as a tree node over the listed fields (up to 24),
/// in that order. Use at global namespace scope, after the struct.
#define TESSERA_TREE(Type, ...)                                  \
  template <>                                                    \
  struct tessera::TreeFields<Type> {                             \
    static constexpr const char* name = #Type;                   \
    template <class S, class F>                                  \
    static void each(S& s, F&& f) {                              \
      TESSERA_TREE_FOR_EACH(TESSERA_TREE_FIELD, __VA_ARGS__)     \
    }                                                            \
  };

/// TESSERA_TREE for a class template over one type (its leaf type):
/// registers every Template<L>, so Template<NamedSharding> mirrors
/// Template<Array>.
#define TESSERA_TREE_TEMPLATE(Template, ...)                     \
  template <class TesseraLeaf>                                   \
  struct tessera::TreeFields<Template<TesseraLeaf>> {            \
    static constexpr const char* name = #Template;               \
    template <class S, class F>                                  \
    static void each(S& s, F&& f) {                              \
      TESSERA_TREE_FOR_EACH(TESSERA_TREE_FIELD, __VA_ARGS__)     \
    }                                                            \
  };
