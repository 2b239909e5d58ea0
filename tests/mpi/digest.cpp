// One program on four global devices, however they are split over processes
// (1x4, 2x2, 4x1 under mpirun, or no mpirun): prints a 64-bit hash of every
// result's bytes, so that compare_launches.cmake can require the launches to
// agree bit for bit. Reductions follow one fixed tree over the mesh, so even
// sums of rounding data (random normals) must not depend on which process
// holds which device.
//
//   digest OUT_FILE     (writes "name<TAB>type<TAB>hash" lines, process 0)
//
// Every result is also checked on every process against the same op on a
// one-device mesh of this process's first device (bitwise where the
// arithmetic does not depend on the device split, within a tolerance for
// reductions), and must be finite and not all zero, so that a program
// computing nothing (or garbage, consistently) cannot pass. Exit code 1 when
// a check failed on any process.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tessera/tessera.hpp>
#include <tuple>
#include <vector>

#include "common/processes.hpp"

namespace ts = tessera;

namespace {

// FNV-1a, 64-bit.
std::uint64_t fnv1a(const void* data, std::size_t n, std::uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

// The global value's bytes in its own dtype, and as doubles for the checks.
struct Host {
  std::vector<unsigned char> bytes;
  std::vector<double> values;
};

template <class T>
Host host_of(const std::vector<T>& v) {
  Host h;
  h.bytes.resize(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(h.bytes.data(), v.data(), h.bytes.size());
  h.values.assign(v.begin(), v.end());
  return h;
}

// `gather`: the whole value on every process (a collective); otherwise a
// local array's to_vector (the one-device reference).
Host read(const ts::Array& a, bool gather) {
  auto get = [&]<class T>(T) { return gather ? ts::process_allgather<T>(a) : a.to_vector<T>(); };
  switch (a.dtype()) {
    case ts::DType::f32:
      return host_of(get(float{}));
    case ts::DType::f64:
      return host_of(get(double{}));
    case ts::DType::i32:
      return host_of(get(std::int32_t{}));
    case ts::DType::i64:
      return host_of(get(std::int64_t{}));
    case ts::DType::u32:
      return host_of(get(std::uint32_t{}));
    case ts::DType::u8:
      return host_of(get(std::uint8_t{}));
    case ts::DType::bool_: {
      std::vector<std::uint8_t> bytes;
      for (bool b : gather ? ts::process_allgather<bool>(a) : a.to_vector<bool>()) bytes.push_back(b ? 1 : 0);
      return host_of(bytes);
    }
    default:
      throw std::runtime_error("digest: no reader for dtype " + ts::dtype_name(a.dtype()));
  }
}

bool is_float(ts::DType t) { return t == ts::DType::f32 || t == ts::DType::f64; }

// How a result must match its one-device reference.
enum class Match {
  bits,   // the same bits: elementwise, data movement, selections
  close,  // within rounding: reductions, whose tree differs on one device
};

class Digest {
 public:
  // Records `got` (on the 4-device mesh) and checks it against `ref` (on the
  // one-device mesh).
  void add(const std::string& name, const ts::Array& got, const ts::Array& ref, Match match) {
    const Host g = record(name, got);
    const Host r = read(ref, false);
    check(name, got, ref, g, r, match);
  }

  // Records a result that has no one-device counterpart, checked against
  // host values `want` (rounding differences within `tol` of the largest).
  void add_host(const std::string& name, const ts::Array& got, const std::vector<double>& want, double tol) {
    const Host g = record(name, got);
    if (g.values.size() != want.size())
      return fail(name, "has " + std::to_string(g.values.size()) + " elements, want " + std::to_string(want.size()));
    double scale = 0;
    for (double w : want) scale = std::max(scale, std::abs(w));
    for (std::size_t i = 0; i < want.size(); ++i)
      if (!(std::abs(g.values[i] - want[i]) <= tol * (1.0 + scale)))
        return fail(name, "element " + std::to_string(i) + " is " + num(g.values[i]) + ", want " + num(want[i]));
    sane(name, got.dtype(), g);
  }

  const std::vector<std::string>& lines() const { return lines_; }
  int failures() const { return failures_; }

 private:
  // Gathers `got` (a collective) and appends its digest line.
  Host record(const std::string& name, const ts::Array& got) {
    Host g = read(got, true);
    char hash[20];
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a(g.bytes.data(), g.bytes.size())));
    std::ostringstream line;
    line << name << '\t' << ts::dtype_name(got.dtype()) << ts::shape_str(got.shape()) << '\t' << hash;
    lines_.push_back(line.str());
    return g;
  }
  static std::string num(double v) {
    char b[40];
    std::snprintf(b, sizeof b, "%.17g", v);
    return b;
  }
  void fail(const std::string& name, const std::string& why) {
    ++failures_;
    std::cerr << "process " << ts::process_index() << ": " << name << ": " << why << std::endl;
  }
  // Results must be finite and not all zero: a digest of zeros
  // would agree between launches that compute nothing.
  void sane(const std::string& name, ts::DType t, const Host& g) {
    bool nonzero = false;
    for (std::size_t i = 0; i < g.values.size(); ++i) {
      if (is_float(t) && !std::isfinite(g.values[i]))
        return fail(name, "element " + std::to_string(i) + " is not finite");
      nonzero = nonzero || g.values[i] != 0;
    }
    if (!nonzero) fail(name, "is all zero");
  }
  void check(const std::string& name, const ts::Array& got, const ts::Array& ref, const Host& g, const Host& r,
             Match match) {
    if (got.shape() != ref.shape() || got.dtype() != ref.dtype())
      return fail(name, "is " + ts::dtype_name(got.dtype()) + ts::shape_str(got.shape()) + ", one device gives " +
                            ts::dtype_name(ref.dtype()) + ts::shape_str(ref.shape()));
    if (match == Match::bits) {
      if (g.bytes != r.bytes)
        for (std::size_t i = 0; i < g.values.size(); ++i)
          if (std::memcmp(&g.bytes[i * g.bytes.size() / g.values.size()],
                          &r.bytes[i * r.bytes.size() / r.values.size()], g.bytes.size() / g.values.size()) != 0)
            return fail(name, "element " + std::to_string(i) + " is " + num(g.values[i]) + ", one device gives " +
                                  num(r.values[i]) + " (want the same bits)");
    } else {
      double scale = 0;
      for (double w : r.values) scale = std::max(scale, std::abs(w));
      const double tol = got.dtype() == ts::DType::f64 ? 1e-11 : 2e-5;
      for (std::size_t i = 0; i < r.values.size(); ++i)
        if (!(std::abs(g.values[i] - r.values[i]) <= tol * (1.0 + scale)))
          return fail(name, "element " + std::to_string(i) + " is " + num(g.values[i]) + ", one device gives " +
                                num(r.values[i]));
    }
    sane(name, got.dtype(), g);
  }

  std::vector<std::string> lines_;
  int failures_ = 0;
};

// The global-view ops on one mesh, layout and dtype, against one device.
void global_view(Digest& d, const std::string& tag, const ts::Mesh& mesh, const std::vector<ts::PartitionSpec>& specs,
                 int spec_index, ts::DType dt, const ts::Mesh& one) {
  const ts::PartitionSpec& spec = specs[spec_index];
  const ts::NamedSharding s(mesh, spec), s1(one, ts::P());
  const std::string n = tag + "/" + ts::dtype_name(dt) + "/";
  // Uneven blocks on every layout: 37 and 23 are prime.
  const ts::Shape shape{37, 23};
  const ts::Key ka = ts::random::key(11), kb = ts::random::key(12), kw = ts::random::key(13);
  // Random normals depend only on key and index: the same on every layout.
  const ts::Array a = ts::random::normal(ka, shape, dt, s), a1 = ts::random::normal(ka, shape, dt, s1);
  const ts::Array b = ts::random::normal(kb, shape, dt, s), b1 = ts::random::normal(kb, shape, dt, s1);
  const ts::Array w = ts::random::normal(kw, {23, 11}, dt, ts::NamedSharding(mesh, ts::P())),
                  w1 = ts::random::normal(kw, {23, 11}, dt, s1);
  d.add(n + "normal", a, a1, Match::bits);
  d.add(n + "uniform", ts::random::uniform(kb, {29, 5}, dt, s, -2.0, 3.0),
        ts::random::uniform(kb, {29, 5}, dt, s1, -2.0, 3.0), Match::bits);

  auto ew = [](const ts::Array& x, const ts::Array& y) {
    return ts::tanh(x) * y + 0.5 * ts::exp(-(x * x)) - ts::sqrt(ts::abs(y));
  };
  d.add(n + "elementwise", ew(a, b), ew(a1, b1), Match::bits);
  d.add(n + "where", ts::where(a > b, ts::sin(a), ts::cos(b)), ts::where(a1 > b1, ts::sin(a1), ts::cos(b1)),
        Match::bits);

  // Reductions over sharded axes: rounding, so the tree order shows.
  d.add(n + "sum0", ts::sum(a, {0}), ts::sum(a1, {0}), Match::close);
  d.add(n + "sum1", ts::sum(a, {1}), ts::sum(a1, {1}), Match::close);
  d.add(n + "sum", ts::sum(a * b), ts::sum(a1 * b1), Match::close);
  d.add(n + "mean0", ts::mean(a, {0}), ts::mean(a1, {0}), Match::close);
  d.add(n + "mean", ts::mean(ts::exp(a)), ts::mean(ts::exp(a1)), Match::close);
  d.add(n + "sum0_keepdims_scattered",
        ts::sum(b, {0}, {.keepdims = true, .out_sharding = ts::P(ts::none, mesh.axis_names().back())}),
        ts::sum(b1, {0}, {.keepdims = true}), Match::close);
  d.add(n + "max1", ts::max(a, {1}), ts::max(a1, {1}), Match::bits);
  d.add(n + "argmax0", ts::argmax(a, 0), ts::argmax(a1, 0), Match::bits);
  d.add(n + "argmin1", ts::argmin(b, 1), ts::argmin(b1, 1), Match::bits);
  d.add(n + "median0", ts::median(a, {0}), ts::median(a1, {0}), Match::bits);

  // Contractions over a sharded dim.
  d.add(n + "matmul", ts::matmul(a, w), ts::matmul(a1, w1), Match::close);
  d.add(n + "einsum_ij_ik", ts::einsum("ij,ik->jk", a, b), ts::einsum("ij,ik->jk", a1, b1), Match::close);

  // Scans and stencils along sharded dims (halos, shard totals).
  d.add(n + "cumsum0", ts::cumsum(a, 0), ts::cumsum(a1, 0), Match::close);
  d.add(n + "cumsum1", ts::cumsum(b, 1), ts::cumsum(b1, 1), Match::close);
  d.add(n + "diff0_n2", ts::diff(a, 2, 0), ts::diff(a1, 2, 0), Match::bits);
  d.add(n + "diff1", ts::diff(b, 1, 1), ts::diff(b1, 1, 1), Match::bits);
  const std::vector<double> k5{0.1, -0.3, 0.55, 0.2, -0.15}, k33{0.05, 0.2, 0.05, 0.2, -1.0, 0.2, 0.05, 0.2, 0.05};
  const ts::NamedSharding ks(mesh, ts::P());
  auto kern = [&](const std::vector<double>& v, const ts::Shape& sh, const ts::NamedSharding& where) {
    return ts::astype(ts::device_put(v, sh, where), dt);
  };
  // Each output element sums its own neighbourhood in one order, whatever
  // the blocks: only the halos move.
  d.add(n + "convolve0", ts::convolve(a, kern(k5, {5}, ks), 0), ts::convolve(a1, kern(k5, {5}, s1), 0), Match::bits);
  d.add(n + "convolve2d", ts::convolve2d(b, kern(k33, {3, 3}, ks)), ts::convolve2d(b1, kern(k33, {3, 3}, s1)),
        Match::bits);

  // Data movement: exact.
  d.add(n + "roll0", ts::roll(a, 5, 0), ts::roll(a1, 5, 0), Match::bits);
  d.add(n + "slice_step", ts::slice(a, {{3, 34, 3}, {1, std::nullopt, 2}}),
        ts::slice(a1, {{3, 34, 3}, {1, std::nullopt, 2}}), Match::bits);
  d.add(n + "transpose", ts::transpose(b), ts::transpose(b1), Match::bits);
  d.add(n + "reshape", ts::reshape(b, {23, 37}), ts::reshape(b1, {23, 37}), Match::bits);
  for (int t = 0; t < static_cast<int>(specs.size()); ++t)
    if (t != spec_index)
      d.add(n + "reshard_to_" + std::to_string(t), ts::reshard(ts::exp(a), specs[t]), ts::exp(a1), Match::bits);

  // Indexing and segments.
  std::vector<std::int32_t> idx, seg;
  for (int i = 0; i < 37; ++i) {
    idx.push_back((i * 17 + 3) % 37);
    seg.push_back((i * 7) % 5);
  }
  const ts::NamedSharding is(mesh, ts::P(mesh.axis_names()[0]));
  const ts::Array ix = ts::device_put(idx, {37}, is), ix1 = ts::device_put(idx, {37}, s1);
  const ts::Array sg = ts::device_put(seg, {37}, is), sg1 = ts::device_put(seg, {37}, s1);
  d.add(n + "take0", ts::take(a, ix, 0), ts::take(a1, ix1, 0), Match::bits);
  d.add(n + "segment_sum", ts::segment_sum(b, sg, 5), ts::segment_sum(b1, sg1, 5), Match::close);
  // The indices are a permutation: one addition per row, exact.
  d.add(n + "scatter_add", ts::scatter_add(a, ix, b), ts::scatter_add(a1, ix1, b1), Match::bits);
}

// shard_map bodies with every collective, on the 1-d mesh of 4 devices.
void shard_map_1d(Digest& d, const ts::Mesh& mesh, const ts::Mesh& one) {
  const ts::NamedSharding rows(mesh, ts::P("x")), cols(mesh, ts::P(ts::none, "x")), s1(one, ts::P());
  const ts::Key key = ts::random::key(21);
  const ts::Array a = ts::random::normal(key, {16, 12}, ts::f32, rows);
  const ts::Array ac = ts::reshard(a, ts::P(ts::none, "x"));
  const ts::Array a1 = ts::random::normal(key, {16, 12}, ts::f32, s1);
  const std::vector<float> h = a1.to_vector<float>();
  const std::string n = "shard_map/x4/";

  auto psum = ts::shard_map([](ts::Array x) { return ts::psum(ts::sum(x, {0}), "x"); }, mesh, {ts::P("x")}, ts::P());
  d.add(n + "psum", psum(a), ts::sum(a1, {0}), Match::close);
  auto pmean =
      ts::shard_map([](ts::Array x) { return ts::pmean(ts::sum(ts::exp(x), {0}), "x"); }, mesh, {ts::P("x")}, ts::P());
  d.add(n + "pmean", pmean(a), ts::sum(ts::exp(a1), {0}) / 4.0f, Match::close);
  auto pmax = ts::shard_map([](ts::Array x) { return ts::pmax(ts::max(x, {0}), "x"); }, mesh, {ts::P("x")}, ts::P());
  d.add(n + "pmax", pmax(a), ts::max(a1, {0}), Match::bits);
  auto gather =
      ts::shard_map([](ts::Array x) { return ts::all_gather(ts::sin(x), "x", 0, true); }, mesh, {ts::P("x")}, ts::P());
  d.add(n + "all_gather", gather(a), ts::sin(a1), Match::bits);
  // Ring shift by one device: four rows of each block move down one block.
  std::vector<std::pair<int, int>> ring;
  for (int i = 0; i < 4; ++i) ring.emplace_back(i, (i + 1) % 4);
  auto perm = ts::shard_map([&](ts::Array x) { return ts::ppermute(x, "x", ring); }, mesh, {ts::P("x")}, ts::P("x"));
  d.add(n + "ppermute", perm(a), ts::roll(a1, 4, 0), Match::bits);
  // Rows to columns: each device sends its row block's column block j to
  // device j, the layout change of a reshard from P("x") to P(None, "x").
  auto a2a = ts::shard_map([](ts::Array x) { return ts::all_to_all(x, "x", 1, 0, true); }, mesh, {ts::P("x")},
                           ts::P(ts::none, "x"));
  d.add(n + "all_to_all", a2a(a), a1, Match::bits);
  // Column blocks summed, each device keeping a quarter of the rows.
  auto scatter = ts::shard_map([](ts::Array x) { return ts::psum_scatter(x * x, "x", 0, true); }, mesh,
                               {ts::P(ts::none, "x")}, ts::P("x"));
  std::vector<double> want(16 * 3, 0.0);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 3; ++j)
      for (int blk = 0; blk < 4; ++blk) {
        const double v = h[static_cast<std::size_t>(i * 12 + blk * 3 + j)];
        want[static_cast<std::size_t>(i * 3 + j)] += v * v;
      }
  d.add_host(n + "psum_scatter", scatter(ac), want, 2e-5);
  // Per-device random draws from keys folded with the axis index.
  auto draw = ts::shard_map(
      [](ts::Array k) {
        return ts::random::normal(ts::random::fold_in(ts::reshape(k, {2}), ts::axis_index("x")), {3}, ts::f64);
      },
      mesh, {ts::P("x")}, ts::P("x"));
  std::vector<ts::Key> keys = ts::random::split(key, 4);
  std::vector<ts::Array> ref;
  for (int i = 0; i < 4; ++i)
    ref.push_back(ts::random::normal(ts::random::fold_in(keys[i], static_cast<std::uint32_t>(i)), {3}, ts::f64, s1));
  d.add(n + "random_fold_in_axis_index", draw(ts::random::key_data(keys, rows)), ts::concatenate(ref, 0), Match::bits);
}

