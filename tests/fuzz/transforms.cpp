// The fuzz programs under transformations (see program.hpp).
//
// A program's steps that gave a value in the eager sharded run are replayed
// as one function of some of its steps' values (its "inputs": the sources
// that hold data, and for jit some of the other sources too). That function
// then runs:
//
//   jit      traced, partitioned and fused as one program; every result
//            bitwise equal to the eager run's, layouts' shards included.
//   vmap     over a batch of B examples: example 0 is the program's data,
//            the others permutations of it (the same values, so index
//            operands stay in range and sums on a grid stay exact), each
//            input mapped or not, its batch dim anywhere and sometimes
//            sharded over a mesh axis; every result's slice b bitwise equal
//            to the eager program run on example b.
//   chunked  the same vmap in chunks of 1 or 2 examples: bitwise equal to
//            the unchunked one.
//   jvp      with respect to the float data sources that are finite, along
//            a random direction v: the primal results bitwise equal to
//            eager, and, at a random point x' near x off the data's grid,
//            the tangents of f64 results that depend on the inputs only
//            through f64 values equal to central differences
//            (F(x' + hv) - F(x' - hv)) / 2h within a bound. An element where
//            the forward and backward one-sided differences (or the
//            central ones at h and 2h) disagree is at a kink or a jump, or
//            too curved for h, and is not compared; nor is one downstream
//            of a piecewise-constant value (a comparison, floor) that
//            changes within the differences.
//   vjp      the dot-product test: for random cotangents u of the float
//            results, <u, J v> (from jvp) equals <J^T u, v> (from the
//            pullback) within the rounding of the sums.
//
// Collectives and shard_map bodies are steps like any other, so they run
// under every transformation. A transformation that raises where the eager
// run gave values is a failure.
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "fuzz/program.hpp"
#include "test_util.hpp"

