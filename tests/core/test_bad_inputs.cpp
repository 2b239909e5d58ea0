// Bad inputs as data: each row is a description, a call that must fail, the
// exact exception type, the message prefix ("[op] ") and words the message
// must contain. Rows cover layout queries, element-count overflow,
// allocation failure, zero-size reductions without identity, device counts,
// and a sweep of invalid meshes, specs, shapes, dtypes and axes across the op
// families. After every row a small sharded computation must still give the
// right answer: a failed call leaves the runtime usable.
#include <cmath>
#include <climits>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "tessera/tessera.hpp"
#include "test_util.hpp"

namespace ts = tessera;

namespace {

struct Row {
  std::string name;   // test name suffix: letters, digits and underscores
  std::function<void()> call;
  std::string type;    // for messages only
  std::string prefix;  // "[op] "
  std::vector<std::string> words;
  // Runs `call` through expect_error with the row's exact type.
  std::function<void(const Row&)> check;
};

template <class E>
Row row(std::string name, std::function<void()> call, std::string prefix, std::vector<std::string> words = {}) {
  Row r{std::move(name), std::move(call), typeid(E).name(), std::move(prefix), std::move(words), nullptr};
  r.check = [](const Row& self) { ts::testing::expect_error<E>(self.call, self.prefix, self.words); };
  return r;
}

constexpr std::int64_t k62 = std::int64_t(1) << 62;
constexpr std::int64_t k61 = std::int64_t(1) << 61;
constexpr std::int64_t k40 = std::int64_t(1) << 40;

ts::Mesh mesh8() { return ts::make_mesh({8}, {"x"}); }
ts::Mesh mesh24() { return ts::make_mesh({2, 4}, {"x", "y"}); }
ts::Mesh emesh() { return ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit}); }
ts::NamedSharding rep() { return ts::NamedSharding(mesh8(), ts::P()); }
ts::NamedSharding rows8() { return ts::NamedSharding(mesh8(), ts::P("x")); }

ts::Array f32(const ts::Shape& shape, const ts::NamedSharding& s = rep()) {
  return ts::device_put(ts::testing::iota_data<float>(ts::testing::numel(shape)), shape, s);
}
ts::Array i32(const std::vector<std::int32_t>& v, const ts::NamedSharding& s = rep()) {
  return ts::device_put(v, {static_cast<std::int64_t>(v.size())}, s);
}
// An empty array whose nonzero dims are huge (no memory needed); bool, so
// that its byte count fits where its element count just does.
ts::Array empty(const ts::Shape& shape) { return ts::zeros(shape, ts::bool_, rep()); }