// shard_map on the 2x2 mesh: reductions over one axis and over both.
void shard_map_2d(Digest& d, const ts::Mesh& mesh, const ts::Mesh& one) {
  const ts::NamedSharding s(mesh, ts::P("x", "y")), s1(one, ts::P());
  const ts::Key key = ts::random::key(31);
  const ts::Array a = ts::random::normal(key, {18, 12}, ts::f64, s),
                  a1 = ts::random::normal(key, {18, 12}, ts::f64, s1);
  const std::string n = "shard_map/2x2/";
  auto both = ts::shard_map(
      [](ts::Array x) {
        return ts::psum(ts::sum(x * x), {"x", "y"});
      },
      mesh, {ts::P("x", "y")}, ts::P());
  d.add(n + "psum_xy", both(a), ts::sum(a1 * a1), Match::close);
  auto over_y =
      ts::shard_map([](ts::Array x) { return ts::psum(ts::sum(x, {1}), "y"); }, mesh, {ts::P("x", "y")}, ts::P("x"));
  d.add(n + "psum_y", over_y(a), ts::sum(a1, {1}), Match::close);
  auto gather_y =
      ts::shard_map([](ts::Array x) { return ts::all_gather(x, "y", 1, true); }, mesh, {ts::P("x", "y")}, ts::P("x"));
  d.add(n + "all_gather_y", gather_y(a), a1, Match::bits);
  auto scatter_x = ts::shard_map([](ts::Array x) { return ts::psum_scatter(ts::sin(x), "x", 1, true); }, mesh,
                                 {ts::P("x", "y")}, ts::P(ts::none, {"y", "x"}));
  // Rows of the two x blocks summed: rows i and i + 9 of sin(a).
  const ts::Array top = ts::slice(ts::sin(a1), {{0, 9}}), bottom = ts::slice(ts::sin(a1), {{9, 18}});
  d.add(n + "psum_scatter_x", scatter_x(a), top + bottom, Match::bits);  // one addition
}

