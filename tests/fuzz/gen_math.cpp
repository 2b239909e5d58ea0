// Generating elementwise ops, reductions and linear algebra.
#include <set>

#include "fuzz/generator.hpp"

namespace tessera::fuzz::gen {

namespace {

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
  Array (*fn)(const Array&, std::source_location);
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

}  // namespace

// ------------------------------------------------------------ elementwise
bool Gen::unary() {
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
                     [f = u.fn](const Mesh&, const Args& a) { return f(a[0], std::source_location{}); });
  if (o >= 0 && !exact(x)) set_err(o, u.lipschitz * st(x).err + 2 * slack(o));
  return true;
}

// A shape that broadcasts with `s` (rarely one that does not).
Shape Gen::broadcast_partner(const Shape& s) {
  Shape p;
  const int drop = coin(0.6) ? 0 : uni(0, static_cast<int>(s.size()));
  for (std::size_t i = static_cast<std::size_t>(drop); i < s.size(); ++i) p.push_back(coin(0.25) ? 1 : s[i]);
  if (coin(0.12))
    for (int i = uni(1, 2); i > 0; --i) p.insert(p.begin(), uni(1, 3));
  if (coin(0.03) && !p.empty()) p[static_cast<std::size_t>(uni(0, static_cast<int>(p.size()) - 1))] += 1;
  return p;
}

// A second operand broadcast-compatible with x: an existing value or a new one.
int Gen::partner(int x, bool need_exact) {
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

bool Gen::binary() {
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

bool Gen::where_or_clip() {
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
bool Gen::reduce() {
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
void Gen::set_dot_err(int o, int a, int b, double k) {
  const Step &sa = st(a), &sb = st(b);
  const int g = sa.grid >= 0 && sb.grid >= 0 ? sa.grid + sb.grid : -1;
  const double e = k * (sa.err * (sb.maxabs + sb.err) + sb.err * sa.maxabs);
  set_sum_err(o, k, sa.maxabs * sb.maxabs, g, e);
}

bool Gen::linalg() {
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

}  // namespace tessera::fuzz::gen