namespace tessera::fuzz {
namespace {

using Bytes = std::vector<unsigned char>;

struct Rng {
  std::mt19937_64 g;
  int uni(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }
  bool coin(double p) { return std::uniform_real_distribution<double>(0, 1)(g) < p; }
  double real(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(g); }
};

// Sources that hold data the program was given (not made by an op).
bool holds_data(const Step& s) {
  return s.args.empty() && (s.op == "device_put" || s.op == "make_array_from_callback");
}

// What the library documents as not differentiable (yet): a clear error,
// so autodiff is not compared for that program.
bool unsupported_derivative(const std::exception& e) {
  const std::string m = e.what();
  return dynamic_cast<const Error*>(&e) != nullptr &&
         (m.find("is not differentiable") != std::string::npos ||
          m.find("differentiating a tiled all_gather of blocks of unequal sizes is not supported") !=
              std::string::npos ||
          (m.find("differentiating a tiled all_to_all whose split axis") != std::string::npos &&
           m.find("is not supported yet") != std::string::npos) ||
          m.find("reverse-mode differentiation is supported for") != std::string::npos);
}

// What the library documents as not batched yet (pmax and pmin of arrays).
bool unsupported_batching(const std::exception& e) {
  const std::string m = e.what();
  return dynamic_cast<const Error*>(&e) != nullptr &&
         m.find("does not support values traced by vmap yet") != std::string::npos;
}

std::string error_text(const char* what, const std::exception& e) {
  const bool ours = dynamic_cast<const Error*>(&e) != nullptr;
  return std::string(what) + (ours ? " raised " : " raised a non-tessera exception ") + e.what();
}

// What a transformation raised: a documented limitation is counted in
// `count` and the check skipped (""); anything else is a failure.
std::string raised(const char* what, const std::exception& e, bool documented, long& count) {
  if (!documented) return error_text(what, e);
  ++count;
  return "";
}

// The steps in `inputs` take the given values, every other step that gave
// a value eagerly is run again on `m`; returns those steps' values in order.
std::vector<Array> replay(const Program& p, const std::vector<Outcome>& eager, const std::vector<int>& inputs,
                          const std::vector<Array>& in, const Mesh& m) {
  std::vector<std::optional<Array>> v(p.steps.size());
  for (std::size_t k = 0; k < inputs.size(); ++k) v[static_cast<std::size_t>(inputs[k])] = in[k];
  std::vector<Array> out;
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    if (v[i] || !eager[i].value) continue;
    // A move to other devices cannot happen inside a transformed function
    // (device_put raises, saying so): the moved value is a constant there.
    if (p.steps[i].op == "device_put.other_mesh") {
      v[i] = *eager[i].value;
      out.push_back(*v[i]);
      continue;
    }
    std::vector<Array> args;
    for (int a : p.steps[i].args) args.push_back(*v[static_cast<std::size_t>(a)]);
    v[i] = p.steps[i].fn(m, args);
    out.push_back(*v[i]);
  }
  return out;
}

// The steps replay() returns, for `inputs`.
std::vector<int> outputs_of(const Program& p, const std::vector<Outcome>& eager, const std::vector<int>& inputs) {
  std::vector<int> out;
  for (std::size_t i = 0; i < p.steps.size(); ++i)
    if (eager[i].value && std::find(inputs.begin(), inputs.end(), static_cast<int>(i)) == inputs.end())
      out.push_back(static_cast<int>(i));
  return out;
}

detail::TraceFn replay_fn(const Program& p, const std::vector<Outcome>& eager, const std::vector<int>& inputs) {
  return [&p, &eager, inputs](const std::vector<Array>& in, std::any& tree) {
    return detail::flatten_result(replay(p, eager, inputs, in, p.mesh), tree);
  };
}

std::vector<double> doubles(const Bytes& b, DType t) {
  return as_doubles(b, t, static_cast<std::int64_t>(b.size() / itemsize(t)));
}

// "" when `got` holds the same bits as `want` (of shape `shape`); else the
// first element that differs.
std::string bitwise(const Bytes& got, const Bytes& want, DType t, const Shape& shape) {
  if (got.size() != want.size())
    return std::to_string(got.size()) + " bytes where " + std::to_string(want.size()) + " were expected";
  const std::size_t w = itemsize(t);
  if (got == want) return "";
  const auto gd = doubles(got, t), wd = doubles(want, t);
  for (std::size_t i = 0; i * w < got.size(); ++i)
    // A NaN is a NaN: its sign and payload depend on the order of the
    // operations that made it (as in NumPy, which prints both as nan).
    if (std::memcmp(got.data() + i * w, want.data() + i * w, w) != 0 && !(std::isnan(gd[i]) && std::isnan(wd[i]))) {
      std::ostringstream os;
      os.precision(17);
      os << "element " << index_text(shape, static_cast<std::int64_t>(i)) << ": " << gd[i] << " where " << wd[i]
         << " was expected";
      return os.str();
    }
  return "";
}

// As bitwise(), but float elements may differ by `tol` (plus a few ulps);
// NaN matches NaN.
std::string close(const Bytes& got, const Bytes& want, DType t, const Shape& shape, double tol) {
  if (tol == 0 || !is_float(t) || got.size() != want.size()) return bitwise(got, want, t, shape);
  const auto gd = doubles(got, t), wd = doubles(want, t);
  const double u = unit_roundoff(t);
  for (std::size_t i = 0; i < gd.size(); ++i) {
    const double g = gd[i], w = wd[i];
    const bool same =
        (std::isnan(g) && std::isnan(w)) || g == w ||
        (std::isfinite(g) && std::isfinite(w) && std::abs(g - w) <= tol + 4 * u * std::max(std::abs(g), std::abs(w)));
    if (!same) {
      std::ostringstream os;
      os.precision(17);
      os << "element " << index_text(shape, static_cast<std::int64_t>(i)) << ": " << g << " where " << w
         << " was expected (allowed difference " << tol << ")";
      return os.str();
    }
  }
  return "";
}

// A result of a transformation against the eager value of step `i`: same
// type, shards holding their blocks, and the same bits.
std::string same_as_eager(const Array& got, const Array& want, const Bytes& want_bytes) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype())
    return "result " + dtype_name(got.dtype()) + shape_str(got.shape()) + ", eager " + dtype_name(want.dtype()) +
           shape_str(want.shape());
  const Bytes gb = host_bytes(got);
  if (std::string e = check_shards(got, gb); !e.empty()) return e;
  return bitwise(gb, want_bytes, want.dtype(), want.shape());
}

// ---------------------------------------------------------------------- jit