// Values large enough that reductions across processes take the
// reduce-scatter then all-gather path (over 64 KiB) and moved blocks travel
// as separate messages (over 32 KiB), rather than being sent whole.
void large(Digest& d, const ts::Mesh& m1, const ts::Mesh& m2, const ts::Mesh& one) {
  const ts::NamedSharding s1(one, ts::P());
  const ts::Key key = ts::random::key(51);
  for (ts::DType dt : {ts::f32, ts::f64}) {
    const std::string n = "large/" + ts::dtype_name(dt) + "/";
    const ts::Shape shape{16, 24000};
    const ts::Array a = ts::random::normal(key, shape, dt, ts::NamedSharding(m1, ts::P("x")));
    const ts::Array a1 = ts::random::normal(key, shape, dt, s1);
    d.add(n + "x4/sum0", ts::sum(a, {0}), ts::sum(a1, {0}), Match::close);
    d.add(n + "x4/sum0_scattered", ts::sum(a, {0}, {.out_sharding = ts::P("x")}), ts::sum(a1, {0}), Match::close);
    d.add(n + "x4/reshard_cols", ts::reshard(a, ts::P(ts::none, "x")), a1, Match::bits);
    auto psum =
        ts::shard_map([](ts::Array x) { return ts::psum(ts::sum(x * x, {0}), "x"); }, m1, {ts::P("x")}, ts::P());
    d.add(n + "x4/shard_map_psum", psum(a), ts::sum(a1 * a1, {0}), Match::close);
    auto scatter = ts::shard_map([](ts::Array x) { return ts::psum_scatter(ts::sum(x, {0}), "x", 0, true); }, m1,
                                 {ts::P("x")}, ts::P("x"));
    d.add(n + "x4/shard_map_psum_scatter", scatter(a), ts::sum(a1, {0}), Match::close);
    const ts::Array b = ts::random::normal(key, {8, 48000}, dt, ts::NamedSharding(m2, ts::P("x", "y")));
    const ts::Array b1 = ts::random::normal(key, {8, 48000}, dt, s1);
    d.add(n + "2x2/sum0", ts::sum(b, {0}), ts::sum(b1, {0}), Match::close);
    d.add(n + "2x2/mean", ts::mean(ts::tanh(b)), ts::mean(ts::tanh(b1)), Match::close);
    d.add(n + "2x2/reshard_yx", ts::reshard(b, ts::P("y", "x")), b1, Match::bits);
  }
}

