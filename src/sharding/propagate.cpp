// The sharding propagation engine.
//
// A rule maps every operand dim and result dim to a factor (or to none, for
// a broadcast size-1 dim). Partitioning one application of a primitive means
// giving each factor a list of mesh axes (possibly empty), with no mesh axis
// used by two factors. From an assignment everything follows:
//   - operand i is brought to the layout whose dim d has the axes of its
//     factor (a dim mapped to none is whole);
//   - each device computes its block of every result, laid out by the axes
//     of the result dims' factors;
//   - the axes of sharded reduction factors leave the results partial: they
//     are combined over those axes (all-reduce, or reduce-scatter straight
//     into a requested layout).
//
// Candidates for a factor are the axes its operand dims already carry (and
// those of a requested out_spec), the ordered parts of those lists, plus
// none. Every combination is scored:
//   cost = kWorkPerByte * bytes one device receives (operand reshards, the
//          reduction, the final reshard to out_spec)
//        + the primitive's work divided by the number of devices that share
//          it (the product of the sizes of all assigned axes),
// and the cheapest wins; ties go to the combination that leaves the most
// sharded dims of the first operand (then the second, ...) as they are.
// So sharded work stays sharded, a replicated operand is sliced locally
// rather than its sharded partner gathered, and a sharded contracting dim
// becomes local partial products plus a small all-reduce when that moves
// fewer bytes than gathering.
//
// Explicit axes are part of the user's types: they are never moved by a cost
// decision. When the natural assignment is valid it is taken; when operands
// conflict on Explicit axes the caller must say what it wants (out_spec) or
// the primitive's conflict message is raised.
// A primitive whose operands must stay where they lie (reductions: see
// Primitive::keeps_operand_layouts) gets that natural assignment too, with
// or without out_spec. One that keeps one operand's layout (a stencil's or
// a scan's result is x's layout: Partitionable::keeps_layout_of) gets that
// operand's axes for every factor of its dims; the others are brought to it.
//
// Halo factors are assigned axes like pass-through ones. The partition then
// lists the operand dims on them: halos each device reads around its result
// block, or a scan whose parts' totals are carried between devices. The
// engine (spmd/engine.cpp) executes both.
#include "sharding/propagate.hpp"

#include <algorithm>
#include <set>

#include "core/nd_index.hpp"
#include "core/promote.hpp"
#include "core/validate.hpp"
#include "sharding/spec.hpp"

