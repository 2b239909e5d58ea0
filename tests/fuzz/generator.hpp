// The random program generator: its state and utilities, shared by the files
// that build each op family (generate.cpp: sources and the main loop;
// gen_math.cpp: elementwise, reductions, linear algebra; gen_shape.cpp:
// shape ops, stencils, indexing; gen_shard_map.cpp: shard_map bodies).
// See program.hpp for the model.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz/program.hpp"
#include "test_util.hpp"

namespace tessera::fuzz::gen {

using Args = std::vector<Array>;

// Sources stay this small so that a program runs in about a millisecond;
// results of broadcasts and products may grow to kMaxResult.
constexpr std::int64_t kMaxElems = 256;
constexpr std::int64_t kMaxResult = 1024;

inline std::int64_t numel(const Shape& s) { return testing::numel(s); }

inline std::string ints_text(const std::vector<int>& v) {
  std::string t = "{";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) t += ',';
    t += std::to_string(v[i]);
  }
  return t + "}";
}

inline std::string num_text(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

inline std::string vn(int id) {
  std::string t = "v";  // appended, not "v" + ...: GCC 12 warns (-Wrestrict) on that form
  t += std::to_string(id);
  return t;
}

inline std::string dt(DType t) { return dtype_name(t); }

// A C++ scalar operand with its listing text.
struct Sc {
  Scalar value;
  std::string text;
};

inline std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const std::size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const std::int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (x != y && x != 1 && y != 1) return std::nullopt;
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// Dims of `p` removed, then `e` inserted at `d` (for specs of derived shapes).
inline PartitionSpec with_entry(const PartitionSpec& p, int rank, int d, PartitionSpec::Entry e) {
  std::vector<PartitionSpec::Entry> v;
  for (int i = 0; i < rank; ++i) v.push_back(p[i]);
  v[d] = std::move(e);
  return PartitionSpec(v);
}

// The same mesh shape, names and types over the next devices (ids + 1):
// other devices in the same arrangement, for moves between meshes.
inline Mesh shifted_mesh(const Mesh& m) {
  std::vector<Device> d;
  for (const Device& x : m.devices()) d.push_back(Device::from_id((x.id() + 1) % device_count()));
  return Mesh(d, m.shape(), m.axis_names(), m.axis_types());
}

class Gen {
 public:
  Gen(std::uint64_t seed, const Mesh& mesh, const Mesh& ref_mesh, bool trace)
      : rng_(static_cast<std::uint32_t>(seed ^ (seed >> 32) * 0x9E3779B9u)), trace_(trace), p_(mesh, ref_mesh) {
    p_.seed = seed;
    for (AxisType t : mesh.axis_types())
      if (t == AxisType::Explicit) explicit_ = true;
  }

  Program build();

 private:
  std::mt19937 rng_;
  bool trace_;
  Program p_;
  bool explicit_ = false;

  // ------------------------------------------------------------ randomness
  int uni(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  double real(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }
  bool coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[static_cast<std::size_t>(uni(0, static_cast<int>(v.size()) - 1))]; }

  std::int64_t random_dim();
  Shape random_shape(int min_rank, int max_rank = 3);
  DType random_dtype();
  PartitionSpec spec(int rank);
  PartitionSpec aligned_spec(int id, const Shape& s);
  PartitionSpec partner_spec(int like, const Shape& s);
  std::optional<PartitionSpec> maybe_out(int rank);
  static std::string out_text(const std::optional<PartitionSpec>& o) {
    return o ? ", out_sharding=" + spec_text(*o) : "";
  }

  Sc random_scalar(bool for_pow = false);
  std::vector<double> host_values(std::int64_t n, DType t);

  // ---------------------------------------------------------------- values
  // References into p_.steps dangle once emit() appends: copy what outlives it.
  const Step& st(int id) const { return p_.steps[static_cast<std::size_t>(id)]; }
  struct Stats {
    double err, maxabs;
    int grid;
  };
  Stats stats(int id) const { return {st(id).err, st(id).maxabs, st(id).grid}; }
  const Array& val(int id) const { return *st(id).ref.value; }
  const Shape& shape(int id) const { return val(id).shape(); }
  DType dtype(int id) const { return val(id).dtype(); }
  int rank(int id) const { return val(id).ndim(); }
  bool exact(int id) const { return st(id).err == 0; }

  int emit(std::string op, std::string text, std::vector<int> args, StepFn fn);
  static void measure(Step& s);

  // An existing value satisfying `pred`, recent ones more often (so chains
  // grow deep); -1 when there is none.
  template <class Pred>
  int choose(Pred pred) {
    std::vector<int> c;
    for (int i = 0; i < static_cast<int>(p_.steps.size()); ++i)
      if (st(i).ok() && pred(i)) c.push_back(i);
    if (c.empty()) return -1;
    return coin(0.6) ? c.back() : pick(c);
  }

  // A value to operate on: an existing one, or a new source.
  template <class Pred>
  int operand(Pred pred, int min_rank = 0, bool need_exact = false) {
    int id = coin(0.1) ? -1 : choose([&](int i) {
      return rank(i) >= min_rank && (!need_exact || exact(i)) && pred(i);
    });
    for (int tries = 0; id < 0 && tries < 4; ++tries) id = source(random_shape(min_rank), random_dtype());
    return id;
  }
  int operand(int min_rank = 0, bool need_exact = false) {
    return operand([](int) { return true; }, min_rank, need_exact);
  }

  void set_err(int id, double e) {
    if (id >= 0 && is_float(dtype(id))) p_.steps[static_cast<std::size_t>(id)].err = e;
  }
  double slack(int id) const { return 2 * unit_roundoff(dtype(id)) * st(id).maxabs; }

  void set_sum_err(int id, double m, double term, int g, double e, double div = 1);

  // -------------------------------------------------------------------- ops
  int source_data(const Shape& s, DType t, const std::vector<double>& host, const PartitionSpec& sp,
                  const std::string& what);
  int source(const Shape& s, DType t, bool exact_shape = true, std::optional<PartitionSpec> given = std::nullopt);
  bool unary();
  Shape broadcast_partner(const Shape& s);
  int partner(int x, bool need_exact);
  bool binary();
  bool where_or_clip();
  bool reduce();
  void set_dot_err(int o, int a, int b, double k);
  bool linalg();
  bool shape_op();
  bool stencil();
  bool interp_op();
  int index_source(std::int64_t len, std::int64_t lo, std::int64_t hi);
  bool indexing();

  int parts(const PartitionSpec& sp, int d) const;
  std::vector<std::string> spec_axes(const PartitionSpec& sp, int r) const;
  static std::string names_text(const std::vector<std::string>& v) {
    std::string t = "{";
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i) t += ',';
      t += '\'';
      t += v[i];
      t += '\'';
    }
    return t + "}";
  }

  template <class Body>
  int smap(const std::string& op, const std::string& body_text, int x, const PartitionSpec& in, const PartitionSpec& out,
           Body body, bool may_check = true) {
    const bool check = may_check && !coin(0.2);
    const std::string text = "shard_map(" + body_text + ", in=" + spec_text(in) + ", out=" + spec_text(out) +
                             (check ? "" : ", check_vma=false") + ")(" + vn(x) + ")";
    return emit(op, text, {x}, [=](const Mesh& m, const Args& a) {
      return shard_map(body, m, {in}, out, ShardMapOptions{.check_vma = check})(a[0]);
    });
  }

  bool shard_map_two_inputs(int x, const PartitionSpec& in);
  bool ppermute_roll();
  bool shard_map_op();

  bool huge_shape();
  void step_once();
};

}  // namespace tessera::fuzz::gen
