// Random program generation: the main loop, value bookkeeping and sources
// (see program.hpp for the model, generator.hpp for the parts).
#include <cstdio>

#include "fuzz/generator.hpp"

namespace tessera::fuzz::gen {

Program Gen::build() {
  const int target = uni(2, 9);
  source(random_shape(0), random_dtype());
  for (int guard = 0; static_cast<int>(p_.steps.size()) < target && guard < 100; ++guard) step_once();
  return std::move(p_);
}

std::int64_t Gen::random_dim() {
  const int r = uni(0, 99);
  if (r < 5) return 0;
  if (r < 20) return 1;
  if (r < 45) return uni(2, 4);
  if (r < 75) return pick(std::vector<std::int64_t>{5, 7, 11, 13});
  return uni(2, 16);
}

Shape Gen::random_shape(int min_rank, int max_rank) {
  const int r = std::max(min_rank, std::min(max_rank, pick(std::vector<int>{0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3})));
  Shape s(static_cast<std::size_t>(r));
  for (auto& d : s) d = random_dim();
  // Shrink the largest dims until the array is small.
  while (numel(s) > kMaxElems) *std::max_element(s.begin(), s.end()) /= 2;
  return s;
}

DType Gen::random_dtype() {
  const auto& all = fuzz_dtypes();
  if (coin(0.5)) {
    std::vector<DType> floats;
    for (DType t : all)
      if (is_float(t)) floats.push_back(t);
    return pick(floats);
  }
  return pick(all);
}

PartitionSpec Gen::spec(int rank) {
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
PartitionSpec Gen::aligned_spec(int id, const Shape& s) {
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

PartitionSpec Gen::partner_spec(int like, const Shape& s) {
  return coin(explicit_ ? 0.75 : 0.3) ? aligned_spec(like, s) : spec(static_cast<int>(s.size()));
}

std::optional<PartitionSpec> Gen::maybe_out(int rank) {
  if (coin(explicit_ ? 0.5 : 0.1)) return spec(rank);
  return std::nullopt;
}

Sc Gen::random_scalar(bool for_pow) {
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

std::vector<double> Gen::host_values(std::int64_t n, DType t) {
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

int Gen::emit(std::string op, std::string text, std::vector<int> args, StepFn fn) {
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

void Gen::measure(Step& s) {
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

// Output `id` holds sums of m terms (divided by `div`), each term of
// magnitude <= `term` on grid `g` (-1: none), inputs off by `e` in total.
// Terms on a coarse enough grid make every partial sum exact, so any
// order gives the same bits; otherwise allow the worst rounding of m adds.
void Gen::set_sum_err(int id, double m, double term, int g, double e, double div) {
  if (id < 0 || !is_float(dtype(id))) return;
  const bool exact_sum = e == 0 && g >= 0 && m * term * std::ldexp(1.0, g) < std::ldexp(1.0, significand_bits(dtype(id)) - 1);
  if (exact_sum) return;
  set_err(id, (e + 2 * m * m * unit_roundoff(dtype(id)) * term) / std::max(div, 1.0) + 2 * slack(id));
}

// ---------------------------------------------------------------- sources
int Gen::source_data(const Shape& s, DType t, const std::vector<double>& host, const PartitionSpec& sp,
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
int Gen::source(const Shape& s, DType t, bool exact_shape, std::optional<PartitionSpec> given) {
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

// ------------------------------------------------------------------ steps
// Shapes whose sizes overflow int64 must raise ShapeError on every layout,
// alike. As in NumPy, a zero dim does not excuse the others: the product of
// the nonzero dims (and its bytes) must fit, so every shape made here raises.
constexpr bool kHugeShapes = true;

bool Gen::huge_shape() {
  const std::int64_t h = std::int64_t{1} << uni(31, 62);
  Shape s{h, h};
  if (coin(0.5)) s.push_back(coin(0.3) ? 0 : h);
  const int how = uni(0, 1);
  const PartitionSpec sp = spec(static_cast<int>(s.size()));
  emit(how == 0 ? "zeros" : "broadcast_to",
       how == 0 ? "zeros(" + shape_str(s) + ", f32, " + spec_text(sp) + ")" : "broadcast_to(scalar, " + shape_str(s) + ")",
       {}, [how, s, sp](const Mesh& m, const Args&) {
         return how == 0 ? zeros(s, DType::f32, NamedSharding(m, sp)) : broadcast_to(scalar(1, DType::f32, m), s);
       });
  p_.steps.back().must_raise = true;
  return true;
}

void Gen::step_once() {
  const int k = uni(0, 99);
  if (kHugeShapes && k == 0) huge_shape();
  else if (k < 6) source(random_shape(0), random_dtype(), false);
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

}  // namespace tessera::fuzz::gen

namespace tessera::fuzz {

Program generate(std::uint64_t seed, const Mesh& mesh, const Mesh& ref_mesh, bool trace) {
  return gen::Gen(seed, mesh, ref_mesh, trace).build();
}

}  // namespace tessera::fuzz