namespace tessera::detail {

namespace {

using AxisList = std::vector<std::string>;

// Bytes moved count this many units of work each: a copied byte costs about
// as much as a few arithmetic operations on one core.
constexpr double kWorkPerByte = 4.0;
// Past this many combinations only the natural assignment (greedily repaired)
// is considered.
constexpr std::size_t kMaxCombinations = 4096;

bool is_prefix(const AxisList& p, const AxisList& a) {
  return p.size() <= a.size() && std::equal(p.begin(), p.end(), a.begin());
}

std::int64_t axes_size(const Mesh& mesh, const AxisList& axes) {
  std::int64_t n = 1;
  for (const auto& a : axes) n *= mesh.axis_size(a);
  return n;
}

// An operand dim takes its factor's axes whatever the kind: a sharded
// reduction factor means each device holds only its slice of the summed
// dim. A result dim never carries a reduction factor's axes (they become
// reduce_axes instead).
NamedSharding layout(const Mesh& mesh, const std::vector<int>& dims, const std::vector<AxisList>& assign,
                     const std::vector<Factor>& factors, bool operand) {
  std::vector<AxisList> axes(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    const int f = dims[d];
    if (f >= 0 && (operand || factors[f].kind != FactorKind::Reduction)) axes[d] = assign[f];
  }
  return NamedSharding(mesh, make_spec(axes));
}

// True when every device's block of `inner` lies inside its block of
// `outer`, so a reduction can write `inner` blocks straight away.
bool blocks_inside(const Shape& shape, const NamedSharding& inner, const NamedSharding& outer) {
  for (int pos = 0; pos < inner.mesh().size(); ++pos) {
    const auto a = inner.shard_index(shape, pos), b = outer.shard_index(shape, pos);
    for (size_t d = 0; d < a.size(); ++d)
      if (a[d].size() > 0 && (a[d].start < b[d].start || a[d].stop > b[d].stop)) return false;
  }
  return true;
}

// The partition that `assign` gives: operand and result layouts, the
// reduction still to do, the bytes one device receives and the cost. `kept`
// gets, per operand, the sharded dims it leaves as they are (ties go to the
// assignment keeping the earliest operands).
Partition evaluate(const ShardingRule& rule, const Mesh& mesh, std::span<const AbstractArray> in,
                   const std::vector<TypeInfo>& out, const std::vector<AxisList>& assign,
                   const std::optional<NamedSharding>& want_s, double work, std::vector<int>& kept) {
  const int nf = static_cast<int>(rule.factors.size());
  Partition p;
  double bytes = 0;
  kept.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    p.operands.push_back(layout(mesh, rule.operands[i], assign, rule.factors, true));
    bytes += reshard_bytes(in[i].shape, in[i].dtype, in[i].sharding, p.operands.back());
    int k = 0;
    for (int d = 0; d < static_cast<int>(in[i].shape.size()); ++d)
      k += !in[i].sharding.spec()[d].axes().empty() &&
           in[i].sharding.spec()[d].axes() == p.operands.back().spec()[d].axes();
    kept.push_back(k);
  }
  AxisList red;
  for (const auto& axis : mesh.axis_names())
    for (int f = 0; f < nf; ++f)
      if (rule.factors[f].kind == FactorKind::Reduction &&
          std::find(assign[f].begin(), assign[f].end(), axis) != assign[f].end())
        red.push_back(axis);
  const double group = static_cast<double>(axes_size(mesh, red));
  for (size_t r = 0; r < out.size(); ++r) {
    p.local.push_back(layout(mesh, rule.results[r], assign, rule.factors, false));
    p.results.push_back(r == 0 && want_s ? *want_s : p.local.back());
    // Partial results are reduced straight into the final blocks when
    // those lie inside the local ones (a reduce-scatter: each device
    // receives only its final block from each peer; over size-1 axes,
    // a local copy of those blocks), else into the local blocks and
    // then resharded.
    const bool scatter = !red.empty() && !(p.results.back() == p.local.back()) &&
                         blocks_inside(out[r].shape, p.results.back(), p.local.back());
    p.combined.push_back(scatter ? p.results.back() : p.local.back());
    const NamedSharding& into = p.combined.back();
    double into_bytes = static_cast<double>(itemsize(out[r].dtype));
    for (size_t d = 0; d < out[r].shape.size(); ++d)
      into_bytes *= static_cast<double>(out[r].shape[d]) / static_cast<double>(into.num_parts(static_cast<int>(d)));
    bytes += into_bytes * (group - 1);
    if (!scatter) bytes += reshard_bytes(out[r].shape, out[r].dtype, p.local.back(), p.results.back());
  }
  p.reduce_axes = red;
  double par = 1;
  for (int f = 0; f < nf; ++f) par *= static_cast<double>(axes_size(mesh, assign[f]));
  p.bytes = bytes;
  p.cost = bytes * kWorkPerByte + work / par;
  return p;
}

// The engine's own steps for the rule's Halo factors (Partition::halos and
// scan): every operand dim on such a factor, with the result dim that
// shares it. A factor no result has is read as pass-through.
void add_engine_steps(Partition& p, const ShardingRule& rule, const char* op) {
  for (int f = 0; f < static_cast<int>(rule.factors.size()); ++f) {
    const Factor& fac = rule.factors[f];
    if (fac.kind != FactorKind::Halo) continue;
    int r = -1, rd = -1;
    for (int i = 0; i < static_cast<int>(rule.results.size()) && r < 0; ++i)
      for (int d = 0; d < static_cast<int>(rule.results[i].size()) && r < 0; ++d)
        if (rule.results[i][d] == f) r = i, rd = d;
    if (r < 0) continue;
    for (int i = 0; i < static_cast<int>(rule.operands.size()); ++i)
      for (int d = 0; d < static_cast<int>(rule.operands[i].size()); ++d) {
        if (rule.operands[i][d] != f) continue;
        if (!fac.scan) {
          p.halos.push_back(Partition::HaloDim{i, d, r, rd, fac.halo_lo, fac.halo_hi});
          continue;
        }
        if (p.scan) throw Error(msg(op, "internal: a rule may scan one operand dim only"));
        p.scan = Partition::ScanDim{i, d, r};
      }
  }
}

}  // namespace

double reshard_bytes(const Shape& shape, DType dtype, const NamedSharding& from, const NamedSharding& to) {
  if (from == to) return 0;
  const Mesh& mesh = to.mesh();
  double elems = 1, local = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    const AxisList& f = from.spec()[static_cast<int>(d)].axes();
    const AxisList& t = to.spec()[static_cast<int>(d)].axes();
    elems *= static_cast<double>(shape[d]) / static_cast<double>(axes_size(mesh, t));
    if (!is_prefix(f, t)) {
      // Only the blocks sharing the common leading axes overlap.
      size_t common = 0;
      while (common < f.size() && common < t.size() && f[common] == t[common]) ++common;
      const AxisList head(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(common));
      local *= static_cast<double>(axes_size(mesh, head)) / static_cast<double>(axes_size(mesh, f));
    }
  }
  return elems * (1.0 - local) * static_cast<double>(itemsize(dtype));
}

