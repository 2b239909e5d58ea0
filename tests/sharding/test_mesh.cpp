// Tests of meshes, partition specs and named shardings.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <typeinfo>
#include <unordered_set>
#include <vector>

#include "tessera/tessera.hpp"
#include "test_util.hpp"

namespace ts = tessera;
using ts::testing::expect_error;
using ts::testing::ids;

namespace {



}  // namespace

// ---------------------------------------------------------------- make_mesh

TEST(Mesh, MakeMesh2x4) {
  auto all = ts::devices();
  ts::Mesh mesh = ts::make_mesh({2, 4}, {"x", "y"});
  EXPECT_EQ(mesh.shape(), (std::vector<int>{2, 4}));
  EXPECT_EQ(mesh.axis_names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(mesh.axis_types(), (std::vector<ts::AxisType>{ts::AxisType::Auto, ts::AxisType::Auto}));
  EXPECT_EQ(mesh.size(), 8);
  EXPECT_EQ(mesh.ndim(), 2);
  EXPECT_EQ(mesh.devices(), all);  // row-major over all devices
  EXPECT_EQ(mesh.axis_size("x"), 2);
  EXPECT_EQ(mesh.axis_size("y"), 4);
  EXPECT_EQ(mesh.axis_index("x"), 0);
  EXPECT_EQ(mesh.axis_index("y"), 1);
  EXPECT_EQ(mesh.axis_index("z"), -1);
  // Row-major: position = cx * 4 + cy.
  for (int pos = 0; pos < 8; ++pos) {
    EXPECT_EQ(mesh.coords(pos), (std::vector<int>{pos / 4, pos % 4})) << pos;
    EXPECT_EQ(mesh.device_position(all[pos]), pos);
  }
  EXPECT_EQ(mesh.coords(5), (std::vector<int>{1, 1}));
  EXPECT_EQ(mesh.coords(3), (std::vector<int>{0, 3}));
}

TEST(Mesh, MakeMesh3d) {
  ts::Mesh mesh = ts::make_mesh({2, 2, 2}, {"a", "b", "c"});
  EXPECT_EQ(mesh.ndim(), 3);
  EXPECT_EQ(mesh.coords(6), (std::vector<int>{1, 1, 0}));
  EXPECT_EQ(mesh.coords(1), (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(mesh.str(), "Mesh('a': 2, 'b': 2, 'c': 2)");
}

TEST(Mesh, MakeMeshWithDevicesSubset) {
  ts::Mesh mesh = ts::make_mesh({3}, {"x"}, {}, ids({6, 1, 4}));
  EXPECT_EQ(mesh.size(), 3);
  EXPECT_EQ(mesh.devices(), ids({6, 1, 4}));
  EXPECT_EQ(mesh.device_position(ts::Device::from_id(6)), 0);
  EXPECT_EQ(mesh.device_position(ts::Device::from_id(1)), 1);
  EXPECT_EQ(mesh.device_position(ts::Device::from_id(4)), 2);
  EXPECT_EQ(mesh.device_position(ts::Device::from_id(0)), -1);
  EXPECT_EQ(mesh.device_position(ts::Device::from_id(7)), -1);
  EXPECT_EQ(mesh.device_position(ts::Device::from_id(5)), -1);
}

TEST(Mesh, AxisSizeOfUnknownAxisThrows) {
  ts::Mesh mesh = ts::make_mesh({2, 4}, {"x", "y"});
  expect_error<ts::ShardingError>([&] { (void)mesh.axis_size("z"); }, "[Mesh]", {"'z'"});
}

TEST(Mesh, MakeMeshProductMismatch) {
  expect_error<ts::ShardingError>([] { ts::make_mesh({2, 3}, {"x", "y"}); }, "[make_mesh]", {"6", "8"});
  expect_error<ts::ShardingError>([] { ts::make_mesh({16}, {"x"}); }, "[make_mesh]", {"16", "8"});
  expect_error<ts::ShardingError>([] { ts::make_mesh({4}, {"x"}, {}, ids({0, 1, 2})); }, "[make_mesh]",
                                  {"4", "3"});
  EXPECT_THROW(ts::make_mesh({2, 2}, {"x", "y"}), ts::ShardingError);
}

TEST(Mesh, MakeMeshPassesOnOtherErrorsAsMesh) {
  expect_error<ts::ShardingError>([] { ts::make_mesh({2, 4}, {"x"}); }, "[Mesh]", {"name"});
  expect_error<ts::ShardingError>([] { ts::make_mesh({2, 4}, {"x", "x"}); }, "[Mesh]", {"'x'", "twice"});
}

// ------------------------------------------------------- explicit Mesh ctor

TEST(Mesh, ExplicitDevices) {
  auto all = ts::devices();
  ts::Mesh one(std::vector<ts::Device>{all[0]}, {1}, {"x"});
  EXPECT_EQ(one.size(), 1);
  EXPECT_EQ(one.devices()[0], all[0]);
  EXPECT_EQ(one.str(), "Mesh('x': 1)");
  ts::Mesh rev(ids({7, 6, 5, 4, 3, 2}), {2, 3}, {"a", "b"});
  EXPECT_EQ(rev.devices()[4].id(), 3);
  EXPECT_EQ(rev.coords(4), (std::vector<int>{1, 1}));
  EXPECT_EQ(rev.device_position(ts::Device::from_id(3)), 4);
  EXPECT_EQ(rev.device_position(ts::Device::from_id(0)), -1);
}

TEST(Mesh, CtorProductMismatch) {
  expect_error<ts::ShardingError>([] { ts::Mesh(ids({0, 1, 2}), {2, 2}, {"x", "y"}); }, "[Mesh]",
                                  {"(2, 2)", "4", "3 devices"});
  EXPECT_THROW(ts::Mesh(ids({0, 1, 2, 3, 4}), {2, 2}, {"x", "y"}), ts::ShardingError);
}

TEST(Mesh, CtorDuplicateNames) {
  expect_error<ts::ShardingError>([] { ts::Mesh(ids({0, 1, 2, 3}), {2, 2}, {"x", "x"}); }, "[Mesh]",
                                  {"'x'", "twice"});
}

TEST(Mesh, CtorEmptyName) {
  expect_error<ts::ShardingError>([] { ts::Mesh(ids({0, 1, 2, 3}), {2, 2}, {"x", ""}); }, "[Mesh]",
                                  {"non-empty"});
}

TEST(Mesh, CtorNamesCountMismatch) {
  expect_error<ts::ShardingError>([] { ts::Mesh(ids({0, 1, 2, 3}), {2, 2}, {"x"}); }, "[Mesh]",
                                  {"one name per axis", "2 axes", "1 names"});
  expect_error<ts::ShardingError>([] { ts::Mesh(ids({0, 1}), {2}, {"x", "y"}); }, "[Mesh]", {"name"});
}

TEST(Mesh, CtorAxisTypesCountMismatch) {
  expect_error<ts::ShardingError>(
      [] { ts::Mesh(ids({0, 1}), {2}, {"x"}, {ts::AxisType::Auto, ts::AxisType::Explicit}); }, "[Mesh]",
      {"axis type"});
}

TEST(Mesh, CtorRepeatedDevice) {
  expect_error<ts::ShardingError>([] { ts::Mesh(ids({0, 1, 1, 3}), {2, 2}, {"x", "y"}); }, "[Mesh]",
                                  {"device 1", "twice"});
}

TEST(Mesh, CtorAxisSizeZero) {
  expect_error<ts::ShardingError>([] { ts::Mesh(ids({}), {2, 0}, {"x", "y"}); }, "[Mesh]", {">= 1", "(2, 0)"});
  expect_error<ts::ShardingError>([] { ts::Mesh(ids({0}), {-1}, {"x"}); }, "[Mesh]", {">= 1"});
}

TEST(Mesh, CtorUnknownDevice) {
  expect_error<ts::ShardingError>([] { ts::Mesh(ids({0, 8}), {2}, {"x"}); }, "[Mesh]", {"8"});
  expect_error<ts::ShardingError>([] { ts::Mesh(ids({-1}), {1}, {"x"}); }, "[Mesh]", {"-1"});
}

// ------------------------------------------------------- str, ==, hash

TEST(Mesh, Str) {
  EXPECT_EQ(ts::make_mesh({2, 4}, {"x", "y"}).str(), "Mesh('x': 2, 'y': 4)");
  EXPECT_EQ(ts::make_mesh({8}, {"data"}).str(), "Mesh('data': 8)");
  EXPECT_EQ(ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit}).str(), "Mesh('X': 8, axis_types=(Explicit,))");
  EXPECT_EQ(ts::make_mesh({2, 4}, {"x", "y"}, {ts::AxisType::Explicit, ts::AxisType::Explicit}).str(),
            "Mesh('x': 2, 'y': 4, axis_types=(Explicit, Explicit))");
  EXPECT_EQ(ts::make_mesh({2, 4}, {"x", "y"}, {ts::AxisType::Explicit, ts::AxisType::Auto}).str(),
            "Mesh('x': 2, 'y': 4, axis_types=(Explicit, Auto))");
  EXPECT_EQ(ts::make_mesh({2, 4}, {"x", "y"}, {ts::AxisType::Auto, ts::AxisType::Auto}).str(),
            "Mesh('x': 2, 'y': 4)");
  EXPECT_EQ(ts::axis_type_name(ts::AxisType::Manual), "Manual");
}

TEST(Mesh, EqualityAndHash) {
  ts::Mesh a = ts::make_mesh({2, 4}, {"x", "y"});
  ts::Mesh b = ts::make_mesh({2, 4}, {"x", "y"});
  ts::Mesh copy = a;
  EXPECT_TRUE(a == b);
  EXPECT_TRUE(a == copy);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(std::hash<ts::Mesh>()(a), std::hash<ts::Mesh>()(b));
  EXPECT_FALSE(a == ts::make_mesh({4, 2}, {"x", "y"}));
  EXPECT_FALSE(a == ts::make_mesh({2, 4}, {"a", "y"}));
  EXPECT_FALSE(a == ts::make_mesh({2, 4}, {"x", "y"}, {ts::AxisType::Explicit, ts::AxisType::Auto}));
  EXPECT_FALSE(a == ts::Mesh(ids({7, 6, 5, 4, 3, 2, 1, 0}), {2, 4}, {"x", "y"}));
  std::unordered_set<ts::Mesh> set{a, b, copy, ts::make_mesh({8}, {"x"})};
  EXPECT_EQ(set.size(), 2u);
}

// ---------------------------------------------------------- PartitionSpec

TEST(PartitionSpec, Builders) {
  ts::PartitionSpec p0 = ts::P();
  EXPECT_EQ(p0.size(), 0);
  EXPECT_TRUE(p0[0].is_none());
  EXPECT_TRUE(p0.unreduced().empty());

  ts::PartitionSpec p1 = ts::P("x");
  ASSERT_EQ(p1.size(), 1);
  EXPECT_EQ(p1[0].axes(), (std::vector<std::string>{"x"}));
  EXPECT_TRUE(p1[1].is_none());  // past the end: none

  ts::PartitionSpec p2 = ts::P("x", "y");
  ASSERT_EQ(p2.size(), 2);
  EXPECT_EQ(p2[1].axes(), (std::vector<std::string>{"y"}));

  ts::PartitionSpec pg = ts::P({"x", "y"}, ts::none);
  ASSERT_EQ(pg.size(), 2);
  EXPECT_EQ(pg[0].axes(), (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(pg[1].is_none());

  std::string ax = "y";
  ts::PartitionSpec ps = ts::P(ts::none, ax);
  EXPECT_EQ(ps[1].axes(), (std::vector<std::string>{"y"}));
}

TEST(PartitionSpec, BuiltByProgram) {
  std::vector<ts::PartitionSpec::Entry> entries = {ts::none, "y", std::vector<std::string>{"x"}};
  ts::PartitionSpec built(entries);
  ASSERT_EQ(built.size(), 3);
  EXPECT_TRUE(built[0].is_none());
  EXPECT_EQ(built[1].axes(), (std::vector<std::string>{"y"}));
  EXPECT_EQ(built[2].axes(), (std::vector<std::string>{"x"}));
  EXPECT_EQ(built.str(), "PartitionSpec(None, 'y', ('x',))");
  // A grouped single axis equals the plain axis.
  EXPECT_EQ(built, ts::P(ts::none, "y", "x"));

  std::vector<ts::PartitionSpec::Entry> grown;
  for (const char* a : {"x", "y"}) grown.emplace_back(std::string(a));
  EXPECT_EQ(ts::PartitionSpec(grown), ts::P("x", "y"));
}

TEST(PartitionSpec, Str) {
  EXPECT_EQ(ts::P().str(), "PartitionSpec()");
  EXPECT_EQ(ts::P("x", "y").str(), "PartitionSpec('x', 'y')");
  EXPECT_EQ(ts::P({"x", "y"}, ts::none).str(), "PartitionSpec(('x', 'y'), None)");
  EXPECT_EQ(ts::P("x", ts::none).str(), "PartitionSpec('x', None)");
  EXPECT_EQ(ts::P(ts::none, {"y", "x"}).str(), "PartitionSpec(None, ('y', 'x'))");
  EXPECT_EQ(ts::P(ts::none, ts::none).str(), "PartitionSpec(None, None)");
  EXPECT_EQ(ts::PartitionSpec::Entry().str(), "None");
  EXPECT_EQ(ts::PartitionSpec::Entry("x").str(), "'x'");
  EXPECT_EQ(ts::PartitionSpec::Entry({"x", "y"}).str(), "('x', 'y')");
  // One entry prints as Python prints a one-element tuple, like JAX.
  EXPECT_EQ(ts::P("x").str(), "PartitionSpec('x',)");
  EXPECT_EQ(ts::P({"x", "y"}).str(), "PartitionSpec(('x', 'y'),)");
}

TEST(PartitionSpec, EqualityIgnoresTrailingNone) {
  EXPECT_EQ(ts::P("x"), ts::P("x", ts::none));
  EXPECT_EQ(ts::P("x"), ts::P("x", ts::none, ts::none));
  EXPECT_EQ(ts::P(), ts::P(ts::none));
  EXPECT_EQ(ts::P(), ts::P(ts::none, ts::none, ts::none));
  EXPECT_EQ(ts::P("x", ts::none), ts::P("x"));
  EXPECT_NE(ts::P("x"), ts::P(ts::none, "x"));
  EXPECT_NE(ts::P("x"), ts::P("y"));
  EXPECT_NE(ts::P("x", "y"), ts::P("y", "x"));
  EXPECT_NE(ts::P({"x", "y"}), ts::P({"y", "x"}));
  EXPECT_NE(ts::P({"x", "y"}), ts::P("x", "y"));
  EXPECT_NE(ts::P("x"), ts::P());
  EXPECT_EQ(ts::P("x"), ts::P(std::vector<std::string>{"x"}));  // 'x' == ('x',)
}

TEST(PartitionSpec, HashConsistentWithEquality) {
  std::vector<ts::PartitionSpec> specs = {
      ts::P(),          ts::P(ts::none),       ts::P(ts::none, ts::none), ts::P("x"),
      ts::P("x", ts::none), ts::P(ts::none, "x"), ts::P("x", "y"),          ts::P("y", "x"),
      ts::P({"x", "y"}), ts::P({"x", "y"}, ts::none), ts::P({"y", "x"}),   ts::P(std::vector<std::string>{"x"}),
  };
  for (const auto& a : specs)
    for (const auto& b : specs)
      if (a == b) {
        EXPECT_EQ(a.hash(), b.hash()) << a.str() << " vs " << b.str();
      }
  std::unordered_set<ts::PartitionSpec> set(specs.begin(), specs.end());
  // Classes: {P(), P(None), P(None,None)}, {P('x'), P('x',None), P(('x',))},
  // {P(None,'x')}, {P('x','y')}, {P('y','x')}, {P(('x','y')), P(('x','y'),None)}, {P(('y','x'))}
  EXPECT_EQ(set.size(), 7u);
}

// ---------------------------------------------------------- NamedSharding

TEST(NamedSharding, Basics) {
  ts::Mesh mesh = ts::make_mesh({2, 4}, {"x", "y"});
  ts::NamedSharding s(mesh, ts::P("x", "y"));
  EXPECT_EQ(s.mesh(), mesh);
  EXPECT_EQ(s.spec(), ts::P("x", "y"));
  EXPECT_EQ(s.str(), "NamedSharding(mesh=Mesh('x': 2, 'y': 4), spec=PartitionSpec('x', 'y'))");
  EXPECT_EQ(ts::NamedSharding(mesh, ts::P()).str(), "NamedSharding(mesh=Mesh('x': 2, 'y': 4), spec=PartitionSpec())");
  EXPECT_EQ(ts::NamedSharding(mesh, ts::P({"x", "y"}, ts::none)).str(),
            "NamedSharding(mesh=Mesh('x': 2, 'y': 4), spec=PartitionSpec(('x', 'y'), None))");
  EXPECT_EQ(s.num_parts(0), 2);
  EXPECT_EQ(s.num_parts(1), 4);
  EXPECT_EQ(s.num_parts(2), 1);
  EXPECT_FALSE(s.is_fully_replicated());
  EXPECT_TRUE(ts::NamedSharding(mesh, ts::P()).is_fully_replicated());
  ts::Mesh one(std::vector<ts::Device>{ts::devices()[2]}, {1}, {"x"});
  EXPECT_TRUE(ts::NamedSharding(one, ts::P("x")).is_fully_replicated());
}

TEST(NamedSharding, UnknownAxisThrows) {
  ts::Mesh mesh = ts::make_mesh({2, 4}, {"x", "y"});
  EXPECT_THROW(ts::NamedSharding(mesh, ts::P("z")), ts::ShardingError);
  expect_error<ts::ShardingError>([&] { ts::NamedSharding(mesh, ts::P("x", "z")); }, "[NamedSharding]",
                                  {"'z'", "not in the mesh", "'x', 'y'"});
  expect_error<ts::ShardingError>([&] { ts::NamedSharding(mesh, ts::P({"x", "w"}, ts::none)); },
                                  "[NamedSharding]", {"'w'"});
}

TEST(NamedSharding, AxisUsedTwiceThrows) {
  ts::Mesh mesh = ts::make_mesh({2, 4}, {"x", "y"});
  expect_error<ts::ShardingError>([&] { ts::NamedSharding(mesh, ts::P("x", "x")); }, "[NamedSharding]",
                                  {"'x'", "more than once"});
  expect_error<ts::ShardingError>([&] { ts::NamedSharding(mesh, ts::P({"y", "y"})); }, "[NamedSharding]",
                                  {"'y'", "more than once"});
  expect_error<ts::ShardingError>([&] { ts::NamedSharding(mesh, ts::P({"x", "y"}, "y")); }, "[NamedSharding]",
                                  {"'y'", "more than once"});
}

TEST(NamedSharding, EqualityAndHash) {
  ts::Mesh mesh = ts::make_mesh({2, 4}, {"x", "y"});
  ts::Mesh mesh_again = ts::make_mesh({2, 4}, {"x", "y"});
  ts::Mesh other = ts::make_mesh({4, 2}, {"x", "y"});
  ts::NamedSharding a(mesh, ts::P("x", "y"));
  ts::NamedSharding b(mesh_again, ts::P("x", "y", ts::none));
  ts::NamedSharding c(mesh, ts::P("y", "x"));
  ts::NamedSharding d(other, ts::P("x", "y"));
  ts::NamedSharding r1(mesh, ts::P());
  ts::NamedSharding r2(mesh, ts::P(ts::none));
  EXPECT_TRUE(a == b);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(std::hash<ts::NamedSharding>()(a), std::hash<ts::NamedSharding>()(b));
  EXPECT_FALSE(a == c);
  EXPECT_FALSE(a == d);
  EXPECT_TRUE(r1 == r2);
  EXPECT_EQ(r1.hash(), r2.hash());
  std::unordered_set<ts::NamedSharding> set{a, b, c, d, r1, r2};
  EXPECT_EQ(set.size(), 4u);
  EXPECT_EQ(set.count(ts::NamedSharding(ts::make_mesh({2, 4}, {"x", "y"}), ts::P("x", "y"))), 1u);
  EXPECT_EQ(set.count(ts::NamedSharding(mesh, ts::P("x"))), 0u);
}

TEST(NamedSharding, RankCheckedAtPointOfUse) {
  ts::Mesh mesh = ts::make_mesh({2, 4}, {"x", "y"});
  // Constructing a sharding with more entries than some array's rank is fine.
  ts::NamedSharding s(mesh, ts::P("x", "y"));
  std::vector<float> host(10);
  EXPECT_THROW(ts::device_put(host, {10}, s), ts::ShardingError);
  expect_error<ts::ShardingError>([&] { ts::device_put(host, {10}, s); }, "[device_put]",
                                  {"PartitionSpec('x', 'y')", "2 entries", "rank 1"});
  std::vector<int32_t> scalar{5};
  expect_error<ts::ShardingError>(
      [&] { ts::device_put(scalar, {}, ts::NamedSharding(mesh, ts::P("x"))); }, "[device_put]", {"rank 0"});
  // Trailing none entries count too: P('x', None) does not fit a rank-1 array.
  expect_error<ts::ShardingError>(
      [&] { ts::device_put(host, {10}, ts::NamedSharding(mesh, ts::P("x", ts::none))); }, "[device_put]",
      {"rank 1"});
  EXPECT_NO_THROW(ts::device_put(host, {10}, ts::NamedSharding(mesh, ts::P({"x", "y"}))));
  EXPECT_NO_THROW(s.check_rank(2, "op"));
  expect_error<ts::ShardingError>([&] { s.check_rank(1, "myop"); }, "[myop]", {"rank 1"});
}