std::vector<Row> make_rows() {
  using ts::DeviceError;
  using ts::DTypeError;
  using ts::Error;
  using ts::ShapeError;
  using ts::ShardingError;
  std::vector<Row> r;

  // ---------------------------------------------------------- layout rule
  r.push_back(row<ShardingError>("block_size_k0", [] { ts::block_size(10, 0, 0); }, "[block_size] ", {"k >= 1", "k=0"}));
  r.push_back(row<ShardingError>("block_start_k_negative", [] { ts::block_start(10, -2, 1); }, "[block_start] ",
                                 {"k >= 1", "k=-2"}));
  r.push_back(row<ShardingError>("block_start_c_past_k", [] { ts::block_start(10, 4, 7); }, "[block_start] ",
                                 {"[0, 4)", "c=7"}));
  r.push_back(row<ShardingError>("block_size_c_negative", [] { ts::block_size(5, 3, -1); }, "[block_size] ",
                                 {"[0, 3)", "c=-1"}));
  r.push_back(row<ShapeError>("block_slice_n_negative", [] { ts::block_slice(-1, 2, 0); }, "[block_slice] ",
                              {"n >= 0", "n=-1"}));
  r.push_back(row<ShardingError>("shard_index_pos_past_mesh", [] { rows8().shard_index({8}, 8); }, "[shard_index] ",
                                 {"[0, 8)", "got 8"}));
  r.push_back(row<ShardingError>("shard_index_pos_negative", [] { rows8().shard_index({8}, -1); }, "[shard_index] ",
                                 {"got -1"}));
  r.push_back(row<ShardingError>("shard_shape_pos_past_mesh", [] { rows8().shard_shape({8}, 100); }, "[shard_shape] ",
                                 {"got 100"}));
  r.push_back(row<ShardingError>("part_index_dim_negative", [] { rows8().part_index(-1, 0); }, "[part_index] ",
                                 {"dimension >= 0", "-1"}));
  r.push_back(row<ShardingError>("part_index_pos_past_mesh", [] { rows8().part_index(0, 8); }, "[part_index] ",
                                 {"mesh position", "got 8"}));
  r.push_back(row<ShardingError>("num_parts_dim_negative", [] { rows8().num_parts(-3); }, "[num_parts] ", {"-3"}));
  r.push_back(row<ShardingError>(
      "shard_index_rank_below_spec", [] { ts::NamedSharding(mesh24(), ts::P("x", "y")).shard_index({4}, 0); },
      "[shard_index] ", {"rank 1", "2 entries"}));
  r.push_back(row<ShapeError>("shard_shape_negative_size", [] { rows8().shard_shape({-4}, 0); }, "[shard_shape] ",
                              {"(-4,)"}));

  // ---------------------------------------------- element-count overflow
  r.push_back(row<ShapeError>("zeros_2p62_by_4", [] { ts::zeros({k62, 4}, ts::f32, rep()); }, "[zeros] ",
                              {"shape (4611686018427387904, 4)", "more elements than fit in int64"}));
  r.push_back(row<ShapeError>("zeros_2p40_squared", [] { ts::zeros({k40, k40}, ts::f64, rows8()); }, "[zeros] ",
                              {"(1099511627776, 1099511627776)", "int64"}));
  r.push_back(row<ShapeError>("ones_bytes_overflow", [] { ts::ones({k61}, ts::f64, rep()); }, "[ones] ",
                              {"f64", "bytes", "int64"}));
  r.push_back(row<ShapeError>("full_overflow", [] { ts::full({k62, 2, 2}, 1, ts::i32, rep()); }, "[full] ",
                              {"int64"}));
  r.push_back(row<ShapeError>("zero_dim_does_not_hide_overflow", [] { ts::zeros({k40, k40, 0}, ts::f32, rep()); },
                              "[zeros] ", {"(1099511627776, 1099511627776, 0)", "int64"}));
  r.push_back(row<ShapeError>("pad_by_2p62", [] { ts::pad(f32({4}), {{k62, k62}}); }, "[pad] ",
                              {"padded by (4611686018427387904, 4611686018427387904)", "int64"}));
  r.push_back(row<ShapeError>("pad_product_overflow", [] { ts::pad(f32({2, 2}), {{k40, 0}, {k40, 0}}); }, "[pad] ",
                              {"int64"}));
  r.push_back(row<ShapeError>("reshape_infer_overflow", [] { ts::reshape(f32({4}), {k40, k40, -1}); }, "[reshape] ",
                              {"-1)", "int64"}));
  r.push_back(row<ShapeError>("reshape_overflow", [] { ts::reshape(empty({0}), {k40, k40, 0}); }, "[reshape] ",
                              {"int64"}));
  r.push_back(row<ShapeError>("broadcast_to_overflow", [] { ts::broadcast_to(f32({1, 1}), {k40, k40}); },
                              "[broadcast_to] ", {"int64"}));
  r.push_back(row<ShapeError>("concatenate_overflow", [] { ts::concatenate({empty({k62, 0}), empty({k62, 0})}, 0); },
                              "[concatenate] ", {"along axis 0", "int64"}));
  r.push_back(row<ShapeError>("stack_overflow", [] { ts::stack({empty({k61, 0}), empty({k61, 0}), empty({k61, 0}), empty({k61, 0})}, 0); },
                              "[stack] ", {"int64"}));
  r.push_back(row<ShapeError>("linspace_bytes_overflow", [] { ts::linspace(0, 1, k62, ts::f64, rep()); },
                              "[linspace] ", {"bytes", "int64"}));
  r.push_back(row<ShapeError>("eye_overflow", [] { ts::eye(k40, k40, 0, ts::f32, rep()); }, "[eye] ", {"int64"}));
  r.push_back(row<ShapeError>("matmul_output_overflow", [] { ts::matmul(empty({k40, 0}), empty({0, k40})); },
                              "[matmul] ", {"(1099511627776, 1099511627776)"}));
  r.push_back(row<ShapeError>("dot_general_output_overflow",
                              [] { ts::dot_general(empty({k40, 0}), empty({0, k40}), {{1}, {0}}); }, "[dot_general] ",
                              {"int64"}));
  r.push_back(row<ShapeError>("diff_prepend_overflow",
                              [] { ts::diff(empty({k62, 0}), 1, 0, {.prepend = empty({k62, 0})}); }, "[diff] ",
                              {"prepend", "int64"}));
  r.push_back(row<ShapeError>("segment_sum_overflow", [] { ts::segment_sum(f32({2, 4}), i32({0, 1}), k62); },
                              "[segment_sum] ", {"(4611686018427387904, 4)", "int64"}));
  r.push_back(row<ShapeError>("take_overflow", [] { ts::take(empty({3, k61, 0}), i32({0, 1, 2, 0, 1, 2, 0, 1}), 0); },
                              "[take] ", {"int64"}));
  r.push_back(row<ShapeError>("device_put_overflow",
                              [] { ts::device_put(std::vector<float>(4), {k62, 4}, rep()); }, "[device_put] ",
                              {"int64"}));
  r.push_back(row<ShapeError>("make_array_from_callback_overflow",
                              [] {
                                ts::make_array_from_callback({k62, 8}, ts::f32, rows8(),
                                                             [](const std::vector<ts::Slice>&) {
                                                               return std::vector<float>{};
                                                             });
                              },
                              "[make_array_from_callback] ", {"int64"}));
  r.push_back(row<ShapeError>("uniform_overflow",
                              [] { ts::random::uniform(ts::random::key(0), {k62, 4}, ts::f32, rep()); }, "[uniform] ",
                              {"int64"}));
  r.push_back(row<ShapeError>("normal_overflow",
                              [] { ts::random::normal(ts::random::key(0), {k40, k40}, ts::f64, rep()); }, "[normal] ",
                              {"int64"}));
  r.push_back(row<ShapeError>("broadcast_overflow_in_add", [] { ts::add(empty({k40, 1, 0}), empty({1, k40, 0})); },
                              "[add] ", {"int64"}));

  // --------------------------------------------------- allocation failure
  // (The device is named as its kind says: "CPU 0", "CUDA device 0 (GPU 0)".)
  r.push_back(row<DeviceError>("zeros_8_tib", [] { ts::zeros({k40}, ts::f64, rep()); }, "[allocate] ",
                               {"8796093022208 bytes", " 0", "memory"}));
  r.push_back(row<DeviceError>("ones_1_tib_per_device", [] { ts::ones({8 * k40}, ts::bool_, rows8()); }, "[allocate] ",
                               {"1099511627776 bytes", "more than the"}));

  // -------------------------------------- reductions of nothing (as JAX)
  r.push_back(row<ShapeError>("max_over_empty_axis", [] { ts::max(f32({0, 3}, rows8()), {0}); }, "[max] ",
                              {"axis 0", "size 0"}));
  r.push_back(row<ShapeError>("min_of_empty", [] { ts::min(f32({2, 0})); }, "[min] ", {"size 0"}));
  r.push_back(row<ShapeError>("argmax_over_empty_axis", [] { ts::argmax(f32({3, 0}), 1); }, "[argmax] ", {"size 0"}));
  r.push_back(row<ShapeError>("argmin_over_empty_axis", [] { ts::argmin(f32({0}), 0); }, "[argmin] ", {"size 0"}));

  // -------------------------------------------------------- device counts
  r.push_back(row<DeviceError>("devices_100000", [] { ts::config::set_num_cpu_devices(100000); },
                               "[set_num_cpu_devices] ", {"<= 4096", "100000"}));
  r.push_back(row<DeviceError>("devices_int_max", [] { ts::config::set_num_cpu_devices(INT_MAX); },
                               "[set_num_cpu_devices] ", {"2147483647"}));
  r.push_back(row<DeviceError>("devices_zero", [] { ts::config::set_num_cpu_devices(0); }, "[set_num_cpu_devices] ",
                               {">= 1", "got 0"}));
  r.push_back(row<DeviceError>("devices_negative", [] { ts::config::set_num_cpu_devices(-5); },
                               "[set_num_cpu_devices] ", {"-5"}));
  r.push_back(row<DeviceError>("devices_changed_after_start", [] {
                                 (void)ts::devices();  // started (each row may run in its own process)
                                 ts::config::set_num_cpu_devices(3);
                               },
                               "[set_num_cpu_devices] ", {"already started", "8"}));

  // --------------------------------------------------- meshes and specs
  r.push_back(row<ShardingError>("make_mesh_too_many_devices", [] { ts::make_mesh({3, 3}, {"x", "y"}); },
                                 "[make_mesh] ", {"9"}));
  r.push_back(row<ShardingError>("mesh_axis_name_twice", [] { ts::make_mesh({2, 4}, {"x", "x"}); }, "[Mesh] ",
                                 {"'x'", "twice"}));
  r.push_back(row<ShardingError>("mesh_names_count", [] { ts::make_mesh({2, 4}, {"x"}); }, "[Mesh] ",
                                 {"one name per axis"}));
  r.push_back(row<ShardingError>("mesh_axis_size_zero",
                                 [] { ts::Mesh(std::vector<ts::Device>{}, {0}, {"x"}); }, "[Mesh] ", {">= 1"}));
  r.push_back(row<ShardingError>("mesh_device_twice",
                                 [] { ts::Mesh(ts::testing::ids({0, 0}), {2}, {"x"}); }, "[Mesh] ", {"twice"}));
  r.push_back(row<ShardingError>("mesh_unknown_device", [] { ts::Mesh(ts::testing::ids({0, 99}), {2}, {"x"}); },
                                 "[Mesh] ", {"99"}));
  r.push_back(row<ShardingError>("spec_axis_not_in_mesh", [] { ts::NamedSharding(mesh8(), ts::P("z")); },
                                 "[NamedSharding] ", {"'z'", "not in the mesh"}));
  r.push_back(row<ShardingError>("spec_axis_twice", [] { ts::NamedSharding(mesh24(), ts::P("x", "x")); },
                                 "[NamedSharding] ", {"'x'", "more than once"}));
  r.push_back(row<ShardingError>("device_put_spec_longer_than_rank",
                                 [] { ts::device_put(std::vector<float>(8), {8}, ts::NamedSharding(mesh24(), ts::P("x", "y"))); },
                                 "[device_put] ", {"2 entries", "rank 1"}));
  r.push_back(row<ShapeError>("device_put_host_size", [] { ts::device_put(std::vector<float>(7), {2, 4}, rep()); },
                              "[device_put] ", {"7 elements", "(2, 4)", "8"}));
  r.push_back(row<ShapeError>("device_put_negative_dim", [] { ts::device_put(std::vector<float>{}, {-1, 0}, rep()); },
                              "[device_put] ", {">= 0", "(-1, 0)"}));
  r.push_back(row<ShardingError>("reshard_unknown_axis", [] { ts::reshard(f32({8}), ts::P("q")); }, "[reshard] ",
                                 {"'q'"}));
  r.push_back(row<ShardingError>("add_different_meshes", [] { ts::add(f32({8}), ts::zeros({8}, ts::f32, ts::NamedSharding(mesh24(), ts::P()))); },
                                 "[add] ", {"different meshes"}));
  r.push_back(row<ShardingError>("explicit_add_incompatible",
                                 [] {
                                   const auto m = emesh();
                                   auto a = ts::zeros({8, 8}, ts::f32, ts::NamedSharding(m, ts::P("X")));
                                   auto b = ts::zeros({8, 8}, ts::f32, ts::NamedSharding(m, ts::P(ts::none, "X")));
                                   ts::add(a, b);
                                 },
                                 "[add] ", {"incompatible shardings"}));
  // Both free dims on X: the output layout is ambiguous. (Contracting dims
  // sharded alike are accepted, as in JAX: the result is all-reduced.)
  r.push_back(row<ShardingError>("explicit_matmul_free_dims_conflict",
                                 [] {
                                   const auto m = emesh();
                                   auto a = ts::zeros({8, 4}, ts::f32, ts::NamedSharding(m, ts::P("X")));
                                   auto b = ts::zeros({4, 8}, ts::f32, ts::NamedSharding(m, ts::P(ts::none, "X")));
                                   ts::matmul(a, b);
                                 },
                                 "[matmul] ", {"two dims", "out_sharding"}));
  r.push_back(row<ShardingError>("sum_out_sharding_bad_axis",
                                 [] { ts::sum(f32({8, 4}), {0}, {.out_sharding = ts::P("nope")}); }, "[sum] ",
                                 {"'nope'"}));
  r.push_back(row<ShardingError>("zeros_unreduced_spec",
                                 [] {
                                   ts::zeros({4}, ts::f32, ts::NamedSharding(mesh8(), ts::PartitionSpec({}, {"x"})));
                                 },
                                 "[zeros] ", {"unreduced"}));

  // --------------------------------------------------------- elementwise
  r.push_back(row<ShapeError>("add_cannot_broadcast", [] { ts::add(f32({3}), f32({4})); }, "[add] ",
                              {"(3,)", "(4,)", "cannot be broadcast"}));
  r.push_back(row<ShapeError>("where_cannot_broadcast", [] { ts::where(f32({3}) > 0.0f, f32({2}), f32({3})); },
                              "[where] ", {"cannot be broadcast"}));
  r.push_back(row<Error>("op_on_empty_array", [] { ts::sin(ts::Array()); }, "[sin] ", {"empty"}));
  r.push_back(row<Error>("shape_of_empty_array", [] { (void)ts::Array().shape(); }, "[shape] ", {"empty"}));
  r.push_back(row<ShapeError>("item_of_many", [] { f32({3}).item<float>(); }, "[item] ", {"(3,)"}));

  // ---------------------------------------------------------- reductions
  r.push_back(row<ShapeError>("sum_axis_out_of_range", [] { ts::sum(f32({2, 3}), {2}); }, "[sum] ",
                              {"axis 2", "rank 2"}));
  r.push_back(row<ShapeError>("sum_axis_twice", [] { ts::sum(f32({2, 3}), {1, -1}); }, "[sum] ", {"more than once"}));
  r.push_back(row<ShapeError>("mean_axis_negative_out_of_range", [] { ts::mean(f32({2, 3}), {-3}); }, "[mean] ",
                              {"axis -3"}));
  r.push_back(row<ShapeError>("argmax_axis_out_of_range", [] { ts::argmax(f32({2, 3}), 5); }, "[argmax] ",
                              {"axis 5"}));

  // ------------------------------------------------------ linear algebra
  r.push_back(row<ShapeError>("matmul_contracting_differs", [] { ts::matmul(f32({8, 16}), f32({12, 4})); },
                              "[matmul] ", {"contracting dims differ", "(8, 16)", "(12, 4)"}));
  r.push_back(row<ShapeError>("matmul_scalar", [] { ts::matmul(f32({}), f32({3})); }, "[matmul] ", {"rank >= 1"}));
  r.push_back(row<ShapeError>("matmul_batch_no_broadcast", [] { ts::matmul(f32({2, 3, 4}), f32({3, 4, 5})); },
                              "[matmul] ", {"batch dims cannot broadcast"}));
  r.push_back(row<ShapeError>("dot_contracting_differs", [] { ts::dot(f32({3}), f32({4})); }, "[dot] ",
                              {"contracting"}));
  r.push_back(row<ShapeError>("dot_general_count_mismatch", [] { ts::dot_general(f32({2, 3}), f32({3, 2}), {{1}, {}}); },
                              "[dot_general] ", {"1 contracting dims", "0"}));
  r.push_back(row<ShapeError>("dot_general_axis_out_of_range",
                              [] { ts::dot_general(f32({2, 3}), f32({3, 2}), {{2}, {0}}); }, "[dot_general] ",
                              {"axis 2"}));
  r.push_back(row<ShapeError>("dot_general_dim_twice",
                              [] { ts::dot_general(f32({3, 3}), f32({3, 3}), {{0, 0}, {0, 1}}); }, "[dot_general] ",
                              {"given twice"}));
  r.push_back(row<ShapeError>("einsum_three_operands", [] { ts::einsum("ij,jk,kl->il", f32({2, 2}), f32({2, 2})); },
                              "[einsum] ", {"exactly two operands"}));
  r.push_back(row<ShapeError>("einsum_ellipsis", [] { ts::einsum("...ij,jk->ik", f32({2, 2}), f32({2, 2})); },
                              "[einsum] ", {"ellipsis"}));
  r.push_back(row<ShapeError>("einsum_label_sizes", [] { ts::einsum("ij,jk->ik", f32({2, 3}), f32({4, 2})); },
                              "[einsum] ", {"label 'j'"}));
  r.push_back(row<ShapeError>("einsum_rank_mismatch", [] { ts::einsum("ijk,jk->i", f32({2, 3}), f32({3, 2})); },
                              "[einsum] ", {"(2, 3)"}));

  // ----------------------------------------------------------- shape ops
  r.push_back(row<ShapeError>("reshape_size_mismatch", [] { ts::reshape(f32({2, 3}), {4, 2}); }, "[reshape] ",
                              {"(2, 3)", "(4, 2)"}));
  r.push_back(row<ShapeError>("reshape_two_inferred", [] { ts::reshape(f32({2, 3}), {-1, -1}); }, "[reshape] ",
                              {"only one dim may be -1"}));
  r.push_back(row<ShapeError>("reshape_negative", [] { ts::reshape(f32({2, 3}), {-2, 3}); }, "[reshape] ", {">= 0"}));
  r.push_back(row<ShapeError>("reshape_cannot_infer", [] { ts::reshape(f32({2, 3}), {4, -1}); }, "[reshape] ",
                              {"cannot infer"}));
  r.push_back(row<ShapeError>("transpose_bad_perm", [] { ts::transpose(f32({2, 3}), {0, 0}); }, "[transpose] "));
  r.push_back(row<ShapeError>("swapaxes_out_of_range", [] { ts::swapaxes(f32({2, 3}), 0, 2); }, "[swapaxes] ",
                              {"axis 2"}));
  r.push_back(row<ShapeError>("broadcast_to_incompatible", [] { ts::broadcast_to(f32({3}), {4}); }, "[broadcast_to] ",
                              {"(3,)", "(4,)"}));
  r.push_back(row<ShapeError>("broadcast_to_fewer_dims", [] { ts::broadcast_to(f32({2, 3}), {3}); },
                              "[broadcast_to] ", {"fewer dims"}));
  r.push_back(row<ShapeError>("expand_dims_out_of_range", [] { ts::expand_dims(f32({2}), 3); }, "[expand_dims] ",
                              {"axis 3"}));
  r.push_back(row<ShapeError>("squeeze_not_one", [] { ts::squeeze(f32({2, 1}), {0}); }, "[squeeze] ", {"size 2"}));
  r.push_back(row<ShapeError>("slice_step_zero", [] { ts::slice(f32({4}), {{0, 4, 0}}); }, "[slice] ",
                              {"step cannot be zero"}));
  r.push_back(row<ShapeError>("slice_too_many", [] { ts::slice(f32({4}), {{}, {}}); }, "[slice] ", {"rank 1"}));
  r.push_back(row<ShapeError>("concatenate_none", [] { ts::concatenate({}, 0); }, "[concatenate] ", {"none"}));
  r.push_back(row<ShapeError>("concatenate_rank_mismatch", [] { ts::concatenate({f32({2}), f32({2, 2})}, 0); },
                              "[concatenate] ", {"same rank"}));
  r.push_back(row<ShapeError>("concatenate_shape_mismatch", [] { ts::concatenate({f32({2, 3}), f32({2, 4})}, 0); },
                              "[concatenate] ", {"except along axis 0"}));
  r.push_back(row<ShapeError>("concatenate_scalars", [] { ts::concatenate({f32({}), f32({})}, 0); },
                              "[concatenate] ", {"zero-dimensional"}));
  r.push_back(row<ShapeError>("stack_shape_mismatch", [] { ts::stack({f32({2}), f32({3})}, 0); }, "[stack] ",
                              {"same shape"}));
  r.push_back(row<ShapeError>("pad_negative", [] { ts::pad(f32({4}), {{-1, 0}}); }, "[pad] ", {">= 0", "(-1, 0)"}));
  r.push_back(row<ShapeError>("pad_pairs_count", [] { ts::pad(f32({2, 2}), {{1, 1}, {1, 1}, {1, 1}}); }, "[pad] ",
                              {"expected 2"}));
  r.push_back(row<ShapeError>("roll_axis", [] { ts::roll(f32({4}), 1, 1); }, "[roll] ", {"axis 1"}));
  r.push_back(row<ShapeError>("flip_axis", [] { ts::flip(f32({4}), -2); }, "[flip] ", {"axis -2"}));

  // ------------------------------------------------- stencils and scans
  r.push_back(row<ShapeError>("diff_n_negative", [] { ts::diff(f32({4}), -1); }, "[diff] ", {">= 0"}));
  r.push_back(row<ShapeError>("diff_scalar", [] { ts::diff(f32({})); }, "[diff] ", {"1-d"}));
  r.push_back(row<ShapeError>("diff_prepend_shape", [] { ts::diff(f32({4, 3}), 1, 0, {.prepend = f32({1, 2})}); },
                              "[diff] ", {"prepend", "(1, 2)"}));
  r.push_back(row<ShapeError>("cumsum_axis", [] { ts::cumsum(f32({4}), 1); }, "[cumsum] ", {"axis 1"}));
  r.push_back(row<ShapeError>("convolve_kernel_rank", [] { ts::convolve(f32({4}), f32({2, 2})); }, "[convolve] ",
                              {"kernel must be 1-d"}));
  r.push_back(row<ShapeError>("convolve_kernel_empty", [] { ts::convolve(f32({4}), f32({0})); }, "[convolve] ",
                              {"empty"}));
  r.push_back(row<ShapeError>("convolve2d_x_rank", [] { ts::convolve2d(f32({4}), f32({2, 2})); }, "[convolve2d] ",
                              {"2-d"}));
  r.push_back(row<ShapeError>("interp_xp_fp_sizes", [] { ts::interp(f32({4}), f32({3}), f32({2})); }, "[interp] ",
                              {"equal size"}));

  // ------------------------------------------------------------ indexing
  r.push_back(row<DTypeError>("take_float_indices", [] { ts::take(f32({4}), f32({2})); }, "[take] "));
  r.push_back(row<ShapeError>("take_axis", [] { ts::take(f32({4}), i32({0}), 1); }, "[take] ", {"axis 1"}));
  r.push_back(row<ShapeError>("segment_sum_negative", [] { ts::segment_sum(f32({2}), i32({0, 1}), -1); },
                              "[segment_sum] ", {">= 0", "-1"}));
  r.push_back(row<ShapeError>("segment_sum_ids_length", [] { ts::segment_sum(f32({3}), i32({0, 1}), 2); },
                              "[segment_sum] ", {"one entry per row"}));
  r.push_back(row<ShapeError>("segment_sum_scalar_data", [] { ts::segment_sum(f32({}), i32({0}), 2); },
                              "[segment_sum] ", {"rank >= 1"}));

  // --------------------------------------------------- creation, dtypes
  r.push_back(row<DTypeError>("arange_bool", [] { ts::arange(0, 4, 1, ts::bool_, rep()); }, "[arange] ", {"bool"}));
  r.push_back(row<ShapeError>("arange_step_zero", [] { ts::arange(0, 4, 0, ts::f32, rep()); }, "[arange] ",
                              {"step must be nonzero"}));
  r.push_back(row<ShapeError>("arange_too_long", [] { ts::arange(0, 1e300, 1, ts::f64, rep()); }, "[arange] ",
                              {"too many elements"}));
  r.push_back(row<DTypeError>("full_does_not_fit", [] { ts::full({2}, 1e12, ts::i32, rep()); }, "[full] ",
                              {"does not fit dtype i32"}));
  r.push_back(row<ShapeError>("zeros_negative", [] { ts::zeros({2, -3}, ts::f32, rep()); }, "[zeros] ",
                              {">= 0", "(2, -3)"}));
  r.push_back(row<ShapeError>("linspace_negative", [] { ts::linspace(0, 1, -2, ts::f32, rep()); }, "[linspace] ",
                              {"num=-2"}));
  r.push_back(row<ShapeError>("eye_negative", [] { ts::eye(-1, 3, 0, ts::f32, rep()); }, "[eye] ", {"n=-1"}));
  r.push_back(row<DTypeError>("uniform_int", [] { ts::random::uniform(ts::random::key(0), {4}, ts::i32, rep()); },
                              "[uniform] ", {"float dtype", "i32"}));
  r.push_back(row<ShardingError>("zeros_spec_too_long",
                                 [] { ts::zeros({4}, ts::f32, ts::NamedSharding(mesh24(), ts::P("x", "y"))); },
                                 "[zeros] ", {"rank 1"}));

  // ----------------------------------------------------------- shard_map
  r.push_back(row<ShardingError>("shard_map_claims_replicated",
                                 [] {
                                   auto f = ts::shard_map([](ts::Array x) { return x; }, mesh8(), {ts::P("x")}, ts::P());
                                   f(f32({8}, rows8()));
                                 },
                                 "[shard_map] ", {"'x'", "varies"}));
  r.push_back(row<ShapeError>("shard_map_body_error_reaches_caller",
                              [] {
                                auto f = ts::shard_map([](ts::Array x) { return ts::reshape(x, {3}); }, mesh8(),
                                                       {ts::P("x")}, ts::P("x"));
                                f(f32({16}, rows8()));
                              },
                              "[reshape] ", {"(2,)", "(3,)"}));

  // ------------------------------------------------- host values and keys
  r.push_back(row<DTypeError>("to_vector_3e9_to_i32",
                              [] { (void)ts::device_put(std::vector<float>{3e9f}, {1}, rep()).to_vector<std::int32_t>(); },
                              "[to_vector] ", {"3e+09", "i32"}));
  r.push_back(row<DTypeError>("item_nan_to_i64",
                              [] { (void)ts::device_put(std::vector<double>{NAN}, {}, rep()).item<std::int64_t>(); },
                              "[item] ", {"nan", "i64"}));
  r.push_back(row<DTypeError>("to_vector_negative_to_u32",
                              [] { (void)ts::device_put(std::vector<std::int32_t>{-1}, {1}, rep()).to_vector<std::uint32_t>(); },
                              "[to_vector] ", {"-1", "u32"}));
  r.push_back(row<DTypeError>("split_float_keys", [] { ts::random::split(f32({2})); }, "[split] ", {"u32", "f32[2]"}));
  r.push_back(row<ShapeError>("fold_in_keys_last_dim_3",
                              [] { ts::random::fold_in(ts::zeros({4, 3}, ts::u32, rep()), 1u); }, "[fold_in] ",
                              {"size 2", "(4, 3)"}));
  r.push_back(row<ShapeError>("wrap_key_data_of_many_keys",
                              [] { ts::random::wrap_key_data(ts::zeros({3, 2}, ts::u32, rep())); }, "[wrap_key_data] ",
                              {"one key", "(3, 2)"}));
  r.push_back(row<ShapeError>("normal_from_many_keys",
                              [] { ts::random::normal(ts::zeros({5, 2}, ts::u32, rows8()), {4}); }, "[normal] ",
                              {"one key", "(5, 2)"}));
  r.push_back(row<DTypeError>("fold_in_float_data",
                              [] { ts::random::fold_in(ts::zeros({2}, ts::u32, rep()), f32({})); }, "[fold_in] ",
                              {"integer", "f32"}));
  return r;
}

const std::vector<Row>& rows() {
  static const std::vector<Row> r = make_rows();
  return r;
}

class BadInput : public ::testing::TestWithParam<int> {};

TEST_P(BadInput, RaisesTypedErrorAndRuntimeStaysUsable) {
  const Row& r = rows()[GetParam()];
  SCOPED_TRACE(r.name + " (expects " + r.type + " starting with '" + r.prefix + "')");
  r.check(r);
  // A small sharded computation with communication still works.
  auto x = ts::device_put(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {10}, rows8());
  EXPECT_EQ(ts::sum(x * 2.0f).item<float>(), 110.0f);
  EXPECT_EQ(ts::device_count(), 8);
}

INSTANTIATE_TEST_SUITE_P(Table, BadInput, ::testing::Range(0, static_cast<int>(rows().size())),
                         [](const ::testing::TestParamInfo<int>& info) { return rows()[info.param].name; });

TEST(BadInputTable, HasEightyRowsWithUniqueNames) {
  EXPECT_GE(rows().size(), 80u);
  std::set<std::string> names;
  for (const auto& r : rows()) EXPECT_TRUE(names.insert(r.name).second) << "duplicate row " << r.name;
}

}  // namespace