Partition partition(const Partitionable& prim, std::span<const AbstractArray> in, const std::vector<TypeInfo>& out,
                    const std::optional<NamedSharding>& result_layout) {
  // Checked here, where every trace brings a primitive's operands, rather
  // than in the front ends: inside a shard_map body the manual trace first
  // reads captured replicated arrays as the body's local copies.
  for (size_t i = 1; i < in.size(); ++i)
    check_same_mesh(in[0].sharding.mesh(), in[i].sharding.mesh(), std::string(prim.name()).c_str());
  if (auto fixed = prim.layouts(in, out)) {
    // The primitive lays its results out itself; operands stay as they are.
    Partition p;
    for (const auto& a : in) p.operands.push_back(a.sharding);
    p.local = p.combined = p.results = std::move(*fixed);
    return p;
  }
  if (prim.lowers_itself())
    throw Error(msg(std::string(prim.name()).c_str(), "internal: a primitive that lowers itself must fix its layouts"));
  const ShardingRule rule = prim.rule(in);
  const Mesh& mesh = in.front().sharding.mesh();
  const int nf = static_cast<int>(rule.factors.size());
  const std::optional<PartitionSpec> want =
      result_layout && !prim.out_spec() ? std::optional<PartitionSpec>(result_layout->spec()) : prim.out_spec();

  // Candidates per factor, in operand order (the natural choice first).
  std::vector<std::vector<AxisList>> cand(nf);
  auto shardable = [&](int f) {
    const FactorKind k = rule.factors[f].kind;
    return k != FactorKind::NeedReplication && k != FactorKind::Permutation;
  };
  auto add = [&](int f, const AxisList& axes) {
    if (f < 0 || axes.empty() || !shardable(f)) return;
    if (std::find(cand[f].begin(), cand[f].end(), axes) == cand[f].end()) cand[f].push_back(axes);
  };
  bool is_explicit = false;
  for (size_t i = 0; i < in.size(); ++i) {
    is_explicit = is_explicit || has_explicit_axes(in[i].sharding);
    for (size_t d = 0; d < rule.operands[i].size(); ++d)
      add(rule.operands[i][d], in[i].sharding.spec()[static_cast<int>(d)].axes());
  }
  // The natural assignment: each factor the axes its operand dims carry.
  std::vector<AxisList> natural(nf);
  for (int f = 0; f < nf; ++f)
    if (!cand[f].empty()) natural[f] = cand[f][0];
  bool natural_ok = true;
  {
    std::set<std::string> used;
    for (int f = 0; f < nf; ++f) {
      if (cand[f].size() > 1) natural_ok = false;
      if (!cand[f].empty())
        for (const auto& a : cand[f][0]) natural_ok = natural_ok && used.insert(a).second;
    }
  }
  std::optional<NamedSharding> want_s;
  if (want) {
    want_s = resolve_spec(mesh, *want, static_cast<int>(out.front().shape.size()), std::string(prim.name()).c_str());
    is_explicit = is_explicit || has_explicit_axes(*want_s);
    for (size_t d = 0; d < rule.results.front().size(); ++d)
      add(rule.results.front()[d], (*want)[static_cast<int>(d)].axes());
  }
  // A primitive that keeps an operand's layout: that operand's axes, as
  // they lie, for every factor of its dims (Partitionable::keeps_layout_of).
  if (const int k = prim.keeps_layout_of(); k >= 0) {
    std::vector<AxisList> assign(nf);
    for (size_t d = 0; d < rule.operands[k].size(); ++d) {
      const int f = rule.operands[k][d];
      if (f >= 0 && shardable(f)) assign[f] = in[k].sharding.spec()[static_cast<int>(d)].axes();
    }
    std::vector<int> kept;
    Partition p = evaluate(rule, mesh, in, out, assign, want_s, prim.work(in, out), kept);
    add_engine_steps(p, rule, std::string(prim.name()).c_str());
    return p;
  }
  // Operands that disagree only on Auto axes (on a mesh that also has
  // Explicit ones) are the cost search's to reconcile, as on an all-Auto
  // mesh; the Explicit axes stay where the user put them: every candidate
  // of a factor must carry the same Explicit axes, and each factor may
  // keep just those. A disagreement on an Explicit axis raises.
  // (An operand dim with no Explicit axis makes no claim: one side's
  // Explicit axes on a contracting dim are accepted, as on its own.)
  bool auto_conflict = false;
  std::vector<AxisList> explicit_of(nf);
  auto explicit_part = [&](const AxisList& a) {
    AxisList r;
    for (const auto& x : a)
      if (mesh.axis_types()[mesh.axis_index(x)] == AxisType::Explicit) r.push_back(x);
    return r;
  };
  if (is_explicit && !natural_ok && !want) {
    bool ok = true;
    std::set<std::string> used;
    for (int f = 0; f < nf && ok; ++f) {
      for (const auto& c : cand[f]) {
        const AxisList e = explicit_part(c);
        if (e.empty()) continue;
        if (explicit_of[f].empty()) explicit_of[f] = e;
        ok = ok && e == explicit_of[f];
      }
      for (const auto& a : explicit_of[f]) ok = ok && used.insert(a).second;
    }
    if (!ok) throw ShardingError(prim.conflict_message(in));
    auto_conflict = true;
  }

  std::vector<std::vector<AxisList>> choices(nf);
  std::size_t combos = 1;
  for (int f = 0; f < nf; ++f) {
    choices[f] = cand[f];
    if (auto_conflict) {
      // The candidates with the factor's Explicit axes, or those alone.
      choices[f].clear();
      for (const auto& c : cand[f])
        if (explicit_part(c) == explicit_of[f]) choices[f].push_back(c);
      if (std::find(choices[f].begin(), choices[f].end(), explicit_of[f]) == choices[f].end())
        choices[f].push_back(explicit_of[f]);
    } else if (natural_ok && prim.keeps_operand_layouts()) {
      // Operands stay where they lie; only the way to out_spec is priced.
      choices[f] = {natural[f]};
    } else if (is_explicit && natural_ok && !want) {
      // Explicit axes stay where the user put them.
      if (choices[f].empty()) choices[f].push_back({});
    } else {
      // Every ordered part of a multi-axis candidate too: when another
      // factor takes one of a dim's axes, the dim keeps the rest rather
      // than being gathered whole.
      for (size_t c = 0; c < cand[f].size(); ++c) {
        const AxisList& full = cand[f][c];
        if (full.size() < 2 || full.size() > 8) continue;
        for (unsigned mask = 1; mask + 1 < (1u << full.size()); ++mask) {
          AxisList part;
          for (size_t a = 0; a < full.size(); ++a)
            if (mask & (1u << a)) part.push_back(full[a]);
          if (std::find(choices[f].begin(), choices[f].end(), part) == choices[f].end()) choices[f].push_back(part);
        }
      }
      choices[f].push_back({});
    }
    combos *= choices[f].size();
    if (combos > kMaxCombinations) break;
  }
  if (combos > kMaxCombinations) {
    // Greedy: each factor keeps its first candidate whose axes are free.
    std::set<std::string> used;
    for (int f = 0; f < nf; ++f) {
      AxisList pick;
      for (const auto& c : cand[f]) {
        bool free = true;
        for (const auto& a : c) free = free && !used.count(a);
        if (free) {
          pick = c;
          break;
        }
      }
      for (const auto& a : pick) used.insert(a);
      choices[f] = {pick};
    }
  }

  const double work = prim.work(in, out);
  Partition best;
  std::vector<int> best_kept;
  bool have = false;
  std::vector<std::int64_t> counts;
  for (const auto& c : choices) counts.push_back(static_cast<std::int64_t>(c.size()));
  std::vector<AxisList> assign(nf);
  for (NdIndex<0> it(counts); !it.done(); it.next()) {
    std::set<std::string> used;
    bool valid = true;
    for (int f = 0; f < nf && valid; ++f) {
      assign[f] = choices[f][static_cast<size_t>(it.index(f))];
      for (const auto& a : assign[f]) valid = valid && used.insert(a).second;
    }
    if (valid) {
      std::vector<int> kept;  // per operand: sharded dims left as they are
      Partition p = evaluate(rule, mesh, in, out, assign, want_s, work, kept);
      // Ties go to the layout that keeps the earliest operands as they are.
      const double eps = 1e-9 * std::max(1.0, best.cost);
      if (!have || p.cost < best.cost - eps || (p.cost <= best.cost + eps && kept > best_kept)) {
        best = std::move(p);
        best_kept = kept;
        have = true;
      }
    }
  }
  if (!have) throw ShardingError("[" + std::string(prim.name()) + "] no valid sharding for " + rule.str());
  add_engine_steps(best, rule, std::string(prim.name()).c_str());
  return best;
}

}  // namespace tessera::detail
