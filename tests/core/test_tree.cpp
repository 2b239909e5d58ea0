// Pytrees: leaves in visiting order with their paths, tree_map,
// unflattening, structures that ignore the leaf type, registered structs
// (plain and templated over the leaf type) and structure mismatch messages.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/tessera.hpp"
#include "tessera/tree.hpp"
#include "test_util.hpp"

namespace ts = tessera;
using namespace tessera::testing;

namespace demo {
struct Stars {
  ts::Array coords, velocity, mass;
  int generation = 0;  // a non-array leaf rides along
};

template <class L>
struct Pair {
  L first, second;
};
}  // namespace demo

TESSERA_TREE(demo::Stars, coords, velocity, mass, generation)
TESSERA_TREE_TEMPLATE(demo::Pair, first, second)

namespace {

// An array whose first element is `start`.
ts::Array vec(float start, std::int64_t n = 3) {
  std::vector<float> v(static_cast<size_t>(n), start);
  return ts::device_put(v, {n}, ts::NamedSharding(ts::Mesh(first_devices(1), {1}, {"x"}), ts::P()));
}

float first_value(const ts::Array& a) { return a.to_vector<float>().at(0); }

TEST(Tree, RegisteredStructsLeavesPathsAndStructure) {
  demo::Stars s{vec(0), vec(10), vec(20), 7};
  const auto leaves = ts::tree_leaves(s);
  ASSERT_EQ(leaves.size(), 3u);
  EXPECT_EQ(first_value(leaves[0]), 0.0f);
  EXPECT_EQ(first_value(leaves[2]), 20.0f);
  EXPECT_EQ(ts::tree_paths(s), (std::vector<std::string>{"coords", "velocity", "mass"}));
  EXPECT_EQ(ts::tree_structure(s).str(), "demo::Stars(coords=*, velocity=*, mass=*, generation=*)");
  static_assert(ts::is_tree_node<demo::Stars>);
  static_assert(!ts::is_tree_node<ts::Array>);
}

TEST(Tree, NestedContainersInVisitingOrder) {
  std::map<std::string, ts::Array> params{{"w", vec(1)}, {"b", vec(2)}};  // keys in sorted order
  std::tuple<std::vector<ts::Array>, std::map<std::string, ts::Array>, ts::Array> t{{vec(3), vec(4)}, params, vec(5)};
  EXPECT_EQ(ts::tree_paths(t), (std::vector<std::string>{"[0][0]", "[0][1]", "[1]['b']", "[1]['w']", "[2]"}));
  EXPECT_EQ(ts::tree_structure(t).str(), "([*, *], {'b': *, 'w': *}, *)");
  std::vector<float> firsts;
  for (const auto& a : ts::tree_leaves(t)) firsts.push_back(first_value(a));
  EXPECT_EQ(firsts, (std::vector<float>{3, 4, 2, 1, 5}));
  std::vector<demo::Stars> many{{vec(0), vec(1), vec(2), 0}, {vec(3), vec(4), vec(5), 1}};
  EXPECT_EQ(ts::tree_paths(many)[4], "[1].velocity");
}

TEST(Tree, MapAndUnflattenKeepTheStructure) {
  demo::Stars s{vec(0), vec(10), vec(20), 7};
  demo::Stars d = ts::tree_map([](const ts::Array& a) { return a * 2.0f; }, s);
  EXPECT_EQ(first_value(d.velocity), 20.0f);
  EXPECT_EQ(d.generation, 7);
  EXPECT_EQ(first_value(s.velocity), 10.0f);  // the input is unchanged
  demo::Stars u = ts::tree_unflatten(s, {vec(100), vec(200), vec(300)});
  EXPECT_EQ(first_value(u.mass), 300.0f);
  expect_error<ts::ShapeError>([&] { (void)ts::tree_unflatten(s, {vec(1)}); }, "[tree_unflatten]",
                               {"more arrays than the 1 leaves", "'velocity'"});
  expect_error<ts::ShapeError>([&] { (void)ts::tree_unflatten(s, {vec(1), vec(2), vec(3), vec(4)}); },
                               "[tree_unflatten]", {"has 3 arrays, but 4 leaves"});
}

TEST(Tree, TemplatedStructsMirrorTheirLeafType) {
  ts::Mesh m(first_devices(2), {2}, {"x"});
  demo::Pair<ts::Array> arrays{vec(0), vec(1)};
  demo::Pair<ts::NamedSharding> layouts{ts::NamedSharding(m, ts::P("x")), ts::NamedSharding(m, ts::P())};
  EXPECT_EQ(ts::tree_structure(arrays), ts::tree_structure(layouts));
  EXPECT_EQ(ts::tree_structure(arrays).str(), "demo::Pair(first=*, second=*)");
  ts::check_same_structure(arrays, layouts, "jit", "the arguments", "in_shardings");
  std::map<std::string, ts::Array> wrong{{"first", vec(0)}};
  expect_error<ts::ShapeError>([&] { ts::check_same_structure(arrays, wrong, "jit", "the arguments", "in_shardings"); },
                               "[jit] tree structure mismatch:",
                               {"the arguments is demo::Pair(first=*, second=*)", "in_shardings is {'first': *}",
                                "they part at 'first'"});
}

}  // namespace
