// Random program generation (see program.hpp for the model).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <set>
#include <sstream>

#include "fuzz/program.hpp"
#include "test_util.hpp"

namespace tessera::fuzz {
namespace {

using Args = std::vector<Array>;

// Sources stay this small so that a program runs in about a millisecond;
// results of broadcasts and products may grow to kMaxResult.
constexpr std::int64_t kMaxElems = 256;
constexpr std::int64_t kMaxResult = 1024;

std::int64_t numel(const Shape& s) { return testing::numel(s); }

std::string ints_text(const std::vector<int>& v) {
  std::string t = "{";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) t += ',';
    t += std::to_string(v[i]);
  }
  return t + "}";
}

std::string num_text(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

std::string vn(int id) { return "v" + std::to_string(id); }

std::string dt(DType t) { return dtype_name(t); }

// A C++ scalar operand with its listing text.
struct Sc {
  Scalar value;
  std::string text;
};

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
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
PartitionSpec with_entry(const PartitionSpec& p, int rank, int d, PartitionSpec::Entry e) {
  std::vector<PartitionSpec::Entry> v;
  for (int i = 0; i < rank; ++i) v.push_back(p[i]);
  v[d] = std::move(e);
  return PartitionSpec(v);
}

Array binary_op(int op, const Array& a, const Array& b, const OutOptions& o) {
  switch (op) {
    case 0: return add(a, b, o);
    case 1: return subtract(a, b, o);
    case 2: return multiply(a, b, o);
    case 3: return maximum(a, b, o);
    case 4: return minimum(a, b, o);
    case 5: return divide(a, b, o);
    case 6: return pow(a, b, o);
    case 7: return equal(a, b, o);
    case 8: return not_equal(a, b, o);
    case 9: return less(a, b, o);
    case 10: return less_equal(a, b, o);
    case 11: return greater(a, b, o);
    case 12: return greater_equal(a, b, o);
    case 13: return logical_and(a, b, o);
    case 14: return logical_or(a, b, o);
    default: return logical_xor(a, b, o);
  }
}

template <class A, class B>
Array binary_scalar_op(int op, const A& a, const B& b) {
  switch (op) {
    case 0: return add(a, b);
    case 1: return subtract(a, b);
    case 2: return multiply(a, b);
    case 3: return maximum(a, b);
    case 4: return minimum(a, b);
    case 5: return divide(a, b);
    case 6: return pow(a, b);
    case 7: return equal(a, b);
    case 8: return not_equal(a, b);
    case 9: return less(a, b);
    case 10: return less_equal(a, b);
    case 11: return greater(a, b);
    default: return greater_equal(a, b);
  }
}
constexpr const char* kBinaryNames[] = {"add",        "subtract", "multiply", "maximum",       "minimum", "divide",
                                        "pow",        "equal",    "not_equal", "less",         "less_equal",
                                        "greater",    "greater_equal", "logical_and", "logical_or", "logical_xor"};
constexpr int kNumBinary = 16;
constexpr int kNumScalarBinary = 13;  // logical ops take no scalar
constexpr int kNumContinuousBinary = 5;  // add .. minimum: a small input difference stays small

Array reduce_op(int op, const Array& x, const std::optional<std::vector<int>>& axes, int axis,
                const ReduceOptions& o) {
  const Axes ax = axes ? Axes(*axes) : Axes();
  switch (op) {
    case 0: return sum(x, ax, o);
    case 1: return mean(x, ax, o);
    case 2: return max(x, ax, o);
    case 3: return min(x, ax, o);
    case 4: return prod(x, ax, o);
    case 5: return any(x, ax, o);
    case 6: return all(x, ax, o);
    case 7: return argmax(x, axis, o);
    default: return argmin(x, axis, o);
  }
}
constexpr const char* kReduceNames[] = {"sum", "mean", "max", "min", "prod", "any", "all", "argmax", "argmin"};

struct UnaryOp {
  const char* name;
  Array (*fn)(const Array&);
  double lipschitz;  // < 0: not safe on a value that may differ slightly
};
const UnaryOp kUnary[] = {
    {"negative", &tessera::negative, 1}, {"abs", &tessera::abs, 1},       {"sin", &tessera::sin, 1},
    {"cos", &tessera::cos, 1},           {"tanh", &tessera::tanh, 1},     {"sigmoid", &tessera::sigmoid, 0.25},
    {"exp", &tessera::exp, -1},          {"log", &tessera::log, -1},      {"log1p", &tessera::log1p, -1},
    {"expm1", &tessera::expm1, -1},      {"sqrt", &tessera::sqrt, -1},    {"rsqrt", &tessera::rsqrt, -1},
    {"floor", &tessera::floor, -1},      {"ceil", &tessera::ceil, -1},    {"round", &tessera::round, -1},
    {"sign", &tessera::sign, -1},        {"isnan", &tessera::isnan, -1},  {"isfinite", &tessera::isfinite, -1},
    {"logical_not", &tessera::logical_not, -1},
};

// The same mesh shape, names and types over the next devices (ids + 1):
// other devices in the same arrangement, for moves between meshes.
Mesh shifted_mesh(const Mesh& m) {
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

  Program build() {
    const int target = uni(2, 9);
    source(random_shape(0), random_dtype());
    for (int guard = 0; static_cast<int>(p_.steps.size()) < target && guard < 100; ++guard) step_once();
    return std::move(p_);
  }

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

  std::int64_t random_dim() {
    const int r = uni(0, 99);
    if (r < 5) return 0;
    if (r < 20) return 1;
    if (r < 45) return uni(2, 4);
    if (r < 75) return pick(std::vector<std::int64_t>{5, 7, 11, 13});
    return uni(2, 16);
  }

  Shape random_shape(int min_rank, int max_rank = 3) {
    const int r = std::max(min_rank, std::min(max_rank, pick(std::vector<int>{0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3})));
    Shape s(static_cast<std::size_t>(r));
    for (auto& d : s) d = random_dim();
    // Shrink the largest dims until the array is small.
    while (numel(s) > kMaxElems) *std::max_element(s.begin(), s.end()) /= 2;
    return s;
  }

  DType random_dtype() {
    const auto& all = fuzz_dtypes();
    if (coin(0.5)) {
      std::vector<DType> floats;
      for (DType t : all)
        if (is_float(t)) floats.push_back(t);
      return pick(floats);
    }
    return pick(all);
  }

  PartitionSpec spec(int rank) {
    // Rarely a spec longer than the array, or one with an unreduced axis:
    // every layout must accept or reject them alike.
    if (coin(0.01)) return testing::random_spec(rng_, p_.mesh, rank + 1);
    PartitionSpec sp = testing::random_spec(rng_, p_.mesh, rank);
    if (coin(0.01)) {
      std::vector<std::string> unused;
      for (const auto& a : p_.mesh.axis_names())
        if (std::none_of(sp.entries().begin(), sp.entries().end(), [&](const PartitionSpec::Entry& e) {
              return std::find(e.axes().begin(), e.axes().end(), a) != e.axes().end();
            }))
          unused.push_back(a);
      if (!unused.empty()) sp = PartitionSpec(sp.entries(), {pick(unused)});
    }
    return sp;
  }

  // A spec for an array of shape `s` that shards like value `id` where the
  // dims line up from the right (what Explicit-mode operands need to agree).
  PartitionSpec aligned_spec(int id, const Shape& s) {
    const Shape& xs = shape(id);
    const PartitionSpec& xp = val(id).sharding().spec();
    std::vector<PartitionSpec::Entry> e(s.size(), none);
    for (std::size_t j = 0; j < s.size(); ++j) {
      const std::ptrdiff_t i = static_cast<std::ptrdiff_t>(j) + static_cast<std::ptrdiff_t>(xs.size()) -
                               static_cast<std::ptrdiff_t>(s.size());
      if (i >= 0 && xs[static_cast<std::size_t>(i)] == s[j]) e[j] = xp[static_cast<int>(i)];
    }
    return PartitionSpec(e);
  }

  PartitionSpec partner_spec(int like, const Shape& s) {
    return coin(explicit_ ? 0.75 : 0.3) ? aligned_spec(like, s) : spec(static_cast<int>(s.size()));
  }

  std::optional<PartitionSpec> maybe_out(int rank) {
    if (coin(explicit_ ? 0.5 : 0.1)) return spec(rank);
    return std::nullopt;
  }
  static std::string out_text(const std::optional<PartitionSpec>& o) {
    return o ? ", out_sharding=" + spec_text(*o) : "";
  }

  Sc random_scalar(bool for_pow = false) {
    const int k = uni(0, 99);
    if (k < 40 || for_pow) {
      const int v = uni(-3, 3);
      if (!for_pow || k < 50) return {Scalar(v), std::to_string(v)};
    }
    if (k < 85) {
      const double v = pick(std::vector<double>{0.5, -1.5, 2.0, 0.25, 3.0, -0.75, 1.0});
      return {Scalar(v), num_text(v) + "f"};
    }
    const bool b = coin(0.5);
    return {Scalar(b), b ? "true" : "false"};
  }

  std::vector<double> host_values(std::int64_t n, DType t) {
    std::vector<double> v(static_cast<std::size_t>(n));
    if (t == DType::bool_) {
      for (auto& x : v) x = uni(0, 1);
    } else if (!is_float(t)) {
      const int mode = uni(0, 99);
      const int range = mode < 80 ? 9 : mode < 98 ? 1000 : 1 << 30;
      for (auto& x : v) x = uni(-range, range);
    } else {
      const int mode = uni(0, 99);
      for (auto& x : v) {
        if (mode < 60) x = uni(-32, 32) / 4.0;  // on a grid: sums are exact in any order
        else if (mode < 90) x = real(-4, 4);
        else if (coin(0.2)) x = pick(std::vector<double>{NAN, INFINITY, -INFINITY, -0.0, 1e30, -1e-30, 1e-40});
        else x = uni(-8, 8);
      }
    }
    return v;
  }

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

  int emit(std::string op, std::string text, std::vector<int> args, StepFn fn) {
    Step s;
    s.op = std::move(op);
    s.text = std::move(text);
    s.args = std::move(args);
    s.fn = std::move(fn);
    if (trace_) {
      std::fprintf(stderr, "  [reference] v%zu = %s\n", p_.steps.size(), s.text.c_str());
      std::fflush(stderr);
    }
    std::vector<Array> a;
    for (int i : s.args) a.push_back(val(i));
    const Explanation ex = explain([&] { s.ref = run_step(s.fn, p_.ref_mesh, a); });
    if (s.ok()) measure(s);
    if (ex.bytes_moved() != 0 && s.op != "device_put.other_mesh")
      s.ref_problem = "on one device the step moved " + std::to_string(ex.bytes_moved()) + " bytes: " + ex.str();
    p_.steps.push_back(std::move(s));
    return p_.steps.back().ok() ? static_cast<int>(p_.steps.size()) - 1 : -1;
  }

  static void measure(Step& s) {
    const Array& a = *s.ref.value;
    std::vector<double> d(static_cast<std::size_t>(a.size()));
    a.copy_to_host(d.data(), DType::f64);
    s.grid = 0;
    for (double x : d) {
      if (!std::isfinite(x)) {
        s.finite = false;
        continue;
      }
      s.maxabs = std::max(s.maxabs, std::abs(x));
      if (x != 0 && (s.minabs == 0 || std::abs(x) < s.minabs)) s.minabs = std::abs(x);
      if (!is_float(a.dtype()) || s.grid < 0) continue;
      int g = s.grid;
      while (g <= 10 && std::ldexp(x, g) != std::floor(std::ldexp(x, g))) ++g;
      s.grid = g > 10 ? -1 : g;
    }
  }

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

  // Output `id` holds sums of m terms (divided by `div`), each term of
  // magnitude <= `term` on grid `g` (-1: none), inputs off by `e` in total.
  // Terms on a coarse enough grid make every partial sum exact, so any
  // order gives the same bits; otherwise allow the worst rounding of m adds.
  void set_sum_err(int id, double m, double term, int g, double e, double div = 1) {
    if (id < 0 || !is_float(dtype(id))) return;
    const bool exact_sum = e == 0 && g >= 0 && m * term * std::ldexp(1.0, g) < std::ldexp(1.0, significand_bits(dtype(id)) - 1);
    if (exact_sum) return;
    set_err(id, (e + 2 * m * m * unit_roundoff(dtype(id)) * term) / std::max(div, 1.0) + 2 * slack(id));
  }

  // ---------------------------------------------------------------- sources
  int source_data(const Shape& s, DType t, const std::vector<double>& host, const PartitionSpec& sp,
                  const std::string& what) {
    auto bytes = std::make_shared<std::vector<unsigned char>>(host.size() * itemsize(t));
    detail::convert(host.data(), DType::f64, bytes->data(), t, static_cast<std::int64_t>(host.size()));
    std::string text = "device_put(" + what + " " + dt(t) + shape_str(s) + ", " + spec_text(sp) + ")";
    if (host.size() <= 12) {
      text += "  # data {";
      for (std::size_t i = 0; i < host.size(); ++i) {
        if (i) text += ',';
        text += num_text(host[i]);
      }
      text += "}";
    }
    return emit("device_put", text, {}, [bytes, t, s, sp](const Mesh& m, const Args&) {
      return device_put_raw(bytes->data(), t, s, NamedSharding(m, sp));
    });
  }

  // A new array of shape `s` (any shape when !exact_shape: ranges and eye
  // choose their own) and dtype `t`.
  int source(const Shape& s, DType t, bool exact_shape = true, std::optional<PartitionSpec> given = std::nullopt) {
    const int r = static_cast<int>(s.size());
    const PartitionSpec sp = given ? *given : spec(r);
    const std::string ss = spec_text(sp);
    const int kind = uni(0, 99);
    if (r == 0 && kind < 20) {
      Sc c = random_scalar();
      return emit("scalar", "scalar(" + c.text + ", " + dt(t) + ")", {},
                  [c, t](const Mesh& m, const Args&) { return scalar(c.value, t, m); });
    }
    if (kind < 12) {
      const int which = uni(0, 2);
      const Sc c = random_scalar();
      const char* names[] = {"zeros", "ones", "full"};
      std::string text = std::string(names[which]) + "(" + shape_str(s) + (which == 2 ? ", " + c.text : "") + ", " +
                         dt(t) + ", " + ss + ")";
      return emit(names[which], text, {}, [which, c, s, t, sp](const Mesh& m, const Args&) {
        const NamedSharding sh(m, sp);
        return which == 0 ? zeros(s, t, sh) : which == 1 ? ones(s, t, sh) : full(s, c.value, t, sh);
      });
    }
    if (kind < 30 && (is_float(t) || coin(0.05))) {
      const int seed = uni(0, 1000), fold = uni(-1, 3), split = coin(0.3) ? uni(0, 2) : -1;
      const bool normal_dist = coin(0.4);
      const double lo = uni(-2, 0), hi = lo + (coin(0.97) ? uni(1, 3) : 0);
      std::string key = "key(" + std::to_string(seed) + ")";
      if (fold >= 0) key = "fold_in(" + key + ", " + std::to_string(fold) + ")";
      if (split >= 0) key = "split(" + key + ", 3)[" + std::to_string(split) + "]";
      std::string text = normal_dist ? "random.normal(" + key + ", " + shape_str(s) + ", " + dt(t) + ", " + ss + ")"
                                     : "random.uniform(" + key + ", " + shape_str(s) + ", " + dt(t) + ", " + ss +
                                           ", " + num_text(lo) + ", " + num_text(hi) + ")";
      return emit(normal_dist ? "random.normal" : "random.uniform", text, {},
                  [=](const Mesh& m, const Args&) {
                    Key k = random::key(static_cast<std::uint64_t>(seed));
                    if (fold >= 0) k = random::fold_in(k, static_cast<std::uint32_t>(fold));
                    if (split >= 0) k = random::split(k, 3)[static_cast<std::size_t>(split)];
                    const NamedSharding sh(m, sp);
                    return normal_dist ? random::normal(k, s, t, sh) : random::uniform(k, s, t, sh, lo, hi);
                  });
    }
    if (!exact_shape && r == 1 && kind < 45) {
      if (coin(0.5)) {
        const double start = uni(-5, 5), step = pick(std::vector<double>{1, 2, 0.5, -1, 0.25, 3, -0.5});
        const double stop = start + step * uni(0, 20) + (coin(0.3) ? step / 2 : 0);
        std::string text = "arange(" + num_text(start) + ", " + num_text(stop) + ", " + num_text(step) + ", " +
                           dt(t) + ", " + ss + ")";
        return emit("arange", text, {}, [=](const Mesh& m, const Args&) {
          return arange(start, stop, step, t, NamedSharding(m, sp));
        });
      }
      const double start = uni(-4, 4), stop = start + uni(-3, 6);
      const std::int64_t num = uni(0, 20);
      const bool endpoint = coin(0.7);
      std::string text = "linspace(" + num_text(start) + ", " + num_text(stop) + ", " + std::to_string(num) + ", " +
                         dt(t) + ", " + ss + ", endpoint=" + (endpoint ? "true" : "false") + ")";
      return emit("linspace", text, {}, [=](const Mesh& m, const Args&) {
        return linspace(start, stop, num, t, NamedSharding(m, sp), endpoint);
      });
    }
    if (!exact_shape && r == 2 && kind < 45) {
      const std::int64_t k = uni(-3, 3);
      std::string text = "eye(" + std::to_string(s[0]) + ", " + std::to_string(s[1]) + ", " + std::to_string(k) +
                         ", " + dt(t) + ", " + ss + ")";
      return emit("eye", text, {}, [=](const Mesh& m, const Args&) {
        return eye(s[0], s[1], k, t, NamedSharding(m, sp));
      });
    }
    const auto host = std::make_shared<std::vector<double>>(host_values(numel(s), t));
    if (kind < 55) {
      std::string text = "make_array_from_callback(" + shape_str(s) + ", " + dt(t) + ", " + ss + ")";
      return emit("make_array_from_callback", text, {}, [=](const Mesh& m, const Args&) {
        return make_array_from_callback(s, t, NamedSharding(m, sp), [&](const std::vector<Slice>& index) {
          return testing::sub_block(*host, s, index);
        });
      });
    }
    return source_data(s, t, *host, sp, "host");
  }

  // ------------------------------------------------------------ elementwise
  bool unary() {
    const int n = static_cast<int>(std::size(kUnary));
    const int k = uni(0, n);  // n: astype
    if (k == n) {
      DType to = random_dtype();
      const int x = operand(0, false);
      if (x < 0) return false;
      if (!exact(x) && !is_float(to)) to = coin(0.5) ? DType::f32 : DType::f64;
      const int o = emit("astype", "astype(" + vn(x) + ", " + dt(to) + ")", {x},
                         [to](const Mesh&, const Args& a) { return astype(a[0], to); });
      // Narrowing f64 -> f32 rounds once more.
      if (o >= 0 && !exact(x)) set_err(o, st(x).err + 2 * slack(o));
      return true;
    }
    const UnaryOp& u = kUnary[k];
    const int x = operand(0, u.lipschitz < 0);
    if (x < 0) return false;
    const int o = emit(u.name, std::string(u.name) + "(" + vn(x) + ")", {x},
                       [f = u.fn](const Mesh&, const Args& a) { return f(a[0]); });
    if (o >= 0 && !exact(x)) set_err(o, u.lipschitz * st(x).err + 2 * slack(o));
    return true;
  }

  // A shape that broadcasts with `s` (rarely one that does not).
  Shape broadcast_partner(const Shape& s) {
    Shape p;
    const int drop = coin(0.6) ? 0 : uni(0, static_cast<int>(s.size()));
    for (std::size_t i = static_cast<std::size_t>(drop); i < s.size(); ++i) p.push_back(coin(0.25) ? 1 : s[i]);
    if (coin(0.12))
      for (int i = uni(1, 2); i > 0; --i) p.insert(p.begin(), uni(1, 3));
    if (coin(0.03) && !p.empty()) p[static_cast<std::size_t>(uni(0, static_cast<int>(p.size()) - 1))] += 1;
    return p;
  }

  // A second operand broadcast-compatible with x: an existing value or a new one.
  int partner(int x, bool need_exact) {
    if (coin(0.4)) {
      const int id = choose([&](int i) {
        if (need_exact && !exact(i)) return false;
        auto b = broadcast_shapes(shape(x), shape(i));
        return b && numel(*b) <= kMaxResult;
      });
      if (id >= 0) return id;
    }
    const Shape ps = broadcast_partner(shape(x));
    if (numel(ps) > kMaxResult) return -1;
    return source(ps, coin(0.7) ? dtype(x) : random_dtype(), true, partner_spec(x, ps));
  }

  bool binary() {
    const int op = uni(0, kNumBinary - 1);
    const bool continuous = op < kNumContinuousBinary;
    const int x = operand(0, !continuous);
    if (x < 0) return false;
    const int form = op < kNumScalarBinary ? uni(0, 3) : 0;  // 0, 1: arrays; 2: array op scalar; 3: scalar op array
    const std::string name = kBinaryNames[op];
    if (form >= 2) {
      const Sc c = random_scalar(op == 6);
      const bool first = form == 3;
      const std::string text = name + "(" + (first ? c.text + ", " + vn(x) : vn(x) + ", " + c.text) + ")";
      const int o = emit(name, text, {x}, [op, c, first](const Mesh&, const Args& a) {
        return first ? binary_scalar_op(op, c.value, a[0]) : binary_scalar_op(op, a[0], c.value);
      });
      if (o >= 0 && !exact(x)) {
        const double scale = op == 2 ? std::abs(c.value.as_double()) : 1.0;
        set_err(o, scale * st(x).err + 2 * slack(o));
      }
      return true;
    }
    const int y = partner(x, !continuous);
    if (y < 0) return false;
    const bool swap = coin(0.3);
    const int a = swap ? y : x, b = swap ? x : y;
    const auto bs = broadcast_shapes(shape(a), shape(b));
    const auto out = maybe_out(bs ? static_cast<int>(bs->size()) : 0);
    const int o = emit(name, name + "(" + vn(a) + ", " + vn(b) + out_text(out) + ")", {a, b},
                       [op, out](const Mesh&, const Args& v) { return binary_op(op, v[0], v[1], {.out_sharding = out}); });
    if (o >= 0 && (!exact(a) || !exact(b))) {
      const double ea = st(a).err, eb = st(b).err;
      double e = op == 2 ? ea * (st(b).maxabs + eb) + eb * st(a).maxabs : op >= 3 ? std::max(ea, eb) : ea + eb;
      set_err(o, e + 2 * slack(o));
    }
    return true;
  }

  bool where_or_clip() {
    const int x = operand(0, false);
    if (x < 0) return false;
    if (coin(0.3)) {
      std::optional<Sc> lo, hi;
      if (coin(0.7)) lo = random_scalar();
      if (coin(0.7)) hi = random_scalar();
      std::string text = "clip(" + vn(x) + ", " + (lo ? lo->text : "none") + ", " + (hi ? hi->text : "none") + ")";
      const int o = emit("clip", text, {x}, [lo, hi](const Mesh&, const Args& a) {
        return clip(a[0], lo ? std::optional<Scalar>(lo->value) : std::nullopt,
                    hi ? std::optional<Scalar>(hi->value) : std::nullopt);
      });
      set_err(o, st(x).err);
      return true;
    }
    // The condition must be exact: a flipped truth value is a real difference.
    int c = coin(0.5) ? choose([&](int i) { return exact(i) && dtype(i) == DType::bool_ && broadcast_shapes(shape(i), shape(x)); }) : -1;
    if (c < 0) {
      const Shape cs = broadcast_partner(shape(x));
      if (numel(cs) > kMaxResult) return false;
      c = source(cs, coin(0.85) ? DType::bool_ : random_dtype(), true, partner_spec(x, cs));
      if (c < 0) return false;
    }
    const int form = uni(0, 2);
    if (form == 0) {
      const int y = partner(x, false);
      if (y < 0) return false;
      const auto bs = broadcast_shapes(shape(c), shape(x));
      const auto out = maybe_out(bs ? static_cast<int>(bs->size()) : 0);
      const int o = emit("where", "where(" + vn(c) + ", " + vn(x) + ", " + vn(y) + out_text(out) + ")", {c, x, y},
                         [out](const Mesh&, const Args& a) { return where(a[0], a[1], a[2], {.out_sharding = out}); });
      if (o >= 0) set_err(o, std::max(st(x).err, st(y).err));
      return true;
    }
    const Sc s = random_scalar();
    const bool scalar_first = form == 2;
    const std::string text = "where(" + vn(c) + ", " + (scalar_first ? s.text + ", " + vn(x) : vn(x) + ", " + s.text) + ")";
    const int o = emit("where", text, {c, x}, [s, scalar_first](const Mesh&, const Args& a) {
      return scalar_first ? where(a[0], s.value, a[1]) : where(a[0], a[1], s.value);
    });
    set_err(o, st(x).err);
    return true;
  }

  // ------------------------------------------------------------- reductions
  bool reduce() {
    int op = uni(0, 8);
    const bool continuous = op < 4;
    const int x = operand(0, !continuous);
    if (x < 0) return false;
    // A float product that may overflow or underflow on the way depends on the
    // order of its factors (inf * 0 or 0 * inf): only tame factors for prod.
    if (op == 4 && is_float(dtype(x))) {
      const Step& s = st(x);
      const double range = static_cast<double>(std::max<std::int64_t>(numel(shape(x)), 1)) *
                           std::max(std::log2(std::max(s.maxabs, 1.0)), s.minabs > 0 ? -std::log2(std::min(s.minabs, 1.0)) : 0.0);
      if (!s.finite || range > 100) op = 0;
    }
    const int r = rank(x);
    ReduceOptions opt;
    opt.keepdims = coin(0.3);
    std::optional<std::vector<int>> axes;
    std::set<int> reduced;  // normalized dims, for the error bound
    int axis = 0;
    std::string atext;
    if (op >= 7) {
      axis = r == 0 ? 0 : uni(-r, r - 1);
      if (coin(0.03)) axis = r;
      if (axis >= -r && axis < r) reduced.insert((axis + r) % std::max(r, 1));
      atext = "axis=" + std::to_string(axis);
    } else if (r == 0 || coin(0.3)) {
      for (int d = 0; d < r; ++d) reduced.insert(d);
      atext = "axes=all";
    } else {
      std::vector<int> a;
      if (!coin(0.08)) {
        for (int d = 0; d < r; ++d)
          if (coin(0.5)) a.push_back(coin(0.3) ? d - r : d);
        if (a.empty()) a.push_back(uni(0, r - 1));
        std::shuffle(a.begin(), a.end(), rng_);
        if (coin(0.03)) a.push_back(coin(0.5) ? r : a[0]);  // out of range or repeated
      }
      for (int d : a) reduced.insert(((d % std::max(r, 1)) + r) % std::max(r, 1));
      axes = a;
      atext = "axes=" + ints_text(a);
    }
    const int out_rank = opt.keepdims ? r : r - static_cast<int>(reduced.size());
    opt.out_sharding = maybe_out(std::max(out_rank, 0));
    const std::string text = std::string(kReduceNames[op]) + "(" + vn(x) + ", " + atext +
                             (opt.keepdims ? ", keepdims" : "") + out_text(opt.out_sharding) + ")";
    const int o = emit(kReduceNames[op], text, {x}, [op, axes, axis, opt](const Mesh&, const Args& a) {
      return reduce_op(op, a[0], axes, axis, opt);
    });
    if (o < 0) return true;
    double m = 1;
    for (int d : reduced)
      if (d >= 0 && d < r) m *= static_cast<double>(shape(x)[static_cast<std::size_t>(d)]);
    const Step& s = st(x);
    if (op == 0) set_sum_err(o, m, s.maxabs, s.grid, m * s.err);
    else if (op == 1) set_sum_err(o, m, s.maxabs, s.grid, m * s.err, m);
    else if (op <= 3) set_err(o, s.err);
    else if (op == 4 && is_float(dtype(o))) {
      const double bits = m * std::log2(std::max(s.maxabs * std::ldexp(1.0, std::max(s.grid, 0)), 1.0));
      if (s.grid < 0 || bits >= significand_bits(dtype(o)) - 1) set_err(o, 2 * (m + 1) * unit_roundoff(dtype(o)) * st(o).maxabs + 1e-300);
    }
    return true;
  }

  // --------------------------------------------------------- linear algebra
  // Error bound of a product: every output is a sum of k products a*b.
  void set_dot_err(int o, int a, int b, double k) {
    const Step &sa = st(a), &sb = st(b);
    const int g = sa.grid >= 0 && sb.grid >= 0 ? sa.grid + sb.grid : -1;
    const double e = k * (sa.err * (sb.maxabs + sb.err) + sb.err * sa.maxabs);
    set_sum_err(o, k, sa.maxabs * sb.maxabs, g, e);
  }

  bool linalg() {
    const int x = operand(1);
    if (x < 0) return false;
    const Shape sx = shape(x);
    const int r = rank(x);
    const int form = uni(0, 3);  // matmul, dot, dot_general, einsum
    if (form <= 1) {
      Shape ps;
      const std::int64_t k = sx.back();
      const int pr = uni(0, 99);
      if (form == 1 && r > 2) {
        ps = pr < 50 ? Shape{k, random_dim()} : Shape{uni(1, 3), k, random_dim()};
      } else if (pr < 25) {
        ps = {k};
      } else if (pr < 65 || r == 1) {
        ps = {k, random_dim()};
        if (r == 1 && pr >= 65) ps.insert(ps.begin(), uni(1, 3));
      } else {
        for (int d = 0; d < r - 2; ++d) ps.push_back(coin(0.3) ? 1 : sx[static_cast<std::size_t>(d)]);
        if (coin(0.2)) ps.insert(ps.begin(), uni(1, 2));
        ps.push_back(k);
        ps.push_back(random_dim());
      }
      if (coin(0.03)) ps[ps.size() >= 2 ? ps.size() - 2 : 0] += 1;  // mismatched contraction
      // Swapped, the new operand is the lhs: its last dim contracts with x's
      // first (or only) one.
      const bool swap = coin(0.2) && ps.size() >= 2;
      if (swap) ps.back() = r == 1 ? sx[0] : sx[static_cast<std::size_t>(r - 2)];
      const Shape& lhs = swap ? ps : sx;
      const Shape& rhs = swap ? sx : ps;
      // known: matmul with a zero-size batch dim crashes in cblas (gemm.cpp);
      // re-enable zero-size batch dims once that fix is merged.
      if (form == 0 && lhs.size() >= 3 && std::find(lhs.begin(), lhs.end() - 2, 0) != lhs.end() - 2) return false;
      if (form == 0 && rhs.size() >= 3 && std::find(rhs.begin(), rhs.end() - 2, 0) != rhs.end() - 2) return false;
      std::int64_t out = 1;
      for (auto d : lhs) out *= std::max<std::int64_t>(d, 1);
      for (auto d : rhs) out *= std::max<std::int64_t>(d, 1);
      if (out > kMaxResult * 16) return false;
      const int p = source(ps, coin(0.75) ? dtype(x) : random_dtype(), true, spec(static_cast<int>(ps.size())));
      if (p < 0) return false;
      const int a = swap ? p : x, b = swap ? x : p;
      const int ra = static_cast<int>(lhs.size()), rb = static_cast<int>(rhs.size());
      int out_rank = ra >= 2 && rb >= 2 ? std::max(ra, rb) : ra == 1 && rb == 1 ? 0 : ra == 1 ? rb - 1 : ra - 1;
      if (form == 1 && (ra > 2 || rb > 2)) out_rank = ra - 1 + std::max(rb - 1, 0);
      const auto o_spec = maybe_out(std::max(out_rank, 0));
      const char* name = form == 0 ? "matmul" : "dot";
      const int o = emit(name, std::string(name) + "(" + vn(a) + ", " + vn(b) + out_text(o_spec) + ")", {a, b},
                         [form, o_spec](const Mesh&, const Args& v) {
                           return form == 0 ? matmul(v[0], v[1], {.out_sharding = o_spec})
                                            : dot(v[0], v[1], {.out_sharding = o_spec});
                         });
      if (o >= 0) set_dot_err(o, a, b, static_cast<double>(lhs.back()));
      return true;
    }
    // dot_general / einsum: each dim of x is batch, contracting or free.
    std::vector<int> role(static_cast<std::size_t>(r));  // 0 free, 1 batch, 2 contracting
    for (auto& q : role) q = pick(std::vector<int>{0, 0, 1, 2, 2});
    struct PDim { int xdim; std::int64_t size; };  // xdim -1: a free dim of the new operand
    std::vector<PDim> pd;
    for (int d = 0; d < r; ++d)
      if (role[static_cast<std::size_t>(d)] != 0) pd.push_back({d, sx[static_cast<std::size_t>(d)]});
    for (int i = uni(0, 2); i > 0; --i) pd.push_back({-1, random_dim()});
    std::shuffle(pd.begin(), pd.end(), rng_);
    Shape ps;
    for (const auto& q : pd) ps.push_back(q.size);
    std::int64_t out = 1;
    double k = 1;
    for (int d = 0; d < r; ++d) {
      if (role[static_cast<std::size_t>(d)] == 2) k *= static_cast<double>(sx[static_cast<std::size_t>(d)]);
      else out *= sx[static_cast<std::size_t>(d)];
    }
    for (const auto& q : pd)
      if (q.xdim < 0) out *= q.size;
    if (out > kMaxResult || numel(ps) > kMaxResult) return false;
    const int p = source(ps, coin(0.75) ? dtype(x) : random_dtype(), true, spec(static_cast<int>(ps.size())));
    if (p < 0) return false;
    if (form == 2) {
      DotDims dims;
      for (int pass = 1; pass <= 2; ++pass)
        for (std::size_t j = 0; j < pd.size(); ++j) {
          if (pd[j].xdim < 0 || role[static_cast<std::size_t>(pd[j].xdim)] != pass) continue;
          (pass == 1 ? dims.lhs_batch : dims.lhs_contracting).push_back(pd[j].xdim);
          (pass == 1 ? dims.rhs_batch : dims.rhs_contracting).push_back(static_cast<int>(j));
        }
      const int nout = static_cast<int>(dims.lhs_batch.size()) + (r - static_cast<int>(dims.lhs_batch.size()) -
                                                                  static_cast<int>(dims.lhs_contracting.size())) +
                       static_cast<int>(pd.size() - dims.rhs_batch.size() - dims.rhs_contracting.size());
      const auto o_spec = maybe_out(nout);
      const std::string text = "dot_general(" + vn(x) + ", " + vn(p) + ", contract=" + ints_text(dims.lhs_contracting) +
                               "/" + ints_text(dims.rhs_contracting) + ", batch=" + ints_text(dims.lhs_batch) + "/" +
                               ints_text(dims.rhs_batch) + out_text(o_spec) + ")";
      const int o = emit("dot_general", text, {x, p}, [dims, o_spec](const Mesh&, const Args& v) {
        return dot_general(v[0], v[1], dims, {.out_sharding = o_spec});
      });
      if (o >= 0) set_dot_err(o, x, p, k);
      return true;
    }
    std::string lx, lp, lo;
    char next = 'a';
    std::vector<char> xl(static_cast<std::size_t>(r));
    for (int d = 0; d < r; ++d) xl[static_cast<std::size_t>(d)] = next++;
    std::vector<char> outl;
    for (int d = 0; d < r; ++d) {
      lx += xl[static_cast<std::size_t>(d)];
      if (role[static_cast<std::size_t>(d)] != 2) outl.push_back(xl[static_cast<std::size_t>(d)]);
    }
    for (const auto& q : pd) {
      const char c = q.xdim >= 0 ? xl[static_cast<std::size_t>(q.xdim)] : next++;
      lp += c;
      if (q.xdim < 0) outl.push_back(c);
    }
    std::shuffle(outl.begin(), outl.end(), rng_);
    lo.assign(outl.begin(), outl.end());
    const std::string subs = lx + "," + lp + "->" + lo;
    const auto o_spec = maybe_out(static_cast<int>(lo.size()));
    const int o = emit("einsum", "einsum(\"" + subs + "\", " + vn(x) + ", " + vn(p) + out_text(o_spec) + ")", {x, p},
                       [subs, o_spec](const Mesh&, const Args& v) {
                         return einsum(subs, v[0], v[1], {.out_sharding = o_spec});
                       });
    if (o >= 0) set_dot_err(o, x, p, k);
    return true;
  }

  // ------------------------------------------------------------------ shape
  bool shape_op() {
    const int x = operand(0);
    if (x < 0) return false;
    const Shape sx = shape(x);
    const int r = rank(x);
    const double e = st(x).err;
    auto done = [&](int o) {
      set_err(o, e);
      return true;
    };
    switch (uni(0, 11)) {
      case 0: {  // reshape
        const std::int64_t n = numel(sx);
        Shape to;
        std::int64_t rest = n;
        const int nr = uni(0, 4);
        for (int i = 0; i < nr - 1; ++i) {
          if (rest == 0) {
            to.push_back(uni(0, 3));
            continue;
          }
          std::vector<std::int64_t> divs;
          for (std::int64_t d = 1; d <= rest; ++d)
            if (rest % d == 0) divs.push_back(d);
          const std::int64_t d = pick(divs);
          to.push_back(d);
          rest /= d;
        }
        if (nr > 0) to.push_back(rest);
        if (n == 0 && nr > 0 && std::find(to.begin(), to.end(), 0) == to.end()) to[0] = 0;
        if (nr == 0 && n != 1) to.push_back(n);
        if (!to.empty() && n > 0 && coin(0.15)) to[static_cast<std::size_t>(uni(0, static_cast<int>(to.size()) - 1))] = -1;
        if (coin(0.03)) to.push_back(2);  // wrong element count
        // Explicit axes: whether the layout can be kept depends on the block
        // sizes, so without out_sharding only the sharded run may raise.
        const auto out = explicit_ || coin(0.1) ? std::optional<PartitionSpec>(spec(static_cast<int>(to.size())))
                                                : std::nullopt;
        return done(emit("reshape", "reshape(" + vn(x) + ", " + shape_str(to) + out_text(out) + ")", {x},
                         [to, out](const Mesh&, const Args& a) { return reshape(a[0], to, {.out_sharding = out}); }));
      }
      case 1: {  // transpose
        std::vector<int> perm(static_cast<std::size_t>(r));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng_);
        if (coin(0.3)) perm.clear();
        if (coin(0.02)) perm.push_back(r);
        return done(emit("transpose", "transpose(" + vn(x) + ", " + ints_text(perm) + ")", {x},
                         [perm](const Mesh&, const Args& a) { return transpose(a[0], perm); }));
      }
      case 2: {
        if (r == 0) return false;
        const int a1 = uni(-r, r - 1), a2 = uni(-r, r - 1);
        return done(emit("swapaxes", "swapaxes(" + vn(x) + ", " + std::to_string(a1) + ", " + std::to_string(a2) + ")",
                         {x}, [a1, a2](const Mesh&, const Args& a) { return swapaxes(a[0], a1, a2); }));
      }
      case 3: {
        if (coin(0.5)) {
          const int ax = uni(-r - 1, r);
          return done(emit("expand_dims", "expand_dims(" + vn(x) + ", " + std::to_string(ax) + ")", {x},
                           [ax](const Mesh&, const Args& a) { return expand_dims(a[0], ax); }));
        }
        std::vector<int> ax;
        for (int d = 0; d < r; ++d)
          if ((sx[static_cast<std::size_t>(d)] == 1 || coin(0.02)) && coin(0.7)) ax.push_back(coin(0.3) ? d - r : d);
        return done(emit("squeeze", "squeeze(" + vn(x) + ", " + ints_text(ax) + ")", {x},
                         [ax](const Mesh&, const Args& a) { return squeeze(a[0], ax); }));
      }
      case 4: {  // broadcast_to
        Shape to;
        for (int i = coin(0.5) ? uni(1, 2) : 0; i > 0; --i) to.push_back(uni(1, 4));
        for (auto d : sx) to.push_back(d == 1 && coin(0.5) ? uni(0, 5) : d);
        if (coin(0.03) && !to.empty()) to.back() += 1;
        if (numel(to) > kMaxResult) return false;
        return done(emit("broadcast_to", "broadcast_to(" + vn(x) + ", " + shape_str(to) + ")", {x},
                         [to](const Mesh&, const Args& a) { return broadcast_to(a[0], to); }));
      }
      case 5: {  // slice
        std::vector<SliceSpec> sl;
        std::string t;
        const int ns = coin(0.8) ? r : uni(0, r);
        for (int d = 0; d < ns; ++d) {
          const std::int64_t n = sx[static_cast<std::size_t>(d)];
          SliceSpec s;
          if (coin(0.6)) s.start = uni(static_cast<int>(-n - 2), static_cast<int>(n + 2));
          if (coin(0.6)) s.stop = uni(static_cast<int>(-n - 2), static_cast<int>(n + 2));
          s.step = pick(std::vector<std::int64_t>{1, 1, 1, 2, 3, -1, -2});
          if (coin(0.01)) s.step = 0;
          sl.push_back(s);
          if (d) t += ", ";
          t += (s.start ? std::to_string(*s.start) : "") + ":" +
               (s.stop ? std::to_string(*s.stop) : "") + ":" + std::to_string(s.step);
        }
        return done(emit("slice", vn(x) + "[" + t + "]", {x}, [sl](const Mesh&, const Args& a) { return slice(a[0], sl); }));
      }
      case 6: case 7: {  // concatenate / stack
        const bool stack_op = coin(0.35);
        if (!stack_op && r == 0) return false;
        const int axis = stack_op ? uni(-r - 1, r) : uni(-r, r - 1);
        const int ad = axis < 0 ? axis + r : axis;
        std::vector<int> ids{x};
        double err = e;
        for (int i = uni(0, 2); i > 0; --i) {
          if (coin(0.25)) {
            ids.push_back(x);
            continue;
          }
          Shape ps = sx;
          if (!stack_op && ad >= 0 && ad < r) ps[static_cast<std::size_t>(ad)] = uni(0, 4);
          if (coin(0.02) && !ps.empty()) ps[0] += 1;
          const int p = source(ps, coin(0.8) ? dtype(x) : random_dtype(), true, partner_spec(x, ps));
          if (p < 0) return false;
          ids.push_back(p);
        }
        std::shuffle(ids.begin(), ids.end(), rng_);
        std::string t;
        for (std::size_t i = 0; i < ids.size(); ++i) {
          if (i) t += ", ";
          t += vn(ids[i]);
        }
        const char* name = stack_op ? "stack" : "concatenate";
        const int o = emit(name, std::string(name) + "({" + t + "}, " + std::to_string(axis) + ")", ids,
                           [stack_op, axis](const Mesh&, const Args& a) {
                             return stack_op ? stack(a, axis) : concatenate(a, axis);
                           });
        set_err(o, err);
        return true;
      }
      case 8: {  // pad
        std::vector<std::pair<std::int64_t, std::int64_t>> w;
        std::string t;
        for (int d = 0; d < r; ++d) {
          w.emplace_back(uni(0, 3), uni(0, 3));
          if (coin(0.01)) w.back().first = -1;
          if (d) t += ", ";
          t += "(" + std::to_string(w.back().first) + "," + std::to_string(w.back().second) + ")";
        }
        if (coin(0.02)) w.emplace_back(1, 1);
        const Sc c = random_scalar();
        std::int64_t out = 1;
        for (int d = 0; d < r; ++d) out *= sx[static_cast<std::size_t>(d)] + 6;
        if (out > kMaxResult * 4) return false;
        return done(emit("pad", "pad(" + vn(x) + ", {" + t + "}, " + c.text + ")", {x},
                         [w, c](const Mesh&, const Args& a) { return pad(a[0], w, c.value); }));
      }
      case 9: case 10: {
        if (r == 0) return false;
        const int ax = uni(-r, r - 1);
        if (coin(0.5)) {
          const std::int64_t n = sx[static_cast<std::size_t>((ax + r) % r)];
          const std::int64_t shift = uni(static_cast<int>(-2 * n - 1), static_cast<int>(2 * n + 1));
          return done(emit("roll", "roll(" + vn(x) + ", " + std::to_string(shift) + ", " + std::to_string(ax) + ")", {x},
                           [shift, ax](const Mesh&, const Args& a) { return roll(a[0], shift, ax); }));
        }
        return done(emit("flip", "flip(" + vn(x) + ", " + std::to_string(ax) + ")", {x},
                         [ax](const Mesh&, const Args& a) { return flip(a[0], ax); }));
      }
      default: {  // reshard / with_sharding_constraint / device_put
        const PartitionSpec sp = spec(r);
        if (coin(0.05)) {
          // Operands on different meshes: every layout must refuse.
          return done(emit("device_put.other_mesh",
                           "add(device_put(" + vn(x) + ", NamedSharding(other devices, " + spec_text(sp) + ")), " +
                               vn(x) + ")",
                           {x}, [sp](const Mesh& m, const Args& a) {
                             return add(device_put(a[0], NamedSharding(shifted_mesh(m), sp)), a[0]);
                           }));
        }
        if (coin(0.25)) {
          // Through a mesh of other devices (moved via the host) and back.
          const PartitionSpec there = spec(r);
          return done(emit("device_put.other_mesh",
                           "device_put(device_put(" + vn(x) + ", NamedSharding(other devices, " + spec_text(there) +
                               ")), " + spec_text(sp) + ")",
                           {x}, [there, sp](const Mesh& m, const Args& a) {
                             return device_put(device_put(a[0], NamedSharding(shifted_mesh(m), there)),
                                               NamedSharding(m, sp));
                           }));
        }
        const int how = uni(0, 2);
        const char* names[] = {"reshard", "with_sharding_constraint", "device_put"};
        return done(emit(names[how], std::string(names[how]) + "(" + vn(x) + ", " + spec_text(sp) + ")", {x},
                         [how, sp](const Mesh& m, const Args& a) {
                           if (how == 0) return reshard(a[0], sp);
                           if (how == 1) return with_sharding_constraint(a[0], NamedSharding(m, sp));
                           return device_put(a[0], NamedSharding(m, sp));
                         }));
      }
    }
  }

  // ------------------------------------------------------ stencils and scans
  bool stencil() {
    const int kind = uni(0, 4);
    if (kind == 4) return interp_op();
    const int x = operand(kind == 3 ? 2 : 1);
    if (x < 0) return false;
    const Shape sx = shape(x);
    const int r = rank(x);
    const Stats s = stats(x);
    const int ax = r == 0 ? 0 : uni(-r, r - 1);
    const int ad = r == 0 ? 0 : (ax + r) % r;
    const std::int64_t len = r == 0 ? 1 : sx[static_cast<std::size_t>(ad)];
    if (kind == 0) {  // diff
      const int n = pick(std::vector<int>{0, 1, 1, 1, 2, 3});
      std::vector<int> args{x};
      int pre = -1, app = -1;
      for (int side = 0; side < 2; ++side) {
        if (!coin(0.3)) continue;
        Shape ps = sx;
        if (r > 0) ps[static_cast<std::size_t>(ad)] = uni(0, 2);
        const int id = source(ps, coin(0.8) ? dtype(x) : random_dtype(), true, partner_spec(x, ps));
        if (id < 0) return false;
        (side == 0 ? pre : app) = id;
        args.push_back(id);
      }
      std::string text = "diff(" + vn(x) + ", " + std::to_string(n) + ", " + std::to_string(ax) +
                         (pre >= 0 ? ", prepend=" + vn(pre) : "") + (app >= 0 ? ", append=" + vn(app) : "") + ")";
      const bool hp = pre >= 0, ha = app >= 0;
      const int o = emit("diff", text, args, [n, ax, hp, ha](const Mesh&, const Args& a) {
        DiffOptions opt;
        if (hp) opt.prepend = a[1];
        if (ha) opt.append = a[hp ? 2 : 1];
        return diff(a[0], n, ax, opt);
      });
      double e = s.err;
      for (int id : args) e = std::max(e, st(id).err);
      if (o >= 0 && e > 0) set_err(o, std::ldexp(e, n) + 2 * n * slack(o) + 2 * slack(o));
      return true;
    }
    if (kind == 1) {  // cumsum
      const int o = emit("cumsum", "cumsum(" + vn(x) + ", " + std::to_string(ax) + ")", {x},
                         [ax](const Mesh&, const Args& a) { return cumsum(a[0], ax); });
      if (o >= 0) set_sum_err(o, static_cast<double>(len), s.maxabs, s.grid, static_cast<double>(len) * s.err);
      return true;
    }
    if (kind == 2) {  // convolve
      const std::int64_t kl = coin(0.03) ? 0 : uni(1, 5);
      const int k = source({kl}, coin(0.8) ? dtype(x) : random_dtype(), true, spec(1));
      if (k < 0) return false;
      const int o = emit("convolve", "convolve(" + vn(x) + ", " + vn(k) + ", " + std::to_string(ax) + ")", {x, k},
                         [ax](const Mesh&, const Args& a) { return convolve(a[0], a[1], ax); });
      // Each output sums its taps in a fixed order, whatever the layout.
      if (o >= 0 && (!exact(x) || !exact(k))) set_dot_err(o, x, k, static_cast<double>(kl));
      return true;
    }
    const Shape ks{uni(1, 4), uni(1, 4)};
    const int k = source(coin(0.03) ? Shape{3} : ks, coin(0.8) ? dtype(x) : random_dtype(), true, spec(2));
    if (k < 0) return false;
    const int o = emit("convolve2d", "convolve2d(" + vn(x) + ", " + vn(k) + ")", {x, k},
                       [](const Mesh&, const Args& a) { return convolve2d(a[0], a[1]); });
    if (o >= 0 && (!exact(x) || !exact(k))) set_dot_err(o, x, k, static_cast<double>(numel(ks)));
    return true;
  }

  bool interp_op() {
    const int x = operand(0, true);
    if (x < 0) return false;
    const int n = coin(0.03) ? 0 : uni(1, 8);
    std::vector<double> xp, fp;
    double at = uni(-6, 0) / 2.0;
    for (int i = 0; i < n; ++i) {
      xp.push_back(at);
      at += uni(1, 6) / 4.0;
      fp.push_back(uni(-16, 16) / 4.0);
    }
    const DType t = coin(0.8) ? DType::f32 : random_dtype();
    const int a = source_data({n}, t, xp, spec(1), "xp");
    const int b = source_data({n}, t, fp, spec(1), "fp");
    if (a < 0 || b < 0) return false;
    emit("interp", "interp(" + vn(x) + ", " + vn(a) + ", " + vn(b) + ")", {x, a, b},
         [](const Mesh&, const Args& v) { return interp(v[0], v[1], v[2]); });
    return true;
  }

  // --------------------------------------------------------------- indexing
  int index_source(std::int64_t len, std::int64_t lo, std::int64_t hi) {
    std::vector<double> ix;
    for (std::int64_t i = 0; i < len; ++i) ix.push_back(static_cast<double>(hi > lo ? uni(static_cast<int>(lo), static_cast<int>(hi - 1)) : lo));
    const DType t = coin(0.97) ? pick(std::vector<DType>{DType::i32, DType::i64}) : random_dtype();
    return source_data({len}, t, ix, spec(1), "indices");
  }

  bool indexing() {
    const int kind = uni(0, 2);
    const int x = operand(1);
    if (x < 0) return false;
    const Shape sx = shape(x);
    const int r = rank(x);
    if (kind == 0) {  // take
      const int ax = uni(-r, r - 1);
      const std::int64_t n = sx[static_cast<std::size_t>((ax + r) % r)];
      const std::int64_t len = uni(0, 8);
      // Rarely out of range, which raises on every layout.
      const int idx = index_source(n == 0 ? (coin(0.9) ? 0 : len) : len, coin(0.03) ? -n - 1 : 0, coin(0.03) ? n + 1 : n);
      if (idx < 0) return false;
      const int o = emit("take", "take(" + vn(x) + ", " + vn(idx) + ", " + std::to_string(ax) + ")", {x, idx},
                         [ax](const Mesh&, const Args& a) { return take(a[0], a[1], ax); });
      set_err(o, st(x).err);
      return true;
    }
    const std::int64_t len = kind == 1 ? uni(0, 9) : sx[0];
    if (kind == 1) {  // scatter_add; out-of-range rows are dropped
      const int idx = index_source(len, -1, sx[0] + 1);
      Shape us = sx;
      us[0] = len;
      if (coin(0.02)) us[0] += 1;
      const int u = source(us, coin(0.8) ? dtype(x) : random_dtype(), true, spec(r));
      if (idx < 0 || u < 0) return false;
      const auto out = maybe_out(r);
      const int o = emit("scatter_add", "scatter_add(" + vn(x) + ", " + vn(idx) + ", " + vn(u) + out_text(out) + ")",
                         {x, idx, u}, [out](const Mesh&, const Args& a) {
                           return scatter_add(a[0], a[1], a[2], {.out_sharding = out});
                         });
      if (o >= 0) {
        const Step &sx_ = st(x), &su = st(u);
        const int g = sx_.grid >= 0 && su.grid >= 0 ? std::max(sx_.grid, su.grid) : -1;
        set_sum_err(o, static_cast<double>(len + 1), std::max(sx_.maxabs, su.maxabs), g,
                    sx_.err + static_cast<double>(len) * su.err);
      }
      return true;
    }
    const std::int64_t ns = uni(0, 6);
    const int ids = index_source(len + (coin(0.02) ? 1 : 0), -1, ns + 1);
    if (ids < 0) return false;
    const auto out = maybe_out(r);
    const int o = emit("segment_sum", "segment_sum(" + vn(x) + ", " + vn(ids) + ", " + std::to_string(ns) + out_text(out) + ")",
                       {x, ids}, [ns, out](const Mesh&, const Args& a) {
                         return segment_sum(a[0], a[1], ns, {.out_sharding = out});
                       });
    if (o >= 0) set_sum_err(o, static_cast<double>(len), st(x).maxabs, st(x).grid, static_cast<double>(len) * st(x).err);
    return true;
  }

  // -------------------------------------------------------------- shard_map
  // Bodies whose global result does not depend on the mesh, so the
  // one-device run is the reference: each undoes its own distribution.
  int parts(const PartitionSpec& sp, int d) const {
    int n = 1;
    for (const auto& a : sp[d].axes()) n *= p_.mesh.axis_size(a);
    return n;
  }
  std::vector<std::string> spec_axes(const PartitionSpec& sp, int r) const {
    std::vector<std::string> out;
    for (int d = 0; d < r; ++d)
      for (const auto& a : sp[d].axes()) out.push_back(a);
    return out;
  }
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

  // Two inputs with the same spec have the same blocks: an elementwise body
  // gives the global result (each input resharded to the spec first).
  bool shard_map_two_inputs(int x, const PartitionSpec& in) {
    const int y = source(shape(x), coin(0.7) ? dtype(x) : random_dtype(), true, spec(rank(x)));
    if (y < 0) return false;
    const int f = uni(0, 2);
    const char* texts[] = {"xl + yl", "maximum(xl, yl)", "xl * yl"};
    const std::string text = std::string("shard_map([](xl, yl) { return ") + texts[f] + "; }, in={" + spec_text(in) +
                             ", " + spec_text(in) + "}, out=" + spec_text(in) + ")(" + vn(x) + ", " + vn(y) + ")";
    const int o = emit("shard_map.two_inputs", text, {x, y}, [in, f](const Mesh& m, const Args& a) {
      auto g = shard_map(
          [f](Array xl, Array yl) { return f == 0 ? xl + yl : f == 1 ? maximum(xl, yl) : xl * yl; }, m, {in, in}, in);
      return g(a[0], a[1]);
    });
    if (o >= 0 && (!exact(x) || !exact(y))) {
      const double ex = st(x).err, ey = st(y).err;
      set_err(o, (f == 0 ? ex + ey : f == 1 ? std::max(ex, ey) : ex * (st(y).maxabs + ey) + ey * st(x).maxabs) +
                     2 * slack(o));
    }
    return true;
  }

  bool shard_map_op() {
    const int kind = uni(0, 7);
    const int x = operand(kind == 0 || kind == 2 ? 0 : 1, kind == 2);
    if (x < 0) return false;
    const Shape sx = shape(x);
    const int r = rank(x);
    const Stats s = stats(x);
    PartitionSpec in = testing::random_spec(rng_, p_.mesh, r);
    const auto axes = spec_axes(in, r);
    switch (kind) {
      case 0: {  // local work: out_specs = in_specs
        std::vector<int> whole;  // dims the spec leaves whole
        for (int d = 0; d < r; ++d)
          if (in[d].is_none()) whole.push_back(d);
        if (!whole.empty() && coin(0.4)) {
          const int d = pick(whole), f = uni(0, 2);
          const char* texts[] = {"cumsum(xl, D)", "sum(xl, D, keepdims)", "flip(xl, D)"};
          std::string t = texts[f];
          t.replace(t.find('D'), 1, std::to_string(d));
          const int o = smap("shard_map.local", "[](xl) { return " + t + "; }", x, in, in, [f, d](Array xl) {
            return f == 0 ? cumsum(xl, d) : f == 1 ? sum(xl, d, {.keepdims = true}) : flip(xl, d);
          });
          const double len = static_cast<double>(sx[static_cast<std::size_t>(d)]);
          if (f == 2) set_err(o, s.err);
          else set_sum_err(o, len, s.maxabs, s.grid, len * s.err);
          return true;
        }
        if (coin(0.3)) return shard_map_two_inputs(x, in);
        const int f = uni(0, 2);
        const char* texts[] = {"[](xl) { return 2 * sin(xl) + 1; }", "[](xl) { return xl * xl - xl; }",
                               "[](xl) { return abs(negative(xl)); }"};
        const int o = smap("shard_map.local", texts[f], x, in, in, [f](Array xl) {
          return f == 0 ? 2.0 * sin(xl) + 1.0 : f == 1 ? xl * xl - xl : abs(negative(xl));
        });
        if (o >= 0 && !exact(x)) set_err(o, (f == 1 ? s.err * (2 * s.maxabs + 1 + s.err) : 2 * s.err) + 4 * slack(o));
        return true;
      }
      case 1: {  // psum of local sums: the global sum
        const int o = smap("psum", "[](xl) { return psum(sum(xl), " + names_text(axes) + "); }", x, in, P(),
                           [axes](Array xl) { return axes.empty() ? sum(xl) : psum(sum(xl), axes); });
        set_sum_err(o, static_cast<double>(numel(sx)), s.maxabs, s.grid, static_cast<double>(numel(sx)) * s.err);
        return true;
      }
      case 2: {  // pmax / pmin of local max / min: needs every block non-empty
        if (numel(sx) == 0 || axes.empty()) return false;
        for (int d = 0; d < r; ++d)
          if (sx[static_cast<std::size_t>(d)] < parts(in, d)) return false;
        const bool is_max = coin(0.5);
        const int o = smap(is_max ? "pmax" : "pmin",
                           std::string("[](xl) { return ") + (is_max ? "pmax(max" : "pmin(min") + "(xl), " +
                               names_text(axes) + "); }",
                           x, in, P(), [axes, is_max](Array xl) { return is_max ? pmax(max(xl), axes) : pmin(min(xl), axes); });
        set_err(o, s.err);
        return true;
      }
      case 3: {  // pmean of local sums, times the group size: the global sum
        if (axes.empty() || !is_float(dtype(x))) return false;
        const int o = smap("pmean",
                           "[](xl) { return pmean(sum(xl), " + names_text(axes) + ") * group size; }", x, in, P(),
                           [axes](Array xl) {
                             int n = 1;
                             for (const auto& a : axes) n *= axis_size(a);
                             return pmean(sum(xl), axes) * n;
                           });
        if (o >= 0) {
          const double m = static_cast<double>(numel(sx));
          set_err(o, m * s.err + 2 * m * m * unit_roundoff(dtype(o)) * s.maxabs + 8 * slack(o));
        }
        return true;
      }
      case 4: {  // all_gather, tiled, along a sharded dim: the whole dim back
        std::vector<int> dims;
        for (int d = 0; d < r; ++d)
          if (!in[d].is_none()) dims.push_back(d);
        if (dims.empty()) return false;
        const int d = pick(dims);
        const auto ga = in[d].axes();
        const PartitionSpec out = with_entry(in, r, d, none);
        if (coin(0.3)) {
          // Untiled gather of the local sums, then their sum.
          if (spec_axes(in, r).size() != ga.size()) return false;
          const int o = smap("all_gather", "[](xl) { return sum(all_gather(sum(xl), " + names_text(ga) + ")); }", x, in,
                             P(), [ga](Array xl) { return sum(all_gather(sum(xl), ga, 0, false)); });
          set_sum_err(o, static_cast<double>(numel(sx)), s.maxabs, s.grid, static_cast<double>(numel(sx)) * s.err);
          return true;
        }
        const int o = smap("all_gather",
                           "[](xl) { return all_gather(xl, " + names_text(ga) + ", " + std::to_string(d) + ", tiled); }",
                           x, in, out, [ga, d](Array xl) { return all_gather(xl, ga, d, true); });
        set_err(o, s.err);
        return true;
      }
      case 5: {  // psum_scatter of (x on the group's first device, zeros elsewhere)
        if (dtype(x) == DType::bool_) return false;
        std::vector<int> dims;
        for (int d = 0; d < r; ++d)
          if (in[d].is_none()) dims.push_back(d);
        std::vector<std::string> free_axes;
        for (const auto& a : p_.mesh.axis_names())
          if (std::find(axes.begin(), axes.end(), a) == axes.end() && coin(0.7)) free_axes.push_back(a);
        if (dims.empty() || free_axes.empty()) return false;
        const int d = pick(dims);
        const PartitionSpec out = with_entry(in, r, d, PartitionSpec::Entry(free_axes));
        const int o = smap("psum_scatter",
                           "[](xl) { return psum_scatter(where(all axis_index(a) == 0 for a in " + names_text(free_axes) +
                               ", xl, -0.0), " + names_text(free_axes) + ", " + std::to_string(d) + ", tiled); }",
                           x, in, out, [free_axes, d](Array xl) {
                             Array first = axis_index(free_axes[0]) == 0;
                             for (std::size_t i = 1; i < free_axes.size(); ++i)
                               first = logical_and(first, axis_index(free_axes[i]) == 0);
                             // -0.0 is the exact identity of float addition (x + -0.0 keeps
                             // the sign of a zero x), so the sum is x bit for bit.
                             const Scalar zero = is_float(xl.dtype()) ? Scalar(-0.0) : Scalar(0);
                             return psum_scatter(where(first, xl, zero), free_axes, d, true);
                           });
        set_err(o, s.err);
        return true;
      }
      case 6: {  // ppermute there and back: needs equal blocks along the axis
        const auto& names = p_.mesh.axis_names();
        // Mostly an axis the input varies over (ppermute keeps it varying).
        const std::string a = !axes.empty() && coin(0.8) ? pick(axes) : pick(names);
        for (int d = 0; d < r; ++d) {
          const auto& e = in[d].axes();
          if (std::find(e.begin(), e.end(), a) != e.end() && sx[static_cast<std::size_t>(d)] % parts(in, d) != 0) return false;
        }
        // The permutation is built inside the body from the axis size, so the
        // one-device run gets its own (trivial) one.
        const bool rotate = coin(0.5);
        const unsigned perm_seed = static_cast<unsigned>(uni(0, 1 << 20));
        const std::string pt = rotate ? "rotate by 1" : "shuffle(" + std::to_string(perm_seed) + ")";
        const int o = smap("ppermute",
                           "[](xl) { return ppermute(ppermute(xl, '" + a + "', " + pt + "), '" + a + "', inverse); }",
                           x, in, in, [a, rotate, perm_seed](Array xl) {
                             const int n = axis_size(a);
                             std::vector<int> to(static_cast<std::size_t>(n));
                             std::iota(to.begin(), to.end(), 0);
                             if (rotate) std::rotate(to.begin(), to.begin() + 1, to.end());
                             else std::shuffle(to.begin(), to.end(), std::mt19937(perm_seed));
                             std::vector<std::pair<int, int>> fwd, back;
                             for (int i = 0; i < n; ++i) {
                               fwd.emplace_back(i, to[static_cast<std::size_t>(i)]);
                               back.emplace_back(to[static_cast<std::size_t>(i)], i);
                             }
                             return ppermute(ppermute(xl, a, fwd), a, back);
                           },
                           // ppermute marks its result varying over the axis, even when
                           // the input was the same on every device of it.
                           std::find(axes.begin(), axes.end(), a) != axes.end());
        set_err(o, s.err);
        return true;
      }
      default: {  // all_to_all: rows sharded over one axis -> columns sharded over it
        if (r < 2) return false;
        const int d0 = uni(0, r - 1);
        int d1 = uni(0, r - 2);
        if (d1 >= d0) ++d1;
        const std::string a = pick(p_.mesh.axis_names());
        std::vector<PartitionSpec::Entry> e;
        for (int d = 0; d < r; ++d) {
          const auto& ax = in[d].axes();
          const bool uses_a = std::find(ax.begin(), ax.end(), a) != ax.end();
          e.push_back(d == d0 ? PartitionSpec::Entry(a) : d == d1 || uses_a ? PartitionSpec::Entry(none) : in[d]);
        }
        in = PartitionSpec(e);
        if (sx[static_cast<std::size_t>(d0)] % p_.mesh.axis_size(a) != 0) return false;
        const PartitionSpec out = with_entry(with_entry(in, r, d0, none), r, d1, PartitionSpec::Entry(a));
        const int o = smap("all_to_all",
                           "[](xl) { return all_to_all(xl, '" + a + "', " + std::to_string(d1) + ", " +
                               std::to_string(d0) + ", tiled); }",
                           x, in, out, [a, d0, d1](Array xl) { return all_to_all(xl, a, d1, d0, true); });
        set_err(o, s.err);
        return true;
      }
    }
  }

  // ------------------------------------------------------------------ steps
  void step_once() {
    const int k = uni(0, 99);
    if (k < 6) source(random_shape(0), random_dtype(), false);
    else if (k < 18) unary();
    else if (k < 32) binary();
    else if (k < 37) where_or_clip();
    else if (k < 49) reduce();
    else if (k < 57) linalg();
    else if (k < 75) shape_op();
    else if (k < 84) stencil();
    else if (k < 91) indexing();
    else shard_map_op();
  }
};

}  // namespace

Program generate(std::uint64_t seed, const Mesh& mesh, const Mesh& ref_mesh, bool trace) {
  return Gen(seed, mesh, ref_mesh, trace).build();
}

}  // namespace tessera::fuzz