// A jitted step, with a shard_map inside, against the same jit on one device.
void jitted(Digest& d, const ts::Mesh& mesh, const ts::Mesh& one) {
  const ts::NamedSharding s(mesh, ts::P(ts::none, "x")), s1(one, ts::P());
  const ts::Key key = ts::random::key(41);
  const auto ks = ts::random::split(key, 3);
  const ts::Array x = ts::random::normal(ks[0], {24, 20}, ts::f32, s),
                  x1 = ts::random::normal(ks[0], {24, 20}, ts::f32, s1);
  const ts::Array w = ts::random::normal(ks[1], {20, 6}, ts::f32, ts::NamedSharding(mesh, ts::P("x"))),
                  w1 = ts::random::normal(ks[1], {20, 6}, ts::f32, s1);
  auto step = [](ts::Array x, ts::Array w) {
    ts::Array h = ts::tanh(ts::matmul(x, w));
    return std::make_tuple(ts::sum(h * h, {0}), ts::mean(ts::exp(-x * x)), h);
  };
  auto f = ts::jit(step);
  auto [g0, g1, g2] = f(x, w);
  auto [r0, r1, r2] = f(x1, w1);
  d.add("jit/sum_sq", g0, r0, Match::close);
  d.add("jit/mean_exp", g1, r1, Match::close);
  d.add("jit/tanh_matmul", g2, r2, Match::close);
  auto sm = ts::shard_map([](ts::Array xl) { return ts::psum(ts::sum(ts::sin(xl), {1}), "x"); }, mesh,
                          {ts::P(ts::none, "x")}, ts::P());
  auto fj = ts::jit([&](ts::Array v) { return sm(v * 0.5f) + 1.0f; });
  d.add("jit/shard_map_psum", fj(x), ts::sum(ts::sin(x1 * 0.5f), {1}) + 1.0f, Match::close);
}