std::string check_jit(const Program& p, const std::vector<Outcome>& eager, const Values& ev, Rng& rng, int& step,
                      TransformStats& stats) {
  std::vector<int> inputs;
  for (std::size_t i = 0; i < p.steps.size(); ++i)
    if (eager[i].value && p.steps[i].args.empty() && (holds_data(p.steps[i]) || rng.coin(0.5)))
      inputs.push_back(static_cast<int>(i));
  // jit needs an array argument: the first source then, when none holds data.
  if (inputs.empty())
    for (std::size_t i = 0; i < p.steps.size() && inputs.empty(); ++i)
      if (eager[i].value && p.steps[i].args.empty()) inputs.push_back(static_cast<int>(i));
  const std::vector<int> outs = outputs_of(p, eager, inputs);
  if (outs.empty() || inputs.empty()) return "";
  std::vector<Array> in;
  for (int i : inputs) in.push_back(*eager[static_cast<std::size_t>(i)].value);
  const auto f =
      jit([&p, &eager, &inputs](const std::vector<Array>& a) { return replay(p, eager, inputs, a, p.mesh); });
  // Each result against the eager one; "" when all agree.
  auto compare = [&](const std::vector<Array>& got, const std::string& under) -> std::string {
    for (std::size_t k = 0; k < outs.size(); ++k) {
      step = outs[k];
      const std::size_t i = static_cast<std::size_t>(step);
      if (std::string e = same_as_eager(got[k], *eager[i].value, *ev[i].bytes); !e.empty()) return under + ": " + e;
    }
    step = -1;
    return "";
  };
  std::vector<Array> got;
  try {
    got = f(in);
    for (Array& g : got) g.block_until_ready();
  } catch (const std::exception& e) {
    return error_text("jit", e);
  }
  ++stats.jit;
  if (got.size() != outs.size())
    return "jit gave " + std::to_string(got.size()) + " results for " + std::to_string(outs.size()) + " steps";
  if (std::string e = compare(got, "under jit"); !e.empty()) return e;
  // On GPUs a cached call records its runs of kernels as graphs, and the
  // call after replays them (transforms/jit.cpp): both must give the
  // first call's bits.
  if (devices()[0].kind() == "cuda") {
    for (const char* call : {"second", "third"}) {
      const std::string under = std::string("jit, ") + call + " call";
      try {
        got = f(in);
      } catch (const std::exception& e) {
        return error_text(under.c_str(), e);
      }
      if (std::string e = compare(got, "under " + under); !e.empty()) return e;
    }
  }
  return "";
}

// --------------------------------------------------------------------- vmap

// Examples stacked along dim `axis` of the batched array (shape: `s` with
// the batch dim inserted at `axis`).
Bytes stack_bytes(const std::vector<Bytes>& ex, const Shape& s, int axis, std::size_t w) {
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < static_cast<int>(s.size()); ++d) (d < axis ? outer : inner) *= s[static_cast<std::size_t>(d)];
  Bytes out(ex.size() * ex.front().size());
  std::size_t pos = 0;
  for (std::int64_t o = 0; o < outer; ++o)
    for (const Bytes& e : ex) {
      const std::size_t n = static_cast<std::size_t>(inner) * w;
      if (n) std::memcpy(out.data() + pos, e.data() + static_cast<std::size_t>(o) * n, n);
      pos += n;
    }
  return out;
}

Bytes permuted(const Bytes& b, std::size_t w, Rng& rng) {
  std::vector<std::size_t> perm(b.size() / w);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.g);
  Bytes out(b.size());
  for (std::size_t i = 0; i < perm.size(); ++i) std::memcpy(out.data() + i * w, b.data() + perm[i] * w, w);
  return out;
}

