// Automatic differentiation: the JVP trace (forward mode), the linear trace
// and its transposition (reverse mode), and the Jacobians built on them.
//
// Forward mode. A JvpTrace's values carry a primal and a tangent (an empty
// tangent is a zero). Binding a primitive calls its JVP rule in the parent
// trace: the rule computes the primal results with ordinary ops and the
// tangents with ops on the tangents.
//
// Reverse mode is forward mode plus transposition, as in JAX. vjp pushes a
// LinearTrace under a JvpTrace and feeds the JvpTrace tangents that are the
// LinearTrace's values. The primal computation (no linear values) passes
// through the LinearTrace to the trace outside; the tangent computation is
// recorded there as a linear program: equations whose operands are linear
// values or constants (primal intermediates). Transposition walks that
// program backwards, calling each primitive's transpose rule with the
// cotangents of its results and accumulating the cotangents of its linear
// operands. The rules are ops, so the backward pass runs wherever it is
// called: eagerly, inside jit (one compiled program for forward and
// backward) or under vmap (jacrev's rows of the Jacobian).
#include "tessera/autodiff.hpp"

#include <algorithm>

#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/elementwise.hpp"
#include "primitives/linalg.hpp"
#include "transforms/rules/rules.hpp"
#include "sharding/propagate.hpp"
#include "tessera/ops.hpp"
#include "tessera/shard_map.hpp"
#include "transforms/shard_map.hpp"
#include "transforms/trace.hpp"

namespace tessera {
namespace detail {

namespace {

struct Dual {
  Array primal, tangent;
};

// `t` laid out as `s` (a no-op when it is already, or is empty).
Array like(const Array& t, const NamedSharding& s) {
  if (!t.valid() || t.sharding() == s) return t;
  return reshard(t, s);
}

class JvpTrace final : public Trace {
 public:
  Array wrap(Array primal, Array tangent) {
    if (!tangent.valid() || !has_tangent(primal.dtype())) return primal;
    Shape shape = primal.shape();
    NamedSharding sharding = primal.sharding();
    const DType dtype = primal.dtype();
    return make_tracer(this, std::move(shape), dtype, std::move(sharding),
                       std::make_shared<const Dual>(Dual{std::move(primal), std::move(tangent)}), "jvp");
  }
  Dual unwrap(const Array& a) const {
    if (!owns(a)) return {a, Array()};
    return payload_of<Dual>(a);
  }
  std::vector<Array> process(const PrimitivePtr& prim, const std::vector<Array>& args) override {
    bool ours = false;
    for (const Array& a : args) ours = ours || owns(a);
    std::vector<Array> t_out, out;
    {
      TraceScope up(parent());
      if (!ours) return bind(prim, args);
      std::vector<Array> primals, tangents;
      for (const Array& a : args) {
        Dual d = unwrap(a);
        primals.push_back(std::move(d.primal));
        tangents.push_back(std::move(d.tangent));
      }
      // A tangent has its primal's type, layout included (as in JAX): a
      // rule then combines values laid out alike, and a tangent made by a
      // rule in another layout (a broadcast, a contraction) is brought back.
      // The rule meets primals and tangents elementwise: all are first
      // laid out as the op's kernel would see them (the partition it would
      // run with), so that operands an op reconciles itself (by its
      // out_sharding, say) do not meet in their own layouts.
      {
        const auto in = abstract_of(primals);
        const Partition part = partition(*prim, in, prim->infer(in));
        for (size_t k = 0; k < primals.size() && k < part.operands.size(); ++k) {
          primals[k] = like(primals[k], part.operands[k]);
          tangents[k] = like(tangents[k], part.operands[k]);
        }
      }
      for (size_t k = 0; k < primals.size(); ++k) tangents[k] = like(tangents[k], primals[k].sharding());
      out = prim->jvp(primals, tangents, t_out);
      for (size_t r = 0; r < t_out.size() && r < out.size(); ++r) t_out[r] = like(t_out[r], out[r].sharding());
    }
    t_out.resize(out.size());
    for (size_t r = 0; r < out.size(); ++r) out[r] = wrap(std::move(out[r]), std::move(t_out[r]));
    return out;
  }
};

// The linear program: values are numbered; operands are a value or a
// constant.
struct LinearEqn {
  PrimitivePtr prim;
  std::vector<int> in;           // value number, or -1 for a constant
  std::vector<Array> constants;  // the constant operands (empty where in[k] >= 0)
  std::vector<AbstractArray> types;
  std::vector<int> out;
};

class LinearTrace final : public Trace {
 public:
  std::vector<AbstractArray> values;
  std::vector<LinearEqn> eqns;