int run(const std::string& out_path) {
  if (ts::device_count() != 4) {
    std::cerr << "digest: needs 4 devices in all, found " << ts::device_count() << " (" << ts::process_count()
              << " processes)\n";
    return 2;
  }
  const ts::Mesh m1 = ts::make_mesh({4}, {"x"});
  const ts::Mesh m2 = ts::make_mesh({2, 2}, {"x", "y"});
  // The reference: this process's first device alone (a mesh must be built
  // on devices the process holds to be read without a collective).
  const ts::Mesh one(std::vector<ts::Device>{examples::first_local_device()}, {1}, {"x"});
  const std::vector<ts::PartitionSpec> specs1{ts::P("x"), ts::P(ts::none, "x")};
  const std::vector<ts::PartitionSpec> specs2{ts::P("x", "y"), ts::P("y", "x"),
                                              ts::P(std::vector<std::string>{"x", "y"}), ts::P(ts::none, "y")};
  Digest d;
  for (ts::DType dt : {ts::f32, ts::f64}) {
    for (int i = 0; i < static_cast<int>(specs1.size()); ++i)
      global_view(d, "x4/" + specs1[i].str(), m1, specs1, i, dt, one);
    for (int i = 0; i < static_cast<int>(specs2.size()); ++i)
      global_view(d, "2x2/" + specs2[i].str(), m2, specs2, i, dt, one);
  }
  shard_map_1d(d, m1, one);
  shard_map_2d(d, m2, one);
  large(d, m1, m2, one);
  jitted(d, m1, one);

  const int failures = examples::max_over_processes(d.failures());
  if (ts::process_index() == 0) {
    std::ofstream out(out_path);
    for (const std::string& l : d.lines()) {
      out << l << '\n';
      std::cout << l << '\n';
    }
    out.close();
    if (!out) {
      std::cerr << "digest: could not write " << out_path << "\n";
      return 2;
    }
    std::cout << d.lines().size() << " results on " << ts::process_count() << " process(es) x "
              << ts::local_device_count() << " device(s); " << (failures ? "CHECKS FAILED" : "all checks passed")
              << std::endl;
  }
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: digest OUT_FILE\n";
    return 2;
  }
  try {
    return run(argv[1]);
  } catch (const std::exception& e) {
    std::cerr << "process " << ts::process_index() << ": digest: " << e.what() << std::endl;
    return 2;
  }
}