std::string check_vmap(const Program& p, const std::vector<Outcome>& eager, Rng& rng, int& step,
                       TransformStats& stats) {
  constexpr int kBatch = 3;
  std::vector<int> inputs;
  for (std::size_t i = 0; i < p.steps.size(); ++i)
    if (eager[i].value && holds_data(p.steps[i])) inputs.push_back(static_cast<int>(i));
  if (inputs.empty()) return "";
  const std::vector<int> outs = outputs_of(p, eager, inputs);
  if (outs.empty()) return "";

  // Each input mapped or not (at least one mapped), its batch dim anywhere.
  std::vector<bool> mapped(inputs.size());
  for (std::size_t j = 0; j < inputs.size(); ++j) mapped[j] = rng.coin(0.75);
  mapped[static_cast<std::size_t>(rng.uni(0, static_cast<int>(inputs.size()) - 1))] = true;
  // A mesh axis for the batch dim: one that no input's layout and no step
  // names (a batch sharded over an axis an op also uses is the user's
  // conflict to resolve, as in eager code).
  std::vector<std::string> free_axes;
  for (const auto& a : p.mesh.axis_names()) {
    bool used = false;
    for (const Step& st : p.steps) used = used || st.text.find("'" + a + "'") != std::string::npos;
    for (int i : inputs) {
      const PartitionSpec& sp = eager[static_cast<std::size_t>(i)].value->sharding().spec();
      for (int d = 0; d < sp.size(); ++d)
        for (const auto& b : sp[d].axes()) used = used || b == a;
      for (const auto& b : sp.unreduced()) used = used || b == a;
    }
    if (!used) free_axes.push_back(a);
  }
  std::optional<std::string> batch_axis;
  if (!free_axes.empty() && rng.coin(0.5))
    batch_axis = free_axes[static_cast<std::size_t>(rng.uni(0, static_cast<int>(free_axes.size()) - 1))];
  // In chunks, a sharded batch runs the function on each device's block (a
  // shard_map over the batch axis): it may then make no array laid out over
  // the mesh, name no mesh axis and call no shard_map (all raise, saying
  // so). Programs with such steps run their chunks over an unsharded batch.
  bool global_steps = false;
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    if (!eager[i].value || holds_data(p.steps[i])) continue;
    const std::string& t = p.steps[i].text;
    global_steps = global_steps || p.steps[i].args.empty() || t.find("shard_map(") != std::string::npos ||
                   t.find("P(") != std::string::npos || t.find("device_put") != std::string::npos;
    for (const auto& a : p.mesh.axis_names()) global_steps = global_steps || t.find("'" + a + "'") != std::string::npos;
  }
  std::vector<Array> args, chunk_args;
  std::vector<int> axes;
  std::vector<std::vector<Bytes>> examples(inputs.size());
  std::string listing;
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    const Array& x = *eager[static_cast<std::size_t>(inputs[j])].value;
    if (!mapped[j]) {
      args.push_back(x);
      chunk_args.push_back(x);
      axes.push_back(not_mapped);
      listing += " v" + std::to_string(inputs[j]) + ":not_mapped";
      continue;
    }
    const std::size_t w = itemsize(x.dtype());
    const Bytes base = host_bytes(x);
    examples[j].push_back(base);
    for (int b = 1; b < kBatch; ++b) examples[j].push_back(permuted(base, w, rng));
    const int axis = rng.uni(0, x.ndim());
    Shape bs = x.shape();
    bs.insert(bs.begin() + axis, kBatch);
    std::vector<PartitionSpec::Entry> e;
    for (int d = 0; d < x.ndim(); ++d) e.push_back(x.sharding().spec()[d]);
    std::vector<PartitionSpec::Entry> plain = e;
    e.insert(e.begin() + axis, batch_axis ? PartitionSpec::Entry(*batch_axis) : PartitionSpec::Entry(none));
    plain.insert(plain.begin() + axis, PartitionSpec::Entry(none));
    const PartitionSpec bspec(e, x.sharding().spec().unreduced());
    const Bytes stacked = stack_bytes(examples[j], x.shape(), axis, w);
    args.push_back(device_put_raw(stacked.data(), x.dtype(), bs, NamedSharding(p.mesh, bspec)));
    chunk_args.push_back(
        batch_axis && global_steps
            ? device_put_raw(stacked.data(), x.dtype(), bs,
                             NamedSharding(p.mesh, PartitionSpec(plain, x.sharding().spec().unreduced())))
            : args.back());
    axes.push_back(axis);
    listing += " v" + std::to_string(inputs[j]) + ":" + std::to_string(axis) + "@" + spec_text(bspec);
  }
  const std::string what = "vmap (batch of " + std::to_string(kBatch) + ", in_axes" + listing + ")";

  // The loop: the eager program on each example.
  std::vector<std::vector<Array>> loop;
  for (int b = 0; b < kBatch; ++b) {
    std::vector<Array> in;
    for (std::size_t j = 0; j < inputs.size(); ++j) {
      const Array& x = *eager[static_cast<std::size_t>(inputs[j])].value;
      in.push_back(mapped[j] ? device_put_raw(examples[j][static_cast<std::size_t>(b)].data(), x.dtype(), x.shape(),
                                              x.sharding())
                             : x);
    }
    try {
      loop.push_back(replay(p, eager, inputs, in, p.mesh));
    } catch (const Error&) {
      ++stats.vmap_skipped;  // a permuted example is invalid (an integer divided by zero, ...)
      return "";
    }
  }

  const detail::TraceFn fn = replay_fn(p, eager, inputs);
  std::vector<Array> batched;
  try {
    batched = detail::vmap_call(args, axes, VmapOptions{}, fn, "vmap").outs;
    for (Array& a : batched) a.block_until_ready();
  } catch (const std::exception& e) {
    return raised(what.c_str(), e, unsupported_batching(e), stats.vmap_unsupported);
  }
  ++stats.vmap;
  if (batched.size() != outs.size())
    return what + " gave " + std::to_string(batched.size()) + " results for " + std::to_string(outs.size()) + " steps";
  std::vector<Bytes> batched_bytes;
  for (std::size_t k = 0; k < outs.size(); ++k) {
    step = outs[k];
    const Array& one = loop[0][k];
    Shape want = one.shape();
    want.insert(want.begin(), kBatch);
    if (batched[k].shape() != want || batched[k].dtype() != one.dtype())
      return what + ": result " + dtype_name(batched[k].dtype()) + shape_str(batched[k].shape()) + ", expected " +
             dtype_name(one.dtype()) + shape_str(want);
    const Bytes gb = host_bytes(batched[k]);
    if (std::string e = check_shards(batched[k], gb); !e.empty()) return what + ": " + e;
    const std::size_t n = gb.size() / kBatch;
    // Bitwise where the arithmetic does not depend on the layout (err 0);
    // a float sum the batched op partitions otherwise may round otherwise,
    // within twice the step's bound (each side is within it of the exact).
    const double tol = 2 * p.steps[static_cast<std::size_t>(step)].err;
    for (int b = 0; b < kBatch; ++b) {
      const Bytes slice(gb.begin() + static_cast<std::ptrdiff_t>(b * n),
                        gb.begin() + static_cast<std::ptrdiff_t>((b + 1) * n));
      if (std::string e = close(slice, host_bytes(loop[static_cast<std::size_t>(b)][k]), one.dtype(), one.shape(), tol);
          !e.empty())
        return what + ", example " + std::to_string(b) + " against the eager program on it: " + e;
    }
    batched_bytes.push_back(gb);
  }

  // Chunks of 1 or 2 examples: the same bits as the whole batch at once.
  VmapOptions chunked;
  chunked.chunk_size = rng.uni(1, kBatch - 1);
  const std::string cwhat = what + " in chunks of " + std::to_string(chunked.chunk_size) +
                            (batch_axis && global_steps ? " (batch not sharded)" : "");
  std::vector<Array> parts;
  try {
    parts = detail::vmap_call(chunk_args, axes, chunked, fn, "vmap").outs;
    for (Array& a : parts) a.block_until_ready();
  } catch (const std::exception& e) {
    return error_text(cwhat.c_str(), e);
  }
  ++stats.chunked;
  if (parts.size() != outs.size()) return cwhat + " gave " + std::to_string(parts.size()) + " results";
  for (std::size_t k = 0; k < outs.size(); ++k) {
    step = outs[k];
    if (parts[k].shape() != batched[k].shape() || parts[k].dtype() != batched[k].dtype())
      return cwhat + ": result " + dtype_name(parts[k].dtype()) + shape_str(parts[k].shape()) + ", unchunked " +
             dtype_name(batched[k].dtype()) + shape_str(batched[k].shape());
    const Bytes cb = host_bytes(parts[k]);
    if (std::string e = check_shards(parts[k], cb); !e.empty()) return cwhat + ": " + e;
    const double tol = 2 * p.steps[static_cast<std::size_t>(step)].err;
    if (std::string e = close(cb, batched_bytes[k], parts[k].dtype(), parts[k].shape(), tol); !e.empty())
      return cwhat + " against unchunked: " + e;
  }
  step = -1;
  return "";
}

