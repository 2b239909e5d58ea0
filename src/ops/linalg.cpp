// Linear algebra front ends: matmul, dot, einsum and dot_general only
// describe their operands' dims to the one dot_general primitive
// (primitives/linalg): they check arguments, build the contraction, cast the
// operands to the promoted dtype and bind it.
//
// A contraction gives every dim of each operand a role: batch (paired, or
// broadcast from size 1 / absent on one side), contracting (paired), free
// (kept in the output), or summed (einsum labels in one operand only). The
// output is (batch..., lhs free..., rhs free...), optionally permuted.
//
// Sharding rule, as factors (matmul (8, 16) @ (16, 4) prints
// "([i,k],[k,j])->([i,j]) {i=8,j=4,k=16} reduction={k}"):
//   - each batch pair is one pass-through factor shared by both operands and
//     the output; a size-1 side broadcast against a larger one maps to no
//     factor, so it is never sharded;
//   - each free dim is a pass-through factor of its operand and the output;
//   - each contracting pair, and each summed dim, is a reduction factor:
//     sharding it leaves every device a partial result, summed over its
//     axes (all-reduce, or reduce-scatter straight into out_sharding).
// The propagation engine (sharding/propagate) gives each factor mesh axes
// (an axis to at most one factor) by its cost model: bytes each device
// receives, plus the work (2 x the product of the factor sizes) divided by
// the devices that share it. Free and batch dims sharded without conflict
// therefore stay where they are, and a contracting dim sharded on one side only becomes
// either a local slice of the other (replicated) operand plus a small
// all-reduce, or a gather, whichever moves fewer bytes: x (16384,) sharded
// with w (16384, 512) replicated slices w and all-reduces 512 values.
// Explicit axes are never moved by the cost model: when the operands' axes
// give one factor assignment, it is taken (contracting dims sharded alike or
// on one side give a replicated result over those axes, as JAX); when they
// conflict (one dim sharded differently on the two sides, or one axis on two
// factors) the error names the dims and asks for out_sharding.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/contraction.hpp"
#include "core/promote.hpp"
#include "primitives/elementwise.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/linalg.hpp"