  Array new_value(const AbstractArray& t) {
    const int id = static_cast<int>(values.size());
    values.push_back(t);
    return make_tracer(this, t.shape, t.dtype, t.sharding, nullptr, "grad", id);
  }

  std::vector<Array> process(const PrimitivePtr& prim, const std::vector<Array>& args) override {
    bool ours = false;
    for (const Array& a : args) ours = ours || owns(a);
    if (!ours) {
      TraceScope up(parent());
      return bind(prim, args);
    }
    LinearEqn e;
    e.prim = prim;
    for (const Array& a : args) {
      e.in.push_back(owns(a) ? a.impl()->value : -1);
      e.constants.push_back(owns(a) ? Array() : a);
    }
    e.types = abstract_of(args);
    const auto types = prim->infer(e.types);
    const Partition part = partition(*prim, e.types, types);
    std::vector<Array> outs;
    for (size_t r = 0; r < types.size(); ++r) {
      outs.push_back(new_value(AbstractArray{types[r].shape, types[r].dtype, part.results[r]}));
      e.out.push_back(outs.back().impl()->value);
    }
    eqns.push_back(std::move(e));
    return outs;
  }

  // The program run forwards: the tangents of values `outputs` from
  // tangents `ts` of values `inputs` (empty: zero). It binds the ops the
  // JVP rules bound, with the same constants, so its results are those
  // jvp would give, bit for bit, without the primal computation.
  //
  // A Jacobian's direction is a one-hot `basis` (a value of the program,
  // made only when an op other than a product needs it): a product with it
  // is a gather (DotGeneral::with_basis).
  struct Basis {
    int value = -1;
    Array index;                // (1,) i32: where the one is
    std::function<Array()> make;  // the direction itself
  };
  std::vector<Array> forward(const std::vector<int>& inputs, const std::vector<Array>& ts,
                             const std::vector<int>& outputs, const Basis* direction = nullptr) const {
    const Basis none;
    const Basis& basis = direction ? *direction : none;
    std::vector<Array> val(values.size());
    for (size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k] >= 0 && inputs[k] != basis.value)
        val[inputs[k]] = like(ts[k], values[static_cast<size_t>(inputs[k])].sharding);
    bool basis_made = basis.value < 0;
    for (const LinearEqn& e : eqns) {
      if (!basis_made) {
        const auto at = std::find(e.in.begin(), e.in.end(), basis.value);
        if (at != e.in.end()) {
          const auto* dot = dynamic_cast<const DotGeneral*>(e.prim.get());
          const int side = static_cast<int>(at - e.in.begin());
          Array got;
          if (dot && e.in.size() == 2 && e.in[1 - side] < 0)
            got = dot->with_basis(side, e.constants[static_cast<size_t>(1 - side)], basis.index);
          if (got.valid()) {
            val[e.out[0]] = like(got, values[static_cast<size_t>(e.out[0])].sharding);
            continue;
          }
          val[basis.value] = like(basis.make(), values[static_cast<size_t>(basis.value)].sharding);
          basis_made = true;
        }
      }
      bool any = false;
      for (int v : e.in) any = any || (v >= 0 && val[v].valid());
      if (!any) continue;  // every linear operand is zero: so are the results
      std::vector<Array> args;
      for (size_t k = 0; k < e.in.size(); ++k)
        args.push_back(e.in[k] < 0 ? e.constants[k] : instantiate(val[e.in[k]], e.types[k]));
      const auto got = bind(e.prim, args);
      for (size_t r = 0; r < e.out.size() && r < got.size(); ++r)
        val[e.out[r]] = like(got[r], values[static_cast<size_t>(e.out[r])].sharding);
    }
    std::vector<Array> out;
    for (int v : outputs) {
      if (v >= 0 && v == basis.value && !val[v].valid()) val[v] = like(basis.make(), values[static_cast<size_t>(v)].sharding);
      out.push_back(v >= 0 ? val[v] : Array());
    }
    return out;
  }