// ---------------------------------------------------------------- jvp, vjp

Array random_like(const Array& x, Rng& rng, bool zero) {
  std::vector<double> v(static_cast<std::size_t>(x.size()));
  if (!zero)
    for (double& d : v) d = rng.real(-1, 1);
  Bytes b(v.size() * itemsize(x.dtype()));
  detail::convert(v.data(), DType::f64, b.data(), x.dtype(), x.size());
  return device_put_raw(b.data(), x.dtype(), x.shape(), x.sharding());
}

// x + h * v, computed in f64 and rounded to x's dtype (f64 here).
Array shifted(const Array& x, const Array& v, double h) {
  std::vector<double> xd(static_cast<std::size_t>(x.size())), vd(xd.size());
  x.copy_to_host(xd.data(), DType::f64);
  v.copy_to_host(vd.data(), DType::f64);
  for (std::size_t i = 0; i < xd.size(); ++i) xd[i] += h * vd[i];
  Bytes b(xd.size() * itemsize(x.dtype()));
  detail::convert(xd.data(), DType::f64, b.data(), x.dtype(), x.size());
  return device_put_raw(b.data(), x.dtype(), x.shape(), x.sharding());
}

std::vector<double> values(const Array& a) {
  std::vector<double> d(static_cast<std::size_t>(a.size()));
  a.copy_to_host(d.data(), DType::f64);
  return d;
}

