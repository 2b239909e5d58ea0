// The public API contract of DESIGN.md, written as a user would: if a name or
// a call form there stops compiling, this file does.
#include <gtest/gtest.h>

#include <tessera/tessera.hpp>

namespace ts = tessera;

TEST(Contract, DesignSnippetCompilesAndRuns) {
  ts::config::set_num_cpu_devices(8);  // same count as the environment: accepted
  std::vector<ts::Device> all = ts::devices();
  int pid = ts::process_index();
  EXPECT_EQ(pid, 0);

  ts::Mesh mesh = ts::make_mesh({2, 4}, {"x", "y"});
  ts::Mesh emesh = ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit});
  ts::Mesh one(std::vector<ts::Device>{all[0]}, {1}, {"x"});
  ts::NamedSharding s(mesh, ts::P("x", "y"));
  ts::NamedSharding rows(mesh, ts::P({"x", "y"}, ts::none));
  ts::NamedSharding rep(mesh, ts::P());
  std::vector<ts::PartitionSpec::Entry> entries = {ts::none, "y", std::vector<std::string>{"x"}};
  ts::PartitionSpec built(entries);
  EXPECT_EQ(mesh.size(), 8);
  EXPECT_EQ(mesh.shape(), (std::vector<int>{2, 4}));
  EXPECT_EQ(mesh.axis_names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(mesh.devices().size(), 8u);
  int id = all[0].id();
  EXPECT_EQ(id, 0);
  std::string text = s.str();
  EXPECT_EQ(text, "NamedSharding(mesh=Mesh('x': 2, 'y': 4), spec=PartitionSpec('x', 'y'))");

  std::vector<float> host(10 * 8);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.25f * static_cast<float>(i);
  ts::Array a = ts::device_put(host, {10, 8}, s);
  ts::Array b = ts::device_put(a, rep);
  ts::Array c = ts::reshard(a, ts::P(ts::none, "y"));
  std::vector<float> back = a.to_vector<float>();
  EXPECT_EQ(back, host);
  EXPECT_EQ(b.to_vector<float>(), host);
  EXPECT_EQ(c.to_vector<float>(), host);
  EXPECT_EQ(a.shape(), (ts::Shape{10, 8}));
  EXPECT_EQ(a.dtype(), ts::f32);
  EXPECT_EQ(a.ndim(), 2);
  EXPECT_EQ(a.size(), 80);
  EXPECT_EQ(a.sharding(), s);
  for (const ts::Shard& sh : a.addressable_shards()) {
    EXPECT_GE(sh.device.id(), 0);
    EXPECT_EQ(sh.index.size(), 2u);
    EXPECT_EQ(sh.data.size(), (sh.index[0].stop - sh.index[0].start) * (sh.index[1].stop - sh.index[1].start));
  }
  auto callback = [](const std::vector<ts::Slice>& idx) {
    return std::vector<float>(static_cast<size_t>(idx[0].size() * idx[1].size()), 1.0f);
  };
  ts::Array d = ts::make_array_from_callback({10, 8}, ts::f32, s, callback);
  EXPECT_EQ(ts::sum(d).item<float>(), 80.0f);
  std::ostringstream os;
  ts::visualize_sharding(a, os);
  EXPECT_FALSE(os.str().empty());
  std::string ty = ts::typeof(a);
  EXPECT_EQ(ty, "f32[10@x,8@y]");

  ts::Array y = 2.0f * ts::sin(a) + 1.0f;
  ts::Array s0 = ts::sum(a, {0});
  ts::Array x = ts::device_put(host, {10, 8}, ts::NamedSharding(mesh, ts::P("x", ts::none)));
  ts::Array w = ts::ones({8, 4}, ts::f32, ts::NamedSharding(mesh, ts::P(ts::none, "y")));
  ts::Array m = ts::matmul(x, w);
  ts::Array dd = ts::diff(a, /*n=*/1, /*axis=*/0);
  ts::Array zero_row = ts::zeros({1, 8}, ts::f32, ts::NamedSharding(mesh, ts::P(ts::none, "y")));
  ts::Array dp = ts::diff(a, 1, 0, {.prepend = zero_row});
  ts::Array mu = ts::mean(a, {1}, {.keepdims = true});
  ts::Array cs = ts::cumsum(a, /*axis=*/0);
  ts::Array data = ts::ones({6, 3}, ts::f32, ts::NamedSharding(mesh, ts::P("x")));
  ts::Array segment_ids =
      ts::device_put(std::vector<std::int32_t>{0, 1, 4, 1, 0, 2}, {6}, ts::NamedSharding(mesh, ts::P("x")));
  ts::Array seg = ts::segment_sum(data, segment_ids, /*num_segments=*/5);
  ts::Array z = ts::zeros({4096, 4096}, ts::f64, s);
  EXPECT_EQ(y.shape(), a.shape());
  EXPECT_EQ(s0.shape(), (ts::Shape{8}));
  EXPECT_EQ(m.shape(), (ts::Shape{10, 4}));
  EXPECT_EQ(dd.shape(), (ts::Shape{9, 8}));
  EXPECT_EQ(dp.shape(), (ts::Shape{10, 8}));
  EXPECT_EQ(mu.shape(), (ts::Shape{10, 1}));
  EXPECT_EQ(cs.shape(), (ts::Shape{10, 8}));
  EXPECT_EQ(seg.to_vector<float>(), (std::vector<float>{2, 2, 2, 2, 2, 2, 1, 1, 1, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(z.size(), 4096 * 4096);

  ts::Array xe = ts::device_put(host, {8, 10}, ts::NamedSharding(emesh, ts::P("X", ts::none)));
  ts::Array we = ts::ones({10, 3}, ts::f32, ts::NamedSharding(emesh, ts::P()));
  ts::Array m2 = ts::matmul(xe, we, {.out_sharding = ts::P("X", ts::none)});
  EXPECT_EQ(ts::typeof(m2), "f32[8@X,3]");

  auto f = ts::shard_map([](ts::Array xl) { return ts::psum(ts::sum(xl), "x"); }, mesh, /*in_specs=*/{ts::P("x")},
                         /*out_specs=*/ts::P());
  ts::Array total = f(a);
  EXPECT_FLOAT_EQ(total.item<float>(), ts::sum(a).item<float>());
  auto body = [](ts::Array xl) {
    int me = ts::axis_index("x").item<int32_t>();
    return xl * static_cast<float>(me);
  };
  auto g = ts::shard_map(body, mesh, {ts::P("x")}, ts::P("x"), {.check_vma = false});
  EXPECT_EQ(g(a).shape(), a.shape());

  // vmap, chunked maps, autodiff (DESIGN's lines, with functions filled in).
  {
    auto fn = [](ts::Array v, ts::Array w) { return ts::sin(v) * w; };
    ts::Array xs = ts::ones({6, 4}, ts::f32, rep), w4 = ts::ones({4}, ts::f32, rep);
    auto vf = ts::vmap(fn, {.in_axes = {0, ts::not_mapped}, .out_axes = {0}});
    auto vc = ts::vmap([](ts::Array v) { return v * 2.0f; }, {.in_axes = {0}, .chunk_size = 64});
    ts::Array ys = ts::map([](ts::Array v) { return v + 1.0f; }, xs, {.batch_size = 256});
    EXPECT_EQ(vf(xs, w4).shape(), xs.shape());
    EXPECT_EQ(vc(xs).shape(), xs.shape());
    EXPECT_EQ(ys.shape(), xs.shape());
    ts::Array x = ts::ones({4}, ts::f32, rep), dx = ts::ones({4}, ts::f32, rep);
    auto [out, tangent] = ts::jvp([](ts::Array v) { return ts::sin(v); }, {x}, {dx});
    EXPECT_EQ(tangent.shape(), out.shape());
    auto loss = [](ts::Array params, ts::Array data) { return ts::sum(params * data); };
    auto [val, gr] = ts::value_and_grad(loss)(x, dx);
    EXPECT_EQ(gr.shape(), x.shape());
    (void)val;
    auto J = ts::jacfwd([](const ts::Array& v) { return ts::sin(v); }, {.chunk_size = 64});
    EXPECT_EQ(J(x).shape(), (ts::Shape{4, 4}));
  }

  ts::Key k = ts::random::key(0);
  ts::Key kd = ts::random::fold_in(k, 3);
  ts::Array r = ts::random::normal(k, {1000, 64}, ts::f32, s);
  EXPECT_FALSE(kd == k);
  EXPECT_EQ(r.shape(), (ts::Shape{1000, 64}));

  // Errors: the hierarchy of the contract.
  static_assert(std::is_base_of_v<std::runtime_error, ts::Error>);
  static_assert(std::is_base_of_v<ts::Error, ts::ShapeError>);
  static_assert(std::is_base_of_v<ts::Error, ts::DTypeError>);
  static_assert(std::is_base_of_v<ts::Error, ts::ShardingError>);
  static_assert(std::is_base_of_v<ts::Error, ts::CollectiveError>);
  static_assert(std::is_base_of_v<ts::Error, ts::DeviceError>);
  ts::Array bad_w = ts::ones({12, 4}, ts::f32, rep);
  try {
    ts::matmul(ts::ones({8, 16}, ts::f32, rep), bad_w);
    ADD_FAILURE() << "no error";
  } catch (const ts::ShapeError& e) {
    EXPECT_STREQ(e.what(), "[matmul] contracting dims differ: lhs (8, 16) vs rhs (12, 4)");
  }
}