  // Cotangents of values `inputs` from cotangents `cts` of values `outputs`
  // (-1: not a value of the program; its cotangent is dropped).
  std::vector<Array> transpose(const std::vector<int>& inputs, const std::vector<int>& outputs,
                               const std::vector<Array>& cts) const {
    std::vector<Array> ct(values.size());
    // Every cotangent is laid out as its value (as in JAX): contributions
    // from rules that produce another layout are brought to it before they
    // are summed, and each rule sees its results' cotangents in their layout.
    for (size_t k = 0; k < outputs.size(); ++k)
      if (outputs[k] >= 0 && cts[k].valid())
        ct[outputs[k]] = add_tangents(ct[outputs[k]], like(cts[k], values[static_cast<size_t>(outputs[k])].sharding));
    for (size_t i = eqns.size(); i-- > 0;) {
      const LinearEqn& e = eqns[i];
      std::vector<Array> c;
      bool any = false;
      for (int v : e.out) {
        c.push_back(ct[v]);
        any = any || ct[v].valid();
        ct[v] = Array();  // not needed again: frees it as soon as possible
      }
      if (!any) continue;
      std::vector<bool> linear;
      for (int v : e.in) linear.push_back(v >= 0);
      const auto got = e.prim->transpose(c, e.constants, e.types, linear);
      for (size_t k = 0; k < e.in.size(); ++k) {
        if (e.in[k] < 0 || k >= got.size() || !got[k].valid()) continue;
        Array g = got[k];
        if (g.shape() != e.types[k].shape)
          throw Error(msg(std::string(e.prim->name()).c_str(),
                          "internal: the transpose rule gave a cotangent of shape " + shape_str(g.shape()) +
                              " for an operand of shape " + shape_str(e.types[k].shape)));
        ct[e.in[k]] = add_tangents(ct[e.in[k]], like(g, e.types[k].sharding));
      }
    }
    std::vector<Array> out;
    for (int v : inputs) out.push_back(v >= 0 ? ct[v] : Array());
    return out;
  }
};

// The cotangent of `primal`: zeros for none, laid out like the primal.
Array finish_cotangent(const Array& ct, const Array& primal) {
  if (!ct.valid()) return zeros(primal.shape(), primal.dtype(), primal.sharding(), {});
  Array c = ct.dtype() == primal.dtype() ? ct : astype(ct, primal.dtype(), {});
  if (!(c.sharding() == primal.sharding())) c = with_sharding_constraint(c, primal.sharding(), {});
  return c;
}

void check_inputs(const std::vector<Array>& xs, const char* name) {
  for (size_t i = 0; i < xs.size(); ++i)
    if (!xs[i].valid()) throw Error(msg(name, "array " + std::to_string(i) + " of the inputs is empty"));
}

}  // namespace

JitResult jvp_call(const TraceFn& f, const std::vector<Array>& primals_in, const std::vector<Array>& tangents_in,
                   std::vector<Array>& tangents_out) {
  // Inside a shard_map body: captures as local copies.
  const std::vector<Array> primals = manual_inputs(primals_in), tangents = manual_inputs(tangents_in);
  const char* name = "jvp";
  check_inputs(primals, name);
  if (tangents.size() != primals.size())
    throw ShapeError(msg(name, "got " + std::to_string(tangents.size()) + " tangents for " +
                                   std::to_string(primals.size()) + " primals"));
  for (size_t i = 0; i < primals.size(); ++i) {
    if (!tangents[i].valid()) continue;
    if (tangents[i].shape() != primals[i].shape() || tangents[i].dtype() != primals[i].dtype())
      throw ShapeError(msg(name, "tangent " + std::to_string(i) + " is " + typeof(tangents[i]) + " but its primal is " +
                                     typeof(primals[i]) + "; they must have the same shape and dtype"));
  }
  JvpTrace trace;
  std::vector<Array> in;
  for (size_t i = 0; i < primals.size(); ++i) in.push_back(trace.wrap(primals[i], tangents[i]));
  auto tree = std::make_shared<std::any>();
  std::vector<Array> outs;
  {
    TraceScope scope(&trace);
    outs = f(in, *tree);
  }
  std::vector<Array> res;
  tangents_out.clear();
  for (const Array& o : outs) {
    Dual d = trace.unwrap(o);
    tangents_out.push_back(d.tangent.valid() ? d.tangent : zeros(d.primal.shape(), d.primal.dtype(), d.primal.sharding(), {}));
    res.push_back(std::move(d.primal));
  }
  return {std::move(res), std::move(tree)};
}

struct VjpState {
  LinearTrace lin;
  std::vector<int> inputs, outputs;
  std::vector<Array> primals, results;
};

// Runs f once under a JVP trace whose tangents are the values of a linear
// trace: the primal results come back in `outs`, the tangent computation is
// recorded in st->lin (vjp transposes it; jacfwd runs it forwards).
static std::shared_ptr<VjpState> linearize(const TraceFn& f, const std::vector<Array>& primals, std::any& tree,
                                    std::vector<Array>& outs) {
  auto st = std::make_shared<VjpState>();
  st->primals = primals;
  {
    TraceScope lin_scope(&st->lin);
    JvpTrace jvp;  // made inside: its rules' tangent ops reach the linear trace
    std::vector<Array> in;
    for (const Array& p : primals) {
      if (!has_tangent(p.dtype())) {
        in.push_back(p);
        st->inputs.push_back(-1);
        continue;
      }
      Array t = st->lin.new_value(AbstractArray{p.shape(), p.dtype(), p.sharding()});
      st->inputs.push_back(t.impl()->value);
      in.push_back(jvp.wrap(p, t));
    }
    TraceScope scope(&jvp);
    outs = f(in, tree);
    for (Array& o : outs) {
      Dual d = jvp.unwrap(o);
      st->outputs.push_back(st->lin.owns(d.tangent) ? d.tangent.impl()->value : -1);
      o = d.primal;
    }
  }
  return st;
}

JitResult vjp_call(const TraceFn& f, const std::vector<Array>& primals_in, Pullback& pullback) {
  const std::vector<Array> primals = manual_inputs(primals_in);  // inside a shard_map body: captures as local copies
  check_inputs(primals, "vjp");
  auto tree = std::make_shared<std::any>();
  std::vector<Array> outs;
  auto st = linearize(f, primals, *tree, outs);
  st->results = outs;
  pullback = [st](const std::vector<Array>& cts) {
    if (cts.size() != st->outputs.size())
      throw ShapeError(msg("vjp", "the pullback takes " + std::to_string(st->outputs.size()) + " cotangents, got " +
                                      std::to_string(cts.size())));
    for (size_t k = 0; k < cts.size(); ++k)
      if (cts[k].valid() && cts[k].shape() != st->results[k].shape())
        throw ShapeError(msg("vjp", "cotangent " + std::to_string(k) + " is " + typeof(cts[k]) + " but the result is " +
                                        typeof(st->results[k])));
    auto g = st->lin.transpose(st->inputs, st->outputs, cts);
    std::vector<Array> out;
    for (size_t i = 0; i < g.size(); ++i) {
      // Inside a shard_map body: an input invariant over a manual axis that
      // met values varying over it was implicitly broadcast (JAX's
      // pbroadcast), whose transpose sums over the axis. Every transpose is
      // linear, so the sum is taken once, on the input's cotangent.
      if (in_manual_body() && g[i].valid()) {
        std::vector<std::string> extra;
        const auto have = varying_axes(*st->primals[i].impl());
        for (const auto& a : varying_axes(*g[i].impl()))
          if (std::find(have.begin(), have.end(), a) == have.end()) extra.push_back(a);
        if (!extra.empty()) g[i] = psum(g[i], AxisNames(extra));
      }
      out.push_back(finish_cotangent(g[i], st->primals[i]));
    }
    return out;
  };
  return {std::move(outs), std::move(tree)};
}

Array jacobian_call(const std::function<Array(const Array&)>& f, const Array& x_in, std::int64_t chunk, bool forward,
                    const char* name) {
  if (!x_in.valid()) throw Error(msg(name, "the input is empty"));
  const Array x = manual_inputs({x_in}).front();  // inside a shard_map body: a capture as the local copy
  if (!has_tangent(x.dtype()))
    throw DTypeError(msg(name, "the input must be floating point, got " + typeof(x)));
  const NamedSharding rep(x.sharding().mesh(), P());
  // The basis directions are mapped over as indices, each made one-hot
  // inside the map, so a chunk of c directions holds c basis arrays, never
  // the whole n x n identity.
  auto indices = [&](const Array& like) { return arange(0, static_cast<double>(like.size()), 1, DType::i32, rep); };
  // A direction is laid out as the array it is a direction of: a device
  // holds the part of each one-hot over its own block (a local slice of
  // the replicated positions), not the whole.
  auto one_hot = [&](const Array& idx, const Array& like) {
    Array pos = reshape(indices(like), like.shape());
    if (!(pos.sharding() == like.sharding())) pos = with_sharding_constraint(pos, like.sharding());
    return astype(equal(pos, idx), like.dtype());
  };
  // The columns as the Jacobian: f(x).shape + x.shape.
  auto jacobian_shape = [&](const Array& columns, const Array& y) {
    Shape js = y.shape();
    js.insert(js.end(), x.shape().begin(), x.shape().end());
    return reshape(columns, js);
  };
  VmapOptions opt;
  opt.chunk_size = chunk;
  Array cols;  // (*out, n) for forward, (m, *in) for reverse
  TraceFn one = [&](const std::vector<Array>& a, std::any&) { return std::vector<Array>{f(a[0])}; };
  if (forward) {
    // Linearized once: the primal computation runs here, and each chunk of
    // directions runs only the recorded tangent program (the products with
    // the directions), as JAX's jacfwd does under jit once XLA hoists the
    // loop-invariant primal out of its map.
    std::any tree;
    std::vector<Array> outs;
    const auto st = linearize(one, {x}, tree, outs);
    const Array y = outs[0];
    TraceFn g = [&](const std::vector<Array>& idx, std::any&) {
      if (st->outputs[0] < 0) return std::vector<Array>{zeros(y.shape(), y.dtype(), y.sharding(), {})};
      LinearTrace::Basis basis{st->inputs[0], reshape(idx[0], {1}), [&] { return one_hot(idx[0], x); }};
      auto t = st->lin.forward(st->inputs, {Array()}, st->outputs, &basis);
      return std::vector<Array>{instantiate(t[0], type_of(y))};
    };
    // The directions go last, (*out, n): a chunk's columns are written
    // straight into their place, with no transposed copy of the whole.
    opt.out_axes = {-1};
    cols = vmap_call({indices(x)}, {0}, opt, g, name, true).outs[0];
    return jacobian_shape(cols, y);
  }
  Pullback back;
  auto r = vjp_call(one, {x}, back);
  const Array y = r.outs[0];
  if (!has_tangent(y.dtype())) throw DTypeError(msg(name, "the function's result must be floating point, got " + typeof(y)));
  TraceFn g = [&](const std::vector<Array>& idx, std::any&) { return back({one_hot(idx[0], y)}); };
  cols = vmap_call({indices(y)}, {0}, opt, g, name, true).outs[0];
  return jacobian_shape(cols, y);
}

}  // namespace detail

Array stop_gradient(const Array& x, std::source_location loc) {
  detail::CallSite site(loc);
  detail::check_operand(x, "stop_gradient");
  return detail::bind1(detail::make_stop_gradient(), {x});
}

}  // namespace tessera