bool all_finite(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

std::string check_autodiff(const Program& p, const std::vector<Outcome>& eager, const Values& ev, Rng& rng, int& step,
                           TransformStats& stats) {
  std::vector<int> inputs;
  bool has_f64 = false, has_f32 = false;
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    const Step& s = p.steps[i];
    // Inputs of extreme magnitude (1e-40, 1e30) stay constants: x / x at
    // x = 1e-40 adds cotangents of 1e40 that cancel, and absorb the others
    // in whatever order they are summed, which no bound on the sums covers.
    if (!eager[i].value || !holds_data(s) || !is_float(eager[i].value->dtype()) || !s.finite ||
        (s.minabs != 0 && s.minabs < 1e-20) || s.maxabs > 1e20)
      continue;
    inputs.push_back(static_cast<int>(i));
    (eager[i].value->dtype() == DType::f64 ? has_f64 : has_f32) = true;
  }
  if (inputs.empty()) return "";
  const std::vector<int> outs = outputs_of(p, eager, inputs);
  if (outs.empty()) return "";
  // Central differences need every perturbed input in f64: f32 inputs get
  // a zero tangent then (and a random one, for the dot-product test alone,
  // in programs with no f64 input or half the time).
  const bool fd = has_f64 && (!has_f32 || rng.coin(0.5));
  std::vector<Array> primals, tangents;
  for (int i : inputs) {
    const Array& x = *eager[static_cast<std::size_t>(i)].value;
    primals.push_back(x);
    // A perturbation of 2^-20 is lost on values of 1e3 and more (their
    // ulp is comparable): such inputs get a zero tangent when differencing.
    tangents.push_back(
        random_like(x, rng, fd && (x.dtype() != DType::f64 || p.steps[static_cast<std::size_t>(i)].maxabs > 1e3)));
  }
  const detail::TraceFn fn = replay_fn(p, eager, inputs);
  std::vector<Array> tout;
  detail::JitResult r;
  try {
    r = detail::jvp_call(fn, primals, tangents, tout);
    for (Array& a : tout) a.block_until_ready();
  } catch (const std::exception& e) {
    return raised("jvp", e, unsupported_derivative(e), stats.ad_unsupported);
  }
  if (r.outs.size() != outs.size() || tout.size() != outs.size())
    return "jvp gave " + std::to_string(r.outs.size()) + " results and " + std::to_string(tout.size()) +
           " tangents for " + std::to_string(outs.size()) + " steps";
  for (std::size_t k = 0; k < outs.size(); ++k) {
    step = outs[k];
    const std::size_t i = static_cast<std::size_t>(step);
    if (std::string e = same_as_eager(r.outs[k], *eager[i].value, *ev[i].bytes); !e.empty())
      return "jvp's primal result: " + e;
    if (tout[k].shape() != r.outs[k].shape())
      return "jvp's tangent has shape " + shape_str(tout[k].shape()) + ", its result " + shape_str(r.outs[k].shape());
  }
  ++stats.jvp;

  // Central differences, for f64 results reached from the inputs through
  // f64 values only (an f32 value on the way rounds the step h away).
  if (fd) {
    // The comparison is made at x' = x + 2^-10 w (w random), near x but off
    // the data's grid: ties and kinks that sit exactly on grid values (a max
    // of equal elements, a clip at its bound, all() of an exact zero) are
    // met there with probability 0, so the derivative conventions at them
    // (JAX's, which split ties) do not enter.
    std::vector<Array> base;
    for (std::size_t k = 0; k < primals.size(); ++k) {
      const bool moves = primals[k].dtype() == DType::f64 && p.steps[static_cast<std::size_t>(inputs[k])].maxabs <= 1e3;
      base.push_back(moves ? shifted(primals[k], random_like(primals[k], rng, false), std::ldexp(1.0, -10))
                           : primals[k]);
    }
    std::vector<Array> dtan;
    detail::JitResult rb;
    try {
      rb = detail::jvp_call(fn, base, tangents, dtan);
    } catch (const std::exception& e) {
      return error_text("jvp near x", e);
    }
    const double h = std::ldexp(1.0, -20);
    auto at = [&](double step) {
      std::vector<Array> in;
      for (std::size_t k = 0; k < base.size(); ++k)
        in.push_back(base[k].dtype() == DType::f64 ? shifted(base[k], tangents[k], step) : base[k]);
      return replay(p, eager, inputs, in, p.mesh);
    };
    std::vector<Array> fp, fm, fp2, fm2;
    try {
      fp = at(h);
      fm = at(-h);
      fp2 = at(2 * h);
      fm2 = at(-2 * h);
    } catch (const Error&) {
      fp.clear();  // a shifted input is out of an op's domain
    }
    // not_compared: an f32 value on the way; a tie convention; or a value
    // that is not float (a comparison, an all(), an index) and changed
    // under the shift: the program took another branch near x, so the
    // function jumps there even where the branches happen to agree.
    std::vector<char> depends(p.steps.size(), 0), not_compared(p.steps.size(), 0);
    for (std::size_t k = 0; k < inputs.size(); ++k)
      depends[static_cast<std::size_t>(inputs[k])] = primals[k].dtype() == DType::f64;
    for (std::size_t k = 0; k < outs.size(); ++k) {
      const std::size_t u = static_cast<std::size_t>(outs[k]);
      for (int a : p.steps[u].args) {
        depends[u] |= depends[static_cast<std::size_t>(a)];
        not_compared[u] |= not_compared[static_cast<std::size_t>(a)];
      }
      if (depends[u] && eager[u].value->dtype() == DType::f32) not_compared[u] = 1;
      // Rounding and sign are piecewise constant too (and rounding is the
      // identity on floats of 2^52 and more, though its derivative is 0).
      const bool steps_only = !is_float(eager[u].value->dtype()) || p.steps[u].op == "floor" ||
                              p.steps[u].op == "ceil" || p.steps[u].op == "round" || p.steps[u].op == "sign";
      if (depends[u] && steps_only && !fp.empty()) {
        const Bytes b0 = host_bytes(rb.outs[k]);
        for (const auto* f : {&fp, &fm, &fp2, &fm2})
          if (host_bytes((*f)[k]) != b0) not_compared[u] = 1;
      }
      // clip(x, c, c) is constant, but its derivative at x == c is JAX's
      // tie convention for minimum(maximum(x, c), c), 1/4: a clip whose
      // values all have one magnitude is not compared.
      if (p.steps[u].op == "clip" && p.steps[u].maxabs == p.steps[u].minabs) not_compared[u] = 1;
    }
    if (fp.empty()) ++stats.fd_skipped_programs;
    for (std::size_t k = 0; k < outs.size() && !fp.empty(); ++k) {
      const std::size_t i = static_cast<std::size_t>(outs[k]);
      if (rb.outs[k].dtype() != DType::f64 || not_compared[i]) continue;
      step = outs[k];
      const auto f0 = values(rb.outs[k]), f1 = values(fp[k]), f2 = values(fm[k]), d = values(dtan[k]);
      const auto g1 = values(fp2[k]), g2 = values(fm2[k]);
      for (std::size_t e = 0; e < f0.size(); ++e) {
        const double c = (f1[e] - f2[e]) / (2 * h), fw = (f1[e] - f0[e]) / h, bw = (f0[e] - f2[e]) / h;
        // Twice the step: a jump that is symmetric about x (sign at 0)
        // shows as c halving, which the one-sided differences miss.
        const double c2 = (g1[e] - g2[e]) / (4 * h);
        if (!std::isfinite(c) || !std::isfinite(c2) || !std::isfinite(fw) || !std::isfinite(bw) ||
            !std::isfinite(d[e])) {
          ++stats.fd_skipped;
          continue;
        }
        // Rounding of F near x, magnified by 1/h in a difference.
        const double noise =
            64 * unit_roundoff(DType::f64) *
            std::max({std::abs(f0[e]), std::abs(f1[e]), std::abs(f2[e]), std::abs(g1[e]), std::abs(g2[e])}) / h;
        // F must change by more than its rounding over the step: where it
        // does not (log1p(expm1(-40)) is flat in floats, its derivative is
        // 1), central differences cannot judge the tangent.
        const double mag = std::max({std::abs(f0[e]), std::abs(f1[e]), std::abs(f2[e])});
        if (std::abs(f1[e] - f2[e]) <= 1024 * unit_roundoff(DType::f64) * mag) {
          ++stats.fd_skipped;
          continue;
        }
        // Smoothness is judged from F alone (a huge wrong tangent must not
        // excuse a jump); the tangent is then compared on the larger scale.
        const double smooth = std::max({std::abs(fw), std::abs(bw), 1.0});
        const double scale = std::max(smooth, std::abs(d[e]));
        if (std::abs(fw - bw) > 1e-4 * smooth + 2 * noise || std::abs(c - c2) > 1e-4 * smooth + 2 * noise) {
          ++stats.fd_skipped;  // a kink, a jump, or too curved for h
          continue;
        }
        ++stats.fd_checked;
        // 1e-3: the tangent's own rounding is not bounded by F's; an
        // ill-conditioned chain (log1p(expm1(-30)) cancels 13 digits) loses
        // digits in both, differently. Wrong rules are off by far more.
        if (std::abs(d[e] - c) > 1e-3 * scale + 2 * noise) {
          std::ostringstream os;
          os.precision(17);
          os << "jvp tangent (at x + 2^-10 w) at element "
             << index_text(r.outs[k].shape(), static_cast<std::int64_t>(e)) << " is " << d[e]
             << ", central differences give " << c << " (one-sided: " << fw << ", " << bw << "; h = " << h << ")";
          return os.str();
        }
      }
    }
  }

  // The dot-product test: <u, J v> == <J^T u, v>, with u = 0 on results
  // that are not float or whose tangent is not finite.
  std::vector<Array> cts(outs.size());
  double lhs = 0, mag = 0;
  bool f32 = false;
  for (std::size_t k = 0; k < outs.size(); ++k) {
    if (!is_float(r.outs[k].dtype())) continue;
    const auto jv = values(tout[k]);
    if (!all_finite(jv) || !all_finite(values(r.outs[k]))) continue;
    cts[k] = random_like(r.outs[k], rng, false);
    const auto u = values(cts[k]);
    for (std::size_t e = 0; e < u.size(); ++e) {
      lhs += u[e] * jv[e];
      mag += std::abs(u[e] * jv[e]);
    }
    f32 = f32 || r.outs[k].dtype() == DType::f32;
  }
  detail::Pullback back;
  std::vector<Array> ct_in;
  try {
    const detail::JitResult rv = detail::vjp_call(fn, primals, back);
    for (std::size_t k = 0; k < outs.size(); ++k) {
      step = outs[k];
      const std::size_t i = static_cast<std::size_t>(step);
      if (std::string e = same_as_eager(rv.outs[k], *eager[i].value, *ev[i].bytes); !e.empty())
        return "vjp's primal result: " + e;
    }
    ct_in = back(cts);
    for (Array& a : ct_in) a.block_until_ready();
  } catch (const std::exception& e) {
    return raised("vjp", e, unsupported_derivative(e), stats.ad_unsupported);
  }
  step = -1;
  if (ct_in.size() != primals.size())
    return "the pullback gave " + std::to_string(ct_in.size()) + " cotangents for " + std::to_string(primals.size()) +
           " inputs";
  double rhs = 0;
  for (std::size_t k = 0; k < primals.size(); ++k) {
    if (ct_in[k].shape() != primals[k].shape() || ct_in[k].dtype() != primals[k].dtype())
      return "the cotangent of input " + std::to_string(k) + " is " + dtype_name(ct_in[k].dtype()) +
             shape_str(ct_in[k].shape()) + ", the input " + dtype_name(primals[k].dtype()) +
             shape_str(primals[k].shape());
    if (!(ct_in[k].sharding() == primals[k].sharding()))
      return "the cotangent of input " + std::to_string(k) + " is laid out " + ct_in[k].sharding().str() +
             ", the input " + primals[k].sharding().str();
    const auto ct = values(ct_in[k]), v = values(tangents[k]);
    if (!all_finite(ct)) {
      ++stats.vjp_skipped;  // 0 * inf on the way back
      return "";
    }
    for (std::size_t e = 0; e < ct.size(); ++e) {
      rhs += ct[e] * v[e];
      mag += std::abs(ct[e] * v[e]);
    }
    f32 = f32 || primals[k].dtype() == DType::f32;
  }
  if (!std::isfinite(lhs) || !std::isfinite(rhs) || !std::isfinite(mag)) {
    ++stats.vjp_skipped;
    return "";
  }
  ++stats.vjp;
  const double tol = (f32 ? 1e-3 : 1e-9) * mag + 1e-300;
  if (std::abs(lhs - rhs) > tol) {
    std::ostringstream os;
    os.precision(17);
    os << "dot-product test: <u, J v> = " << lhs << " (jvp), <J^T u, v> = " << rhs << " (vjp); allowed difference "
       << tol;
    return os.str();
  }
  return "";
}

}  // namespace