namespace tessera {

namespace {

using Contraction = detail::Contraction;
using Side = detail::DotSide;
using detail::msg;

// Casts both operands to the promoted dtype and binds the contraction.
Array contract(const Array& a, const Array& b, Contraction c, const OutOptions& opt, const char* op) {
  const DType dtype = detail::promote(a.dtype(), b.dtype());
  const Shape out = detail::dot_shape(c, a.shape(), b.shape());
  // (2^40, k) @ (k, 2^40): both operands fit, the product does not.
  detail::checked_nbytes(out, dtype, op);
  if (opt.out_sharding) detail::resolve_spec(a.sharding().mesh(), *opt.out_sharding, static_cast<int>(out.size()), op);
  return detail::bind1(detail::make_dot_general(op, std::move(c), dtype, opt.out_sharding),
                       {detail::cast(a, dtype), detail::cast(b, dtype)});
}

void check_operands(const Array& a, const Array& b, const char* op) {
  detail::check_operand(a, op, "lhs");
  detail::check_operand(b, op, "rhs");
}

std::string differ(const char* what, const Array& a, const Array& b) {
  return std::string(what) + " dims differ: lhs " + shape_str(a.shape()) + " vs rhs " + shape_str(b.shape());
}

// Dims of [0, rank) in neither `x` nor `y`, in order.
std::vector<int> rest(int rank, const std::vector<int>& x, const std::vector<int>& y) {
  std::vector<int> out;
  for (int d = 0; d < rank; ++d)
    if (std::find(x.begin(), x.end(), d) == x.end() && std::find(y.begin(), y.end(), d) == y.end()) out.push_back(d);
  return out;
}

}  // namespace

Array dot_general(const Array& a, const Array& b, const DotDims& dims, const OutOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "dot_general";
  check_operands(a, b, op);
  auto norm = [&](const std::vector<int>& v, int rank, const char* side, const char* what) {
    std::vector<int> out;
    for (int d : v) {
      const int n = detail::normalize_axis(d, rank, op);
      if (std::find(out.begin(), out.end(), n) != out.end())
        throw ShapeError(msg(op, std::string(side) + " " + what + " dim " + std::to_string(n) + " is given twice"));
      out.push_back(n);
    }
    return out;
  };
  Contraction c;
  c.lhs.contract = norm(dims.lhs_contracting, a.ndim(), "lhs", "contracting");
  c.rhs.contract = norm(dims.rhs_contracting, b.ndim(), "rhs", "contracting");
  c.lhs.batch = norm(dims.lhs_batch, a.ndim(), "lhs", "batch");
  c.rhs.batch = norm(dims.rhs_batch, b.ndim(), "rhs", "batch");
  if (c.lhs.contract.size() != c.rhs.contract.size())
    throw ShapeError(msg(op, "lhs has " + std::to_string(c.lhs.contract.size()) + " contracting dims but rhs has " +
                                 std::to_string(c.rhs.contract.size())));
  if (c.lhs.batch.size() != c.rhs.batch.size())
    throw ShapeError(msg(op, "lhs has " + std::to_string(c.lhs.batch.size()) + " batch dims but rhs has " +
                                 std::to_string(c.rhs.batch.size())));
  for (const Side* s : {&c.lhs, &c.rhs})
    for (int d : s->batch)
      if (std::find(s->contract.begin(), s->contract.end(), d) != s->contract.end())
        throw ShapeError(msg(op, std::string(s == &c.lhs ? "lhs" : "rhs") + " dim " + std::to_string(d) +
                                     " is both a batch and a contracting dim"));
  for (size_t j = 0; j < c.lhs.contract.size(); ++j) {
    const int da = c.lhs.contract[j], db = c.rhs.contract[j];
    if (a.shape()[da] != b.shape()[db])
      throw ShapeError(msg(op, differ("contracting", a, b) + " (lhs dim " + std::to_string(da) + " has " +
                                   std::to_string(a.shape()[da]) + ", rhs dim " + std::to_string(db) + " has " +
                                   std::to_string(b.shape()[db]) + ")"));
  }
  for (size_t i = 0; i < c.lhs.batch.size(); ++i) {
    const int da = c.lhs.batch[i], db = c.rhs.batch[i];
    if (a.shape()[da] != b.shape()[db])
      throw ShapeError(msg(op, differ("batch", a, b) + " (lhs dim " + std::to_string(da) + " has " +
                                   std::to_string(a.shape()[da]) + ", rhs dim " + std::to_string(db) + " has " +
                                   std::to_string(b.shape()[db]) + ")"));
  }
  c.lhs.free = rest(a.ndim(), c.lhs.batch, c.lhs.contract);
  c.rhs.free = rest(b.ndim(), c.rhs.batch, c.rhs.contract);
  return contract(a, b, std::move(c), opt, op);
}

Array matmul(const Array& a, const Array& b, const OutOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "matmul";
  check_operands(a, b, op);
  const int ra = a.ndim(), rb = b.ndim();
  if (ra < 1 || rb < 1)
    throw ShapeError(msg(op, "operands must have rank >= 1, got lhs " + shape_str(a.shape()) + " and rhs " +
                                 shape_str(b.shape()) + " (use multiply for scalars)"));
  const int ka = ra - 1, kb = rb >= 2 ? rb - 2 : 0;
  if (a.shape()[ka] != b.shape()[kb]) throw ShapeError(msg(op, differ("contracting", a, b)));
  // Leading dims broadcast as batch dims, aligned from the right.
  const int nba = std::max(ra - 2, 0), nbb = std::max(rb - 2, 0), nb = std::max(nba, nbb);
  Contraction c;
  for (int i = 0; i < nb; ++i) {
    const int da = i - (nb - nba), db = i - (nb - nbb);
    const std::int64_t sa = da >= 0 ? a.shape()[da] : 1, sb = db >= 0 ? b.shape()[db] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      throw ShapeError(msg(op, "batch dims cannot broadcast: lhs " + shape_str(a.shape()) + " vs rhs " +
                                   shape_str(b.shape())));
    c.lhs.batch.push_back(da);
    c.rhs.batch.push_back(db);
  }
  c.lhs.contract = {ka};
  c.rhs.contract = {kb};
  if (ra >= 2) c.lhs.free = {ra - 2};
  if (rb >= 2) c.rhs.free = {rb - 1};
  return contract(a, b, std::move(c), opt, op);
}

Array dot(const Array& a, const Array& b, const OutOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "dot";
  check_operands(a, b, op);
  const int ra = a.ndim(), rb = b.ndim();
  Contraction c;
  if (ra > 0 && rb > 0) {
    // Last dim of a with the second-to-last of b (its only dim when 1-d).
    const int ka = ra - 1, kb = rb >= 2 ? rb - 2 : 0;
    if (a.shape()[ka] != b.shape()[kb]) throw ShapeError(msg(op, differ("contracting", a, b)));
    c.lhs.contract = {ka};
    c.rhs.contract = {kb};
  }
  c.lhs.free = rest(ra, c.lhs.contract, {});
  c.rhs.free = rest(rb, c.rhs.contract, {});
  return contract(a, b, std::move(c), opt, op);
}

Array einsum(const std::string& subscripts, const Array& a, const Array& b, const OutOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "einsum";
  check_operands(a, b, op);
  const std::string quoted = "'" + subscripts + "'";
  std::string s;
  for (char ch : subscripts)
    if (ch != ' ') s += ch;
  if (s.find("...") != std::string::npos)
    throw ShapeError(msg(op, "ellipsis ('...') is not supported yet, got " + quoted));
  const auto arrow = s.find("->");
  const bool implicit = arrow == std::string::npos;
  const std::string ins = implicit ? s : s.substr(0, arrow);
  std::string outs = implicit ? "" : s.substr(arrow + 2);
  const auto comma = ins.find(',');
  if (comma == std::string::npos || ins.find(',', comma + 1) != std::string::npos)
    throw ShapeError(msg(op, "expected subscripts for exactly two operands like 'ij,jk->ik', got " + quoted));
  const std::string li = ins.substr(0, comma), ri = ins.substr(comma + 1);
  auto check_labels = [&](const std::string& labels, const char* what) {
    for (size_t i = 0; i < labels.size(); ++i) {
      const char ch = labels[i];
      if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')))
        throw ShapeError(msg(op, "invalid character '" + std::string(1, ch) + "' in " + what + " of " + quoted +
                                     " (labels are letters)"));
      if (labels.find(ch, i + 1) != std::string::npos)
        throw ShapeError(msg(op, "label '" + std::string(1, ch) + "' repeats in " + what + " '" + labels + "' of " +
                                     quoted + "; diagonals and traces are not supported yet"));
    }
  };
  check_labels(li, "the lhs subscripts");
  check_labels(ri, "the rhs subscripts");
  if (static_cast<int>(li.size()) != a.ndim() || static_cast<int>(ri.size()) != b.ndim())
    throw ShapeError(msg(op, "subscripts " + quoted + " name " + std::to_string(li.size()) + " and " +
                                 std::to_string(ri.size()) + " dims, but the operands have shapes lhs " +
                                 shape_str(a.shape()) + " and rhs " + shape_str(b.shape())));
  if (implicit) {
    // NumPy: labels appearing once, sorted.
    for (char ch : li + ri)
      if (std::count(li.begin(), li.end(), ch) + std::count(ri.begin(), ri.end(), ch) == 1) outs += ch;
    std::sort(outs.begin(), outs.end());
  }
  check_labels(outs, "the output subscripts");
  for (char ch : outs)
    if (li.find(ch) == std::string::npos && ri.find(ch) == std::string::npos)
      throw ShapeError(msg(op, "output label '" + std::string(1, ch) + "' of " + quoted +
                                   " appears in no operand"));
  for (size_t i = 0; i < li.size(); ++i) {
    const auto j = ri.find(li[i]);
    if (j != std::string::npos && a.shape()[i] != b.shape()[j])
      throw ShapeError(msg(op, "label '" + std::string(1, li[i]) + "' has size " + std::to_string(a.shape()[i]) +
                                   " in lhs " + shape_str(a.shape()) + " but " + std::to_string(b.shape()[j]) +
                                   " in rhs " + shape_str(b.shape())));
  }
  Contraction c;
  std::string canon;
  for (char ch : outs) {
    const auto i = li.find(ch), j = ri.find(ch);
    if (i != std::string::npos && j != std::string::npos) {
      c.lhs.batch.push_back(static_cast<int>(i));
      c.rhs.batch.push_back(static_cast<int>(j));
      canon += ch;
    }
  }
  for (size_t i = 0; i < li.size(); ++i) {
    const auto j = ri.find(li[i]);
    const bool in_out = outs.find(li[i]) != std::string::npos;
    if (j != std::string::npos && !in_out) {
      c.lhs.contract.push_back(static_cast<int>(i));
      c.rhs.contract.push_back(static_cast<int>(j));
    } else if (j == std::string::npos) {
      (in_out ? c.lhs.free : c.lhs.summed).push_back(static_cast<int>(i));
      if (in_out) canon += li[i];
    }
  }
  for (size_t j = 0; j < ri.size(); ++j) {
    if (li.find(ri[j]) != std::string::npos) continue;
    const bool in_out = outs.find(ri[j]) != std::string::npos;
    (in_out ? c.rhs.free : c.rhs.summed).push_back(static_cast<int>(j));
    if (in_out) canon += ri[j];
  }
  for (char ch : outs) c.out_perm.push_back(static_cast<int>(canon.find(ch)));
  return contract(a, b, std::move(c), opt, op);
}

}  // namespace tessera