std::string check_transforms(const Program& p, const std::vector<Outcome>& eager, const Values& ev, int& step,
                             std::string& which, TransformStats& stats, const std::string& only) {
  step = -1;
  struct Check {
    const char* name;
    std::string (*fn)(const Program&, const std::vector<Outcome>&, const Values&, Rng&, int&, TransformStats&);
  };
  static const Check checks[] = {
      {"jit", check_jit},
      {"vmap", [](const Program& q, const std::vector<Outcome>& e, const Values&, Rng& r, int& s,
                  TransformStats& st) { return check_vmap(q, e, r, s, st); }},
      {"autodiff", check_autodiff},
  };
  for (const Check& c : checks) {
    which = c.name;
    // Each check draws from its own generator, so that what one draws does
    // not depend on which others ran.
    Rng rng{
        std::mt19937_64(p.seed * 0x9E3779B97F4A7C15ull + 0x7f4a7c15ull * static_cast<std::uint64_t>(&c - checks + 1))};
    const bool selected = only.empty() || ("," + only + ",").find("," + which + ",") != std::string::npos;
    std::string why;
    try {
      if (selected) why = c.fn(p, eager, ev, rng, step, stats);
    } catch (const std::exception& e) {
      why = error_text("the check itself", e);
    }
    if (!why.empty()) return why;
  }
  which.clear();
  return "";
}

}  // namespace tessera::fuzz
