// shard_map: runs a per-device body on local blocks and assembles the
// outputs; the manual-mode collectives; the hooks that track which manual
// axes each local value varies over.
//
// A call reshards the inputs to in_specs and runs the body on every device's
// worker at once as one SPMD program (spmd/program.hpp: one session,
// calls one at a time, a failing body wakes the others and the caller gets
// the first real error). Collectives reach the other devices through the
// communicator's per-member Group, built for each call from the named axes.
// Each body sees single-device arrays; ops inside run inline on the worker.
// A thread-local context gives collectives their device, mesh and session.
// Outputs
// are checked against out_specs and assembled without copying: the global
// array's buffers are the local ones.
//
// Varying axes (check_vma). Every member's body runs under a ManualTrace:
// each primitive an op binds goes through it, and its results vary over the
// union of its operands' axes. Inputs vary over the axes their spec names;
// collectives set their result's axes explicitly (psum removes the reduced
// axes, all_gather too, ppermute adds them). The axes live in the trace's
// table, keyed by value, not in the values.
#include "transforms/shard_map.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <unordered_map>

#include "comm/communicator.hpp"
#include "spmd/member.hpp"
#include "comm/process.hpp"
#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "transforms/rules/rules.hpp"
#include "runtime/timeline.hpp"
#include "core/check_spec.hpp"
#include "sharding/propagate.hpp"
#include "tessera/autodiff.hpp"
#include "spmd/program.hpp"
#include "transforms/trace.hpp"

namespace tessera {

namespace detail {

namespace {

// (collective, bytes received) per collective a device ran, for explain.
using CommLog = std::vector<std::pair<std::string, std::int64_t>>;

struct ManualContext {
  Mesh mesh;                  // the shard_map mesh
  int pos = 0;                // this device's position in it
  Mesh local_mesh;            // the single-device mesh of local values
  Session* session = nullptr;
  // Varying axes per value made in the body (the owner guards against a
  // freed value's address being reused).
  struct Varying {
    std::weak_ptr<const ArrayImpl> owner;
    std::vector<std::string> axes;
  };
  std::unordered_map<const ArrayImpl*, Varying> vma;
  CommLog log;
  std::unordered_map<const ArrayImpl*, std::shared_ptr<const ArrayImpl>> localized;
};

thread_local ManualContext* t_ctx = nullptr;

std::vector<std::string> vma_of(const ManualContext& c, const Array& x) {
  const auto& impl = x.impl();
  auto it = c.vma.find(impl.get());
  if (it == c.vma.end() || it->second.owner.lock() != impl) return {};
  return it->second.axes;
}

void set_vma(ManualContext& c, const Array& x, std::vector<std::string> axes) {
  const auto& impl = x.impl();
  if (axes.empty()) {
    c.vma.erase(impl.get());
    return;
  }
  c.vma[impl.get()] = {impl, std::move(axes)};
}

std::vector<std::string> merged(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  std::sort(a.begin(), a.end());
  a.erase(std::unique(a.begin(), a.end()), a.end());
  return a;
}


// With a mesh over several processes, the outputs of other processes'
// devices are known here only by their types: every process learns every
// position's output shapes and dtypes (a gather over processes), so each
// assembles the same global shapes and checks the same things. Those
// outputs stand in as arrays without data. The positions' collective logs
// travel along, so that explain() reports every device's traffic, the same
// on every process.
void share_member_results(const Mesh& mesh, std::vector<std::vector<Array>>& outs,
                          std::vector<std::vector<std::vector<std::string>>>& out_vma, std::vector<CommLog>& logs) {
  const Runtime& rt = Runtime::get();
  // Every process takes part, even when the mesh lies on one process only:
  // the others call the shard_map too and need its outputs' types. A
  // process takes from another only the positions whose devices that
  // process holds (with meshes of each process's own devices, called by
  // all at once, nothing is taken).
  if (rt.process_count() == 1) return;
  // [pos, nout, (dtype, ndim, dims...)..., nlog, (bytes, name length, name
  // characters one per word)...] for each local position.
  std::vector<std::int64_t> mine;
  for (int pos = 0; pos < mesh.size(); ++pos) {
    if (!rt.is_local(mesh.devices()[pos].id())) continue;
    mine.push_back(pos);
    mine.push_back(static_cast<std::int64_t>(outs[pos].size()));
    for (const Array& o : outs[pos]) {
      mine.push_back(static_cast<std::int64_t>(o.dtype()));
      mine.push_back(o.ndim());
      for (auto v : o.shape()) mine.push_back(v);
    }
    mine.push_back(static_cast<std::int64_t>(logs[pos].size()));
    for (const auto& [name, bytes] : logs[pos]) {
      mine.push_back(bytes);
      mine.push_back(static_cast<std::int64_t>(name.size()));
      for (char ch : name) mine.push_back(static_cast<unsigned char>(ch));
    }
  }
  const auto parts = allgather_processes(mine.data(), mine.size() * sizeof(std::int64_t), "shard_map");
  for (int p = 0; p < static_cast<int>(parts.size()); ++p) {
    if (p == rt.process_index()) continue;
    std::vector<std::int64_t> v(parts[p].size() / sizeof(std::int64_t));
    if (!v.empty()) std::memcpy(v.data(), parts[p].data(), parts[p].size());
    for (size_t i = 0; i < v.size();) {
      const int pos = static_cast<int>(v[i++]);
      const bool theirs = pos >= 0 && pos < mesh.size() && rt.process_of(mesh.devices()[pos].id()) == p;
      const auto nout = static_cast<size_t>(v[i++]);
      std::vector<Array> o;
      for (size_t k = 0; k < nout; ++k) {
        const auto dtype = static_cast<DType>(v[i++]);
        const auto ndim = static_cast<size_t>(v[i++]);
        Shape shape(v.begin() + static_cast<std::ptrdiff_t>(i), v.begin() + static_cast<std::ptrdiff_t>(i + ndim));
        i += ndim;
        if (!theirs) continue;
        const Mesh one(std::vector<Device>{mesh.devices()[pos]}, {1}, {"_"});
        auto impl = std::make_shared<ArrayImpl>(shape, dtype, NamedSharding(one, P()));
        impl->buffers.emplace_back();
        o.push_back(Array(std::move(impl)));
      }
      const auto nlog = static_cast<size_t>(v[i++]);
      CommLog log;
      for (size_t k = 0; k < nlog; ++k) {
        const std::int64_t bytes = v[i++];
        const auto len = static_cast<size_t>(v[i++]);
        std::string name;
        for (size_t c = 0; c < len; ++c) name += static_cast<char>(v[i++]);
        log.emplace_back(std::move(name), bytes);
      }
      if (!theirs) continue;
      outs[pos] = std::move(o);
      out_vma[pos].assign(nout, {});
      logs[pos] = std::move(log);
    }
  }
}

ManualContext& context(const char* op) {
  if (!t_ctx)
    throw CollectiveError(std::string("[") + op + "] collectives are valid only inside shard_map bodies");
  return *t_ctx;
}

// This device's view of its group for a collective over `axes`.
std::unique_ptr<Group> group_for(ManualContext& c, const std::vector<std::string>& axes, const char* op) {
  const Mesh& m = c.mesh;
  if (axes.empty()) throw CollectiveError(std::string("[") + op + "] expected at least one axis name");
  std::vector<bool> named(m.ndim(), false);
  for (const auto& a : axes) {
    const int i = m.axis_index(a);
    if (i < 0) throw ShardingError(std::string("[") + op + "] no axis named '" + a + "' in " + m.str());
    if (named[i]) throw ShardingError(std::string("[") + op + "] axis '" + a + "' is named twice");
    named[i] = true;
  }
  return communicator_for(m).group(*c.session, m, axes, c.pos, op);
}

// `x` as the body of `c` reads it (see manual_inputs in shard_map.hpp): a
// global array the body captured is fine when replicated (it reads as this
// device's copy), an error otherwise. A 1-device array of the shard_map's
// own 1-device mesh is such a capture too: it is localized, so that it
// meets the body's values on the local mesh.
Array localize(ManualContext& c, const Array& x) {
  if (!x.valid()) return x;
  const std::shared_ptr<const ArrayImpl>& a = x.impl();
  const Mesh& m = a->sharding.mesh();
  if (a->trace || m == c.local_mesh) return x;  // the body's own (or a transformation's) value
  auto it = c.localized.find(a.get());
  if (it != c.localized.end()) return Array(it->second);
  const int pos = m.device_position(c.local_mesh.devices()[0]);
  if (pos < 0 || !a->sharding.is_fully_replicated())
    throw ShardingError("[shard_map] the body uses an array laid out as " + a->sharding.str() +
                        " that is not one of its inputs; pass it as an argument with an in_spec (only replicated "
                        "arrays on the same devices can be captured)");
  auto local = std::make_shared<ArrayImpl>(a->shape, a->dtype, NamedSharding(c.local_mesh, P()));
  local->buffers.push_back(a->buffers[pos]);
  return Array(c.localized.emplace(a.get(), std::move(local)).first->second);
}

Local local_of(const Array& x0) {
  const Array x = t_ctx ? localize(*t_ctx, x0) : x0;
  const auto& impl = x.impl();
  return {impl->buffers.at(0), impl->shape, impl->dtype};
}

// Records a collective for ts::explain: bytes this device received from the
// others by the usual algorithmic count (all-reduce 2(n-1)/n of the data,
// gathers and scatters (n-1)/n, a permute all of it when it receives).
void log_comm(ManualContext& c, const char* op, std::int64_t bytes) { c.log.emplace_back(op, bytes); }

std::int64_t nbytes(const Local& l) { return num_elements(l.shape) * static_cast<std::int64_t>(itemsize(l.dtype)); }

// A local value made by a collective, varying over `vma`.
Array make_local(ManualContext& c, const Local& l, std::vector<std::string> vma) {
  auto impl = std::make_shared<ArrayImpl>(l.shape, l.dtype, NamedSharding(c.local_mesh, P()));
  impl->buffers.push_back(l.data);
  Array a(std::move(impl));
  set_vma(c, a, std::move(vma));
  return a;
}

// The partition of a primitive applied to body values. An elementwise
// computation on the body's one-device mesh has a single answer (every
// operand and result whole on the device), given here without the sharding
// search: with eight members on two cores the search cost as much as the
// op.
Partition local_partition(const Primitive& prim, const std::vector<AbstractArray>& in,
                          const std::vector<TypeInfo>& types) {
  if (in.empty()) return partition(prim, in, types);
  const Mesh& local = in.front().sharding.mesh();
  bool trivial = local.size() == 1 && !prim.out_spec() && prim.element_expr().has_value();
  for (const AbstractArray& a : in) {
    if (!trivial) break;
    trivial = a.sharding.mesh() == local;
    for (const auto& e : a.sharding.spec().entries()) trivial = trivial && e.axes().empty();
  }
  if (!trivial) return partition(prim, in, types);
  Partition p;
  for (const AbstractArray& a : in) p.operands.push_back(a.sharding);
  p.local.assign(types.size(), NamedSharding(local, P()));
  p.combined = p.results = p.local;
  return p;
}

// The trace of one member's body: runs every primitive at once on the
// local values and gives its results the union of its operands' varying
// axes (a result that is one of the operands keeps its own).
class ManualTrace final : public Trace {
 public:
  explicit ManualTrace(ManualContext& c) : c_(c) {}
  // (bind() has read captured operands as local copies already.)
  std::vector<Array> process(const PrimitivePtr& prim, const std::vector<Array>& args) override {
    std::vector<std::string> axes;
    for (const Array& a : args) axes = merged(std::move(axes), vma_of(c_, a));
    // The body runs on one device's worker: an op whose result is laid out
    // over other devices (an array made with the mesh's sharding, say) would
    // wait for workers that are running their own bodies, forever. Raise.
    const auto in = abstract_of(args);
    const auto types = prim->infer(in);
    const Partition part = local_partition(*prim, in, types);
    for (const NamedSharding& r : part.results) {
      const auto& d = r.mesh().devices();
      if (!(r.mesh() == c_.local_mesh) && !(d.size() == 1 && d[0] == c_.local_mesh.devices()[0]))
        throw ShardingError(msg(std::string(prim->name()).c_str(),
                                "inside a shard_map body (or a chunked vmap over a sharded batch) its result would "
                                "be laid out as " +
                                    r.str() +
                                    ", over other devices than the body's own; make it "
                                    "outside and pass it in, or make it without a sharding"));
    }
    // The body's values are this device's own: whole-mesh evaluation of a
    // one-device mesh runs inline on this worker.
    std::vector<Array> out = eval_partitioned(ExecContext::whole(), *prim, args, types, part);
    if (!axes.empty())
      for (const Array& o : out) {
        bool operand = false;
        for (const Array& a : args) operand = operand || a.impl() == o.impl();
        if (!operand) set_vma(c_, o, axes);
      }
    return out;
  }

 private:
  ManualContext& c_;
};

std::vector<std::string> without(std::vector<std::string> v, const std::vector<std::string>& axes) {
  v.erase(std::remove_if(v.begin(), v.end(),
                         [&](const std::string& a) { return std::find(axes.begin(), axes.end(), a) != axes.end(); }),
          v.end());
  return v;
}

// A value of vmap, jvp or grad (not of jit): it has no local block.
bool transformed(const Array& x) {
  return x.valid() && x.impl()->trace && std::string_view(x.impl()->traced_by) != "jit";
}

void check_local(const Array& x, const char* op) {
  if (!x.valid()) throw Error(std::string("[") + op + "] the operand is an empty (default-constructed) array");
  // Collectives act on the local blocks directly; the transformable ones
  // bind a primitive for such values before they get here.
  if (transformed(x))
    throw Error(std::string("[") + op + "] does not support values traced by " + x.impl()->traced_by +
                " yet (a " + x.impl()->traced_by + " of a shard_map whose body uses collectives); apply " +
                x.impl()->traced_by + " to the collective-free part of the body instead");
}

}  // namespace

// ------------------------------------------------------- the body's reads

bool in_manual_body() { return t_ctx != nullptr; }

std::vector<Array> manual_inputs(std::vector<Array> args) {
  if (t_ctx)
    for (Array& a : args) a = localize(*t_ctx, a);
  return args;
}

std::vector<std::string> varying_axes(const ArrayImpl& a) {
  if (!t_ctx) return {};
  auto it = t_ctx->vma.find(&a);
  if (it == t_ctx->vma.end() || it->second.owner.lock().get() != &a) return {};
  return it->second.axes;
}

void manual_results(const std::vector<Array>& in, const std::vector<Array>& out) {
  if (!t_ctx) return;
  std::vector<std::string> axes;
  for (const Array& a : in) axes = merged(std::move(axes), vma_of(*t_ctx, a));
  if (!axes.empty())
    for (const Array& o : out) set_vma(*t_ctx, o, axes);
}

// --------------------------------------------------------------- the call

namespace {

// Runs the body as member `pos` of `session` on its blocks of `inputs` (laid
// out per the in_specs): its outputs, their varying axes and what its
// collectives moved.
void run_member_body(const ShardMapBody& body, const Mesh& mesh, int pos, Session& session,
                     const std::vector<Array>& inputs, std::vector<Array>& outs,
                     std::vector<std::vector<std::string>>& out_vma,
                     CommLog& log) {
  const Device dev = mesh.devices()[pos];
  ManualContext c{mesh, pos, Mesh(std::vector<Device>{dev}, {1}, {"_"}), &session, {}, {}, {}};
  // The context is cleared and the log kept however the body ends.
  struct Leave {
    ManualContext& c;
    CommLog& log;
    ~Leave() {
      t_ctx = nullptr;
      log = std::move(c.log);
    }
  } leave{c, log};
  // The local blocks, made before the context is set (they read the global
  // inputs); each varies over the axes its spec names.
  std::vector<Array> local;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto impl = std::make_shared<ArrayImpl>(inputs[i].sharding().shard_shape(inputs[i].shape(), pos),
                                            inputs[i].dtype(), NamedSharding(c.local_mesh, P()));
    impl->buffers.push_back(inputs[i].impl()->buffers[pos]);
    std::vector<std::string> axes;
    for (int d = 0; d < inputs[i].ndim(); ++d) axes = merged(std::move(axes), inputs[i].sharding().spec()[d].axes());
    local.emplace_back(std::move(impl));
    set_vma(c, local.back(), std::move(axes));
  }
  t_ctx = &c;
  ManualTrace trace(c);
  TraceScope scope(&trace);
  outs = manual_inputs(body(local));  // a captured array returned as it is reads as the local copy
  for (const Array& o : outs) out_vma.push_back(o.valid() ? vma_of(c, o) : std::vector<std::string>{});
}

// check_vma: output k, `o` varying over `vma`, may vary only over the axes
// its out spec names.
void check_out_vma(const PartitionSpec& spec, const std::set<std::string>& named, size_t k, const Array& o,
                   const std::vector<std::string>& vma) {
  for (const auto& a : vma)
    if (!named.count(a))
      throw ShardingError(msg("shard_map", "out_specs " + spec.str() + " for output " + std::to_string(k) +
                                               " claims it is replicated over mesh axis '" + a +
                                               "', but it varies over '" + a + "' (" + typeof_varying(o, vma) +
                                               "); reduce it with psum/all_gather, name '" + a +
                                               "' in out_specs, or pass check_vma=false"));
}

std::set<std::string> named_axes(const PartitionSpec& spec, int rank) {
  std::set<std::string> named;
  for (int d = 0; d < rank; ++d)
    for (const auto& a : spec[d].axes()) named.insert(a);
  return named;
}

std::string specs_text(const std::vector<PartitionSpec>& specs) {
  std::string s = "(";
  for (size_t i = 0; i < specs.size(); ++i) s += (i ? ", " : "") + specs[i].str();
  return s + ")";
}

// shard_map applied to traced values (under jit): a primitive that lowers
// itself, so the compiled program runs the whole call as one global step.
//
// Its result types come from running the call once, at trace time, on zero
// inputs laid out as the real ones. No single abstract trace of the body
// gives them: with uneven blocks each member sees its own shapes, and
// collectives couple them (a tiled all_gather's length is the sum of the
// members' lengths), so the members must run together, as they do here.
// Shapes never depend on values in Tessera's ops, so the probe's types are
// the call's; a body that makes them depend on values (reading a value to
// choose a shape) is caught when the call returns other types. The body
// runs in the probe as it would in a call, so its errors (check_vma ones
// included) surface while tracing, with the user's call site.
class ShardMapPrim final : public Primitive {
 public:
  ShardMapPrim(ShardMapBody body, Mesh mesh, std::vector<PartitionSpec> in_specs,
               std::vector<PartitionSpec> out_specs, ShardMapOptions opt, std::source_location loc,
               std::optional<ShardMapBody> primal = std::nullopt)
      : body_(std::move(body)), mesh_(std::move(mesh)), in_specs_(std::move(in_specs)),
        out_specs_(std::move(out_specs)), opt_(opt), loc_(loc), primal_(std::move(primal)) {}
  std::string_view name() const override { return "shard_map"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!probed_) {
      std::vector<Array> zeros_in;
      TraceScope eager(nullptr);  // the probe runs for real, outside the jit trace
      for (size_t i = 0; i < in.size(); ++i) {
        const NamedSharding s = i < in_specs_.size() ? resolve_spec(mesh_, in_specs_[i], static_cast<int>(in[i].shape.size()), "shard_map")
                                                     : in[i].sharding;
        zeros_in.push_back(zeros(in[i].shape, in[i].dtype, s, std::source_location{}));
      }
      try {
        // The probe's collective records are what every call moves.
        std::vector<CommRecord> records;
        {
          RecordRedirect capture(&records);
          for (const Array& r : shard_map_call(body_, mesh_, in_specs_, out_specs_, opt_, zeros_in))
            types_.push_back(TypeInfo{r.shape(), r.dtype()});
          // One out spec for every output.
          if (out_specs_.size() == 1 && types_.size() != 1) out_specs_.assign(types_.size(), out_specs_[0]);
        }
        for (CommRecord& r : records)
          if (r.op == "shard_map") records_.push_back(std::move(r));
      } catch (const Error&) {
        // An op in the body that raised named its own line; the call's own
        // checks (out_specs, check_vma) name where the shard_map was made.
        note_error_site(loc_);
        throw;
      }
      probed_ = true;
    }
    return types_;
  }
  // For the text forms only: every dim its own factor, kept as it lies.
  ShardingRule rule(std::span<const AbstractArray> in) const override { return own_factor_rule(in, infer(in)); }
  std::string params() const override {
    return "mesh=" + mesh_.str() + " in_specs=" + specs_text(in_specs_) + " out_specs=" + specs_text(out_specs_);
  }
  bool lowers_itself() const override { return true; }
  // The body's ops run on each device as their own ops do (GPUs included).
  bool lowers_on_cuda() const override { return true; }
  void eval_cpu(const LocalArgs&, LocalOuts&) const override {
    throw Error("[shard_map] internal: a primitive that lowers itself has no per-device kernel");
  }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray>,
                                                    const std::vector<TypeInfo>& out) const override {
    std::vector<NamedSharding> l;
    for (size_t k = 0; k < out.size(); ++k)
      l.push_back(resolve_spec(mesh_, out_specs_[k], static_cast<int>(out[k].shape.size()), "shard_map"));
    return l;
  }
  // vmap of a shard_map: the shard_map of the batched body. The batch dim
  // leads every operand and result, unsharded: each device runs its blocks
  // of all examples.
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bdims, std::int64_t size,
                           std::vector<int>& out_bdims) const override {
    std::vector<Array> xs;
    std::vector<PartitionSpec> ins, outs;
    for (size_t i = 0; i < in.size(); ++i) {
      xs.push_back(batch_first(in[i], bdims[i], size));
      ins.push_back(*with_batch_dim(in_specs_[i], 0));
    }
    for (const auto& o : out_specs_) outs.push_back(*with_batch_dim(o, 0));
    ShardMapBody inner = body_;
    ShardMapBody body = [inner](const std::vector<Array>& local) {
      TraceFn fn = [&](const std::vector<Array>& t, std::any&) { return inner(t); };
      return vmap_call(local, std::vector<int>(local.size(), 0), VmapOptions{}, fn, "vmap").outs;
    };
    auto res = shard_map_call(body, mesh_, ins, outs, opt_, xs, loc_);
    out_bdims.assign(res.size(), 0);
    return res;
  }
  // jvp of a shard_map: the primal call, and the shard_map of the body's
  // jvp for the tangents (primals and tangents in, with the same specs;
  // tangents out). The tangent call is a primitive of its own that knows
  // the primal body, so reverse mode can transpose it.
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                         std::vector<Array>& t_out) const override {
    std::vector<Array> y = shard_map_call(body_, mesh_, in_specs_, out_specs_, opt_, p, loc_);
    bool any = false;
    for (const Array& ti : t) any = any || ti.valid();
    t_out.assign(y.size(), Array());
    if (!any) return y;
    std::vector<Array> args = p;
    for (size_t i = 0; i < p.size(); ++i) args.push_back(instantiate(t[i], type_of(p[i])));
    std::vector<PartitionSpec> ins = in_specs_;
    ins.insert(ins.end(), in_specs_.begin(), in_specs_.end());
    ShardMapBody inner = body_;
    const size_t n = p.size();
    ShardMapBody tangent_body = [inner, n](const std::vector<Array>& local) {
      TraceFn fn = [&](const std::vector<Array>& a, std::any&) { return inner(a); };
      std::vector<Array> tan;
      jvp_call(fn, std::vector<Array>(local.begin(), local.begin() + static_cast<long>(n)),
               std::vector<Array>(local.begin() + static_cast<long>(n), local.end()), tan);
      return tan;
    };
    t_out = detail::bind(std::make_shared<ShardMapPrim>(tangent_body, mesh_, ins, out_specs_, opt_, loc_, body_), args);
    return y;
  }
  // The tangent call transposed (reverse mode): on every device the primal
  // body's vjp at its blocks, pulled back from its blocks of the results'
  // cotangents (laid out by out_specs). The forward pass runs again inside
  // (rematerialised) rather than being kept from the forward call. The
  // cotangent of an input replicated over an axis is summed over it inside
  // the body (vjp's implicit-broadcast rule), so it is laid out by its
  // in_spec again.
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                               const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const override {
    const size_t n = in_specs_.size() / 2;
    bool primal_linear = false;
    for (size_t i = 0; i < n && i < linear.size(); ++i) primal_linear = primal_linear || linear[i];
    if (!primal_ || primal_linear)
      throw Error("[shard_map] internal: reverse mode reached a shard_map that is not a JVP's tangent call");
    infer(types);  // the results' types (expands a single out spec)
    std::vector<Array> args(in.begin(), in.begin() + static_cast<long>(n));
    for (size_t k = 0; k < types_.size(); ++k) {
      const PartitionSpec& os = out_specs_.size() == 1 ? out_specs_[0] : out_specs_[k];
      if (k < ct.size() && ct[k].valid()) {
        args.push_back(ct[k]);
        continue;
      }
      args.push_back(zeros(types_[k].shape, types_[k].dtype,
                           resolve_spec(mesh_, os, static_cast<int>(types_[k].shape.size()), "shard_map"), {}));
    }
    std::vector<PartitionSpec> primal_specs(in_specs_.begin(), in_specs_.begin() + static_cast<long>(n));
    std::vector<PartitionSpec> ins = primal_specs;
    for (size_t k = 0; k < types_.size(); ++k) ins.push_back(out_specs_.size() == 1 ? out_specs_[0] : out_specs_[k]);
    ShardMapBody primal = *primal_;
    // Without check_vma, an output the body computed varying over an axis
    // its spec leaves out is taken as replicated there: every replica's body
    // gets its cotangent, and the cotangents of inputs that became varying
    // over that axis are summed over it. As in JAX, each replica gets its
    // share, 1/size per such axis (exact when the replicas agree, as the
    // output spec claims). Under check_vma no output varies over such axes.
    std::vector<std::vector<std::pair<std::string, int>>> shared(types_.size());
    if (!opt_.check_vma)
      for (size_t k = 0; k < types_.size(); ++k) {
        const PartitionSpec& os = out_specs_.size() == 1 ? out_specs_[0] : out_specs_[k];
        const std::set<std::string> named = named_axes(os, static_cast<int>(types_[k].shape.size()));
        for (const auto& a : mesh_.axis_names())
          if (!named.count(a) && mesh_.axis_size(a) > 1) shared[k].emplace_back(a, mesh_.axis_size(a));
      }
    ShardMapBody backward = [primal, n, shared](const std::vector<Array>& local) {
      TraceFn fn = [&](const std::vector<Array>& a, std::any&) { return primal(a); };
      Pullback back;
      const JitResult res = vjp_call(fn, std::vector<Array>(local.begin(), local.begin() + static_cast<long>(n)), back);
      std::vector<Array> cts(local.begin() + static_cast<long>(n), local.end());
      for (size_t k = 0; k < cts.size() && k < res.outs.size() && k < shared.size(); ++k) {
        if (shared[k].empty() || !cts[k].valid() || !has_tangent(cts[k].dtype())) continue;
        const std::vector<std::string> vma = vma_of(*t_ctx, res.outs[k]);
        double share = 1;
        for (const auto& [a, size] : shared[k])
          if (std::find(vma.begin(), vma.end(), a) != vma.end()) share *= size;
        if (share != 1) cts[k] = cts[k] * (1.0 / share);
      }
      return back(cts);
    };
    std::vector<Array> cts = shard_map_call(backward, mesh_, ins, primal_specs, opt_, args, loc_);
    std::vector<Array> r(in_specs_.size());
    for (size_t i = 0; i < n; ++i)
      if (linear[n + i]) r[n + i] = cts[i];
    return r;
  }
  std::vector<Array> eval_global(const ExecContext& ctx, const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                 const std::vector<NamedSharding>& layouts) const override {
    if (MemberContext* m = ctx.member()) return eval_member(*m, in, out, layouts);
    auto res = shard_map_call(body_, mesh_, in_specs_, out_specs_, opt_, in);
    for (size_t k = 0; k < res.size() && k < out.size(); ++k)
      if (res[k].shape() != out[k].shape || res[k].dtype() != out[k].dtype)
        throw ShapeError(msg("shard_map", "under jit, output " + std::to_string(k) + " is " + typeof(res[k]) +
                                              " but was " + dtype_name(out[k].dtype) + shape_str(out[k].shape) +
                                              " when traced; output shapes must not depend on values"));
    return res;
  }

 private:
  ShardMapBody body_;
  Mesh mesh_;
  std::vector<PartitionSpec> in_specs_;
  mutable std::vector<PartitionSpec> out_specs_;  // expanded by the probe when one spec stands for all outputs
  ShardMapOptions opt_;
  std::source_location loc_;
  std::optional<ShardMapBody> primal_;  // a JVP's tangent call: the primal body
  mutable std::mutex mu_;
  mutable bool probed_ = false;
  mutable std::vector<TypeInfo> types_;
  mutable std::vector<CommRecord> records_;

  // The call as member m.pos()'s share of a compiled program (one task per
  // device): this member's body runs on its blocks in the program's
  // session, and its output blocks are the member's blocks of the results.
  std::vector<Array> eval_member(MemberContext& m, const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                 const std::vector<NamedSharding>& layouts) const {
    const char* op = "shard_map";
    if (!(m.mesh() == mesh_))
      throw Error(msg(op, "internal: a call on " + mesh_.str() + " run as a member of a program on " + m.mesh().str()));
    const int pos = m.pos(), n = mesh_.size();
    std::vector<Array> inputs;
    for (size_t i = 0; i < in.size(); ++i)
      inputs.push_back(reshard_for(ExecContext(m), in[i], resolve_spec(mesh_, in_specs_[i], in[i].ndim(), op), op));
    for (const CommRecord& r : records_) record_comm(r);
    std::vector<Array> outs;
    std::vector<std::vector<std::string>> vma;
    CommLog log;
    {
      RecordRedirect drop(nullptr);  // the body's records come from its collectives' log instead
      run_member_body(body_, mesh_, pos, m.session(), inputs, outs, vma, log);
    }
    if (outs.size() != out.size())
      throw ShardingError(msg(op, "the body returned " + std::to_string(outs.size()) + " outputs but there are " +
                                      std::to_string(out.size()) + " out_specs"));
    std::vector<Array> result;
    for (size_t k = 0; k < outs.size(); ++k) {
      const Array& o = outs[k];
      const int rank = static_cast<int>(out[k].shape.size());
      const Shape want = layouts[k].shard_shape(out[k].shape, pos);
      if (!o.valid() || o.dtype() != out[k].dtype || o.shape() != want)
        throw ShapeError(msg(op, "under jit, output " + std::to_string(k) + " on device " +
                                     std::to_string(mesh_.devices()[pos].id()) + " is " +
                                     (o.valid() ? typeof(o) : std::string("empty")) + " but its block was " +
                                     dtype_name(out[k].dtype) + shape_str(want) +
                                     " when traced; output shapes must not depend on values"));
      const std::set<std::string> named = named_axes(out_specs_[k], rank);
      if (opt_.check_vma) check_out_vma(out_specs_[k], named, k, o, vma[k]);
      Buffer b = o.impl()->buffers.at(0);
      // Replicas over the axes the spec leaves out hold the block of the one
      // at coordinate 0, as in the eager call (under check_vma they are
      // bitwise equal already).
      std::vector<std::string> unnamed;
      for (const auto& a : mesh_.axis_names())
        if (!named.count(a)) unnamed.push_back(a);
      if (!opt_.check_vma && !unnamed.empty()) {
        Local all = m.over(unnamed, op).all_gather(Local{b, o.shape(), o.dtype()}, 0, false);
        Buffer first(mesh_.devices()[pos].id(), b.nbytes());
        copy_buffer(first, all.data, b.nbytes(), "shard_map");
        b = std::move(first);
      }
      std::vector<Buffer> bufs(n);
      bufs[pos] = std::move(b);
      result.push_back(wrap(out[k].shape, out[k].dtype, layouts[k], std::move(bufs)));
    }
    return result;
  }
};

}  // namespace

std::vector<Array> shard_map_call(const ShardMapBody& body, const Mesh& mesh, const std::vector<PartitionSpec>& in_specs,
                                  const std::vector<PartitionSpec>& out_specs, const ShardMapOptions& opt,
                                  const std::vector<Array>& args, std::source_location loc) {
  const char* op = "shard_map";
  if (t_ctx) throw ShardingError("[shard_map] cannot be called inside a shard_map body");
  if (args.size() != in_specs.size())
    throw ShardingError(msg(op, "expected " + std::to_string(in_specs.size()) + " arguments (one per in_spec), got " +
                                    std::to_string(args.size())));
  for (const auto& s : out_specs) check_spec(mesh, s, op);
  // Traced arguments (under jit): the call becomes one primitive of the
  // traced program.
  for (const Array& a : args)
    if (a.valid() && a.impl()->trace)
      return detail::bind(std::make_shared<ShardMapPrim>(body, mesh, in_specs, out_specs, opt, loc), args);
  TimelineScope scope(op, "task");  // names the per-device tasks of the call
  // Inputs laid out per in_specs.
  std::vector<Array> inputs;
  for (size_t i = 0; i < args.size(); ++i) {
    check_valid(args[i], op, "an argument");
    const NamedSharding s = resolve_spec(mesh, in_specs[i], args[i].ndim(), op);
    inputs.push_back(args[i].sharding().mesh() == mesh ? reshard_for(args[i], s, op) : device_put(args[i], s));
  }
  const int n = mesh.size();
  std::vector<std::vector<Array>> outs(n);
  std::vector<std::vector<std::vector<std::string>>> out_vma(n);  // per device, per output
  std::vector<CommLog> logs(n);
  run_spmd(mesh, [&](int pos, Session& session) {
    run_member_body(body, mesh, pos, session, inputs, outs[pos], out_vma[pos], logs[pos]);
  });
  share_member_results(mesh, outs, out_vma, logs);
  // What the collectives moved, one record per collective kind, for explain.
  std::vector<std::string> kinds;
  for (const auto& l : logs)
    for (const auto& [name, bytes] : l)
      if (std::find(kinds.begin(), kinds.end(), name) == kinds.end()) kinds.push_back(name);
  for (const auto& kind : kinds) {
    CommRecord rec;
    rec.op = "shard_map";
    rec.kind = kind;
    rec.bytes_received.assign(n, 0);
    rec.bytes_local.assign(n, 0);
    for (int pos = 0; pos < n; ++pos)
      for (const auto& [name, bytes] : logs[pos])
        if (name == kind) {
          rec.bytes_received[pos] += bytes;
          ++rec.pieces;
        }
    record_comm(rec);
  }

  // Assemble each output per its out spec (one spec: for every output, as
  // a JAX out_specs prefix).
  const size_t nout = outs[0].size();
  if (nout != out_specs.size() && out_specs.size() != 1)
    throw ShardingError(msg(op, "the body returned " + std::to_string(nout) + " outputs but there are " +
                                    std::to_string(out_specs.size()) + " out_specs (give one per output, or one for all)"));
  std::vector<Array> result;
  for (size_t k = 0; k < nout; ++k) {
    const PartitionSpec& spec = out_specs.size() == 1 ? out_specs[0] : out_specs[k];
    const Array& first = outs[0][k];
    const int rank = first.ndim();
    const NamedSharding s = resolve_spec(mesh, spec, rank, op);
    const std::set<std::string> named = named_axes(spec, rank);
    for (int pos = 0; pos < n; ++pos) {
      const Array& o = outs[pos][k];
      if (o.ndim() != rank || o.dtype() != first.dtype())
        throw ShapeError(msg(op, "output " + std::to_string(k) + " differs between devices: " + typeof(first) +
                                     " on " + mesh.devices()[0].str() + ", " + typeof(o) + " on " +
                                     mesh.devices()[pos].str()));
      if (opt.check_vma && Runtime::get().is_local(mesh.devices()[pos].id()))
        check_out_vma(spec, named, k, o, out_vma[pos][k]);
    }
    // Global size of each dim: sum of the local sizes of its parts.
    Shape shape = first.shape();
    for (int d = 0; d < rank; ++d) {
      const int k_parts = s.num_parts(d);
      if (k_parts == 1) continue;
      std::vector<std::int64_t> part_size(k_parts, -1);
      for (int pos = 0; pos < n; ++pos) {
        const int c = s.part_index(d, pos);
        const std::int64_t len = outs[pos][k].shape()[d];
        if (part_size[c] >= 0 && part_size[c] != len)
          throw ShapeError(msg(op, "output " + std::to_string(k) + " has different sizes along dim " +
                                       std::to_string(d) + " on devices of the same block"));
        part_size[c] = len;
      }
      std::int64_t total = 0;
      for (auto v : part_size)
        total = checked_add(total, v, op, [&] {
          return "output " + std::to_string(k) + " assembled along dim " + std::to_string(d);
        });
      for (int c = 0; c < k_parts; ++c)
        if (part_size[c] != block_size(total, k_parts, c)) {
          std::string sizes;
          for (int j = 0; j < k_parts; ++j) sizes += (j ? ", " : "") + std::to_string(part_size[j]);
          throw ShapeError(msg(op, "output " + std::to_string(k) + " has local sizes [" + sizes + "] along dim " +
                                       std::to_string(d) + ", which is not the balanced layout of " +
                                       std::to_string(total) + " over " + std::to_string(k_parts) +
                                       " parts (the first n % k parts hold one more)"));
        }
      shape[d] = total;
    }
    for (int d = 0; d < rank; ++d)
      if (s.num_parts(d) == 1)
        for (int pos = 0; pos < n; ++pos)
          if (outs[pos][k].shape()[d] != shape[d])
            throw ShapeError(msg(op, "output " + std::to_string(k) + " is replicated along dim " + std::to_string(d) +
                                         " but its local sizes differ between devices"));
    checked_nbytes(shape, first.dtype(), op);
    // Buffers: each position takes the block of the replica at coordinate 0
    // on the mesh axes the spec leaves out.
    std::vector<Buffer> bufs(n);
    for (int pos = 0; pos < n; ++pos) {
      std::vector<int> cq = mesh.coords(pos);
      for (int i = 0; i < mesh.ndim(); ++i)
        if (!named.count(mesh.axis_names()[i])) cq[i] = 0;
      int src = 0;
      for (int i = 0; i < mesh.ndim(); ++i) src = src * mesh.shape()[i] + cq[i];
      // Another process's replica: this position's own (equal) block.
      if (!Runtime::get().is_local(mesh.devices()[pos].id())) continue;
      if (!Runtime::get().is_local(mesh.devices()[src].id())) src = pos;
      bufs[pos] = outs[src][k].impl()->buffers.at(0);
    }
    result.push_back(wrap(shape, first.dtype(), s, std::move(bufs)));
  }
  return result;
}

}  // namespace detail

// ------------------------------------------------------------ collectives

using detail::context;
using detail::group_for;
using detail::local_of;
using detail::make_local;
using detail::msg;

namespace detail {

namespace {

// A collective applied to a value of vmap, jvp or grad inside a body is
// bound as a primitive, so those traces apply its rules: batching runs the
// collective on the whole batch (it acts per element across devices, so the
// batch dim just moves along); JVPs are the collective of the tangent (all
// of these are linear); transposes follow JAX's rules with varying axes:
// psum (invariant result) <-> pbroadcast (the identity on values), pmean
// likewise scaled, all_gather (invariant) -> this device's slice,
// psum_scatter -> all_gather, ppermute -> the inverse permutation,
// all_to_all -> the all_to_all back (split and concat axes swapped).
struct CollSpec {
  enum Kind { Sum, Mean, Gather, Scatter, Permute, Max, Min, AllToAll } kind = Sum;
  AxisNames axes;
  int axis = 0;  // all_to_all: the split axis
  bool tiled = false;
  std::vector<std::pair<int, int>> perm;
  int concat = 0;  // all_to_all only
};

const char* coll_name(CollSpec::Kind k) {
  static const char* names[] = {"psum",     "pmean", "all_gather", "psum_scatter",
                                "ppermute", "pmax",  "pmin",       "all_to_all"};
  return names[k];
}

Array apply_collective(const CollSpec& s, const Array& x) {
  switch (s.kind) {
    case CollSpec::Sum: return psum(x, s.axes);
    case CollSpec::Mean: return pmean(x, s.axes);
    case CollSpec::Gather: return all_gather(x, s.axes, s.axis, s.tiled);
    case CollSpec::Scatter: return psum_scatter(x, s.axes, s.axis, s.tiled);
    case CollSpec::Permute: return ppermute(x, s.axes, s.perm);
    case CollSpec::Max: return pmax(x, s.axes);
    case CollSpec::Min: return pmin(x, s.axes);
    case CollSpec::AllToAll:
      return all_to_all(x, s.axes, s.axis, s.concat, s.tiled);
  }
  return x;
}

// This device's place in the group of `axes` and the group's size.
std::pair<int, int> group_place(const ManualContext& c, const AxisNames& axes, const char* op) {
  const std::vector<int> coords = c.mesh.coords(c.pos);
  int rank = 0, size = 1;
  for (const auto& a : axes.names()) {
    const int i = c.mesh.axis_index(a);
    if (i < 0) throw ShardingError(std::string("[") + op + "] no axis named '" + a + "' in " + c.mesh.str());
    rank = rank * c.mesh.shape()[i] + coords[i];
    size *= c.mesh.shape()[i];
  }
  return {rank, size};
}

class CollectivePrim final : public Primitive {
 public:
  explicit CollectivePrim(CollSpec s) : s_(std::move(s)) {}
  std::string_view name() const override { return coll_name(s_.kind); }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    const char* op = coll_name(s_.kind);
    const auto [rank, n] = group_place(context(op), s_.axes, op);
    Shape sh = in[0].shape;
    DType dt = in[0].dtype;
    const int r = static_cast<int>(sh.size());
    auto norm = [&](int a, int rk) { return normalize_axis(a, rk, op); };
    switch (s_.kind) {
      case CollSpec::Mean:
        if (!is_float(dt)) dt = DType::f32;
        break;
      case CollSpec::Gather:
        if (s_.tiled) sh[norm(s_.axis, r)] *= n;  // equal blocks (checked by the transpose)
        else sh.insert(sh.begin() + norm(s_.axis, r + 1), n);
        break;
      case CollSpec::Scatter: {
        const int d = norm(s_.axis, r);
        // block_size takes (length, parts, part); with the last two swapped
        // every tiled psum_scatter of a traced value raised.
        if (s_.tiled)
          sh[d] = block_size(sh[d], n, rank);
        else sh.erase(sh.begin() + d);
        break;
      }
      case CollSpec::AllToAll: {
        const int split = norm(s_.axis, r), concat = norm(s_.concat, r);
        if (s_.tiled) {
          // As the exchange lays it out: this member's block of the split
          // axis, the members' pieces one after another along concat.
          sh[split] = block_size(sh[split], n, rank);
          sh[concat] *= n;
        } else {
          // split_axis (of size n) goes away, a new axis of size n appears at concat.
          sh.erase(sh.begin() + split);
          sh.insert(sh.begin() + concat, n);
        }
        break;
      }
      default: break;
    }
    return {TypeInfo{sh, dt}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override { return own_factor_rule(in, infer(in)); }
  bool lowers_itself() const override { return true; }
  bool runs_per_member() const override { return false; }
  // The collectives move and combine device memory on GPUs too.
  bool lowers_on_cuda() const override { return true; }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>&) const override {
    return std::vector<NamedSharding>{in[0].sharding};
  }
  void eval_cpu(const LocalArgs&, LocalOuts&) const override {
    throw Error(msg(coll_name(s_.kind), "internal: a collective runs on local values (eval_global)"));
  }
  std::vector<Array> eval_global(const ExecContext&, const std::vector<Array>& in, const std::vector<TypeInfo>&,
                                 const std::vector<NamedSharding>&) const override {
    return {apply_collective(s_, in[0])};
  }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bdims, std::int64_t,
                           std::vector<int>& out_bdims) const override {
    CollSpec s = s_;
    const Array x = move_dim(in[0], bdims[0], 0);
    const int ex_rank = x.ndim() - 1;
    if (s.kind == CollSpec::Gather || s.kind == CollSpec::Scatter || s.kind == CollSpec::AllToAll) {
      const int rk = s.kind == CollSpec::Gather && !s.tiled ? ex_rank + 1 : ex_rank;
      s.axis = normalize_axis(s.axis, rk, coll_name(s.kind)) + 1;
    }
    if (s.kind == CollSpec::AllToAll) s.concat = normalize_axis(s.concat, ex_rank, coll_name(s.kind)) + 1;
    out_bdims = {0};
    return {apply_collective(s, x)};
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                         std::vector<Array>& t_out) const override {
    if ((s_.kind == CollSpec::Max || s_.kind == CollSpec::Min) && t[0].valid())
      throw Error(msg(coll_name(s_.kind), "is not differentiable yet; psum a mask of the maxima instead"));
    Array y = apply_collective(s_, p[0]);
    t_out = {t[0].valid() && has_tangent(y.dtype()) ? apply_collective(s_, t[0]) : Array()};
    return {y};
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>& types, const std::vector<bool>&) const override {
    if (!ct[0].valid()) return {Array()};
    const char* op = coll_name(s_.kind);
    const Array& c = ct[0];
    Array r;
    switch (s_.kind) {
      case CollSpec::Max:
      case CollSpec::Min:  // not linear: their JVP refuses, so no linear program holds them
        return Primitive::transpose(ct, {}, types, {});
      case CollSpec::Sum: r = c; break;
      case CollSpec::Mean: r = c / static_cast<double>(group_place(context(op), s_.axes, op).second); break;
      case CollSpec::Gather: {
        // The invariant gathered value's cotangent: this device's part.
        const auto [rank, n] = group_place(context(op), s_.axes, op);
        const int rk = types[0].shape.size() + (s_.tiled ? 0 : 1);
        const int a = normalize_axis(s_.axis, static_cast<int>(rk), op);
        const std::int64_t len = s_.tiled ? types[0].shape[a] : 1;
        if (s_.tiled && c.shape()[a] != len * n)
          throw Error(msg(op, "differentiating a tiled all_gather of blocks of unequal sizes is not supported yet"));
        std::vector<SliceSpec> sl(static_cast<size_t>(c.ndim()));
        sl[a] = SliceSpec{rank * len, (rank + 1) * len, 1};
        r = slice(c, sl, {});
        if (!s_.tiled) r = squeeze(r, {a}, {});
        break;
      }
      case CollSpec::Scatter: {
        const int rk = static_cast<int>(types[0].shape.size());
        r = all_gather(c, s_.axes, normalize_axis(s_.axis, rk, op), s_.tiled);
        break;
      }
      case CollSpec::Permute: {
        std::vector<std::pair<int, int>> inv;
        for (const auto& [src, dst] : s_.perm) inv.emplace_back(dst, src);
        r = ppermute(c, s_.axes, inv);
        break;
      }
      case CollSpec::AllToAll: {
        // The exchange run backwards: what came from member s along concat
        // goes back to s, and lands where it was along split. Tiled, the
        // pieces along concat are equal, but the members' split blocks
        // must be too for the exchange back to reassemble them.
        const int rk = static_cast<int>(types[0].shape.size());
        const int split = normalize_axis(s_.axis, rk, op), concat = normalize_axis(s_.concat, rk, op);
        const int n = group_place(context(op), s_.axes, op).second;
        if (s_.tiled && types[0].shape[split] % n != 0)
          throw Error(msg(op, "differentiating a tiled all_to_all whose split axis (" +
                                  std::to_string(types[0].shape[split]) + ") does not divide into " +
                                  std::to_string(n) + " equal blocks is not supported yet"));
        r = all_to_all(c, s_.axes, concat, split, s_.tiled);
        break;
      }
    }
    if (r.dtype() != types[0].dtype) r = astype(r, types[0].dtype, {});
    return {r};
  }

 private:
  CollSpec s_;
};

Array bind_collective(CollSpec s, const Array& x) { return bind1(std::make_shared<CollectivePrim>(std::move(s)), {x}); }

}  // namespace

Array preduce(const Array& x0, const AxisNames& axes, ReduceOp op, const char* name) {
  if (transformed(x0)) {
    const bool ok = op == ReduceOp::Sum || op == ReduceOp::Max || op == ReduceOp::Min;
    if (!ok || x0.dtype() == DType::bool_)
      throw Error(std::string("[") + name + "] does not support values traced by " + x0.impl()->traced_by +
                  " yet (psum, pmean, pmax and pmin of numbers do)");
    const auto kind = op == ReduceOp::Sum ? CollSpec::Sum : op == ReduceOp::Max ? CollSpec::Max : CollSpec::Min;
    return bind_collective(CollSpec{kind, axes, 0, false, {}}, x0);
  }
  auto& c = context(name);
  check_local(x0, name);
  // As JAX's psum, booleans are summed as i32 (a product likewise); any and
  // all read every value as nonzero or zero.
  Array x = x0;
  if ((op == ReduceOp::Sum || op == ReduceOp::Prod) && x0.dtype() == DType::bool_) x = astype(x0, DType::i32);
  if ((op == ReduceOp::Any || op == ReduceOp::All) && x0.dtype() != DType::bool_) x = astype(x0, DType::bool_);
  const auto vma = detail::vma_of(c, x);
  auto g = group_for(c, axes.names(), name);
  auto in = local_of(x);
  auto out = g->all_reduce(in, op);
  log_comm(c, name, 2 * (g->size() - 1) * nbytes(in) / g->size());
  return make_local(c, out, without(vma, axes.names()));
}

}  // namespace detail

Array psum(const Array& x, const AxisNames& axes) { return detail::preduce(x, axes, detail::ReduceOp::Sum, "psum"); }
Array pmax(const Array& x, const AxisNames& axes) { return detail::preduce(x, axes, detail::ReduceOp::Max, "pmax"); }
Array pmin(const Array& x, const AxisNames& axes) { return detail::preduce(x, axes, detail::ReduceOp::Min, "pmin"); }

Array pmean(const Array& x, const AxisNames& axes) {
  if (detail::transformed(x)) return detail::bind_collective(detail::CollSpec{detail::CollSpec::Mean, axes, 0, false, {}}, x);
  auto& c = context("pmean");
  detail::check_local(x, "pmean");
  int size = 1;
  for (const auto& a : axes.names()) {
    if (c.mesh.axis_index(a) < 0) throw ShardingError("[pmean] no axis named '" + a + "' in " + c.mesh.str());
    size *= c.mesh.axis_size(a);
  }
  const Array xf = detail::is_float(x.dtype()) ? x : astype(x, DType::f32);
  Array s = detail::preduce(xf, axes, detail::ReduceOp::Sum, "pmean");
  auto vma = detail::vma_of(c, s);
  Array out = divide(s, static_cast<double>(size));
  detail::set_vma(c, out, std::move(vma));
  return out;
}

Array all_gather(const Array& x, const AxisNames& axes, int axis, bool tiled) {
  if (detail::transformed(x))
    return detail::bind_collective(detail::CollSpec{detail::CollSpec::Gather, axes, axis, tiled, {}}, x);
  const char* name = "all_gather";
  auto& c = context(name);
  detail::check_local(x, name);
  const int rank = x.ndim();
  if (tiled && rank == 0) throw ShapeError("[all_gather] tiled gathering needs an array of rank >= 1, got a scalar");
  const int a = detail::normalize_axis(axis, tiled ? rank : rank + 1, name);
  const auto vma = detail::vma_of(c, x);
  auto g = group_for(c, axes.names(), name);
  auto out = g->all_gather(local_of(x), a, tiled);
  detail::log_comm(c, name, (g->size() - 1) * detail::nbytes(out) / g->size());
  return make_local(c, out, detail::without(vma, axes.names()));
}

Array psum_scatter(const Array& x, const AxisNames& axes, int scatter_dimension, bool tiled) {
  if (detail::transformed(x))
    return detail::bind_collective(detail::CollSpec{detail::CollSpec::Scatter, axes, scatter_dimension, tiled, {}}, x);
  const char* name = "psum_scatter";
  auto& c = context(name);
  detail::check_local(x, name);
  const int d = detail::normalize_axis(scatter_dimension, x.ndim(), name);
  auto vma = detail::vma_of(c, x);
  auto g = group_for(c, axes.names(), name);
  if (!tiled && x.shape()[d] != g->size())
    throw ShapeError(msg("psum_scatter", "without tiled, dim " + std::to_string(d) + " must equal the number of "
                                         "devices on " + detail::axes_text(axes.names()) + " (" +
                                         std::to_string(g->size()) + "), got shape " + shape_str(x.shape())));
  Array xi = x.dtype() == DType::bool_ ? astype(x, DType::i32) : x;
  auto in = local_of(xi);
  auto out = g->reduce_scatter(in, d, tiled, detail::ReduceOp::Sum);
  detail::log_comm(c, name, (g->size() - 1) * detail::nbytes(in) / g->size());
  return make_local(c, out, detail::merged(vma, axes.names()));
}

Array ppermute(const Array& x, const AxisNames& axes, const std::vector<std::pair<int, int>>& perm) {
  if (detail::transformed(x))
    return detail::bind_collective(detail::CollSpec{detail::CollSpec::Permute, axes, 0, false, perm}, x);
  const char* name = "ppermute";
  auto& c = context(name);
  detail::check_local(x, name);
  const auto vma = detail::vma_of(c, x);
  auto g = group_for(c, axes.names(), name);
  const int size = g->size();
  std::vector<bool> src_seen(size, false), dst_seen(size, false);
  for (const auto& [s, d] : perm) {
    if (s < 0 || s >= size || d < 0 || d >= size)
      throw ShardingError(msg(name, "pair (" + std::to_string(s) + ", " + std::to_string(d) +
                                        ") is out of range for " + std::to_string(size) + " devices on " +
                                        detail::axes_text(axes.names())));
    if (src_seen[s] || dst_seen[d])
      throw ShardingError(msg(name, "each device may send once and receive once; (" + std::to_string(s) + ", " +
                                        std::to_string(d) + ") repeats a source or destination"));
    src_seen[s] = dst_seen[d] = true;
  }
  auto out = g->permute(local_of(x), perm);
  bool receives = false;
  for (const auto& [src, dst] : perm) receives = receives || (dst == g->rank() && src != g->rank());
  detail::log_comm(c, name, receives ? detail::nbytes(out) : 0);
  // Varies over the permuted axes even when the input did not: devices that
  // receive nothing hold zeros.
  return make_local(c, out, detail::merged(vma, axes.names()));
}

Array all_to_all(const Array& x, const AxisNames& axes, int split_axis, int concat_axis, bool tiled) {
  if (detail::transformed(x))
    return detail::bind_collective(
        detail::CollSpec{detail::CollSpec::AllToAll, axes, split_axis, tiled, {}, concat_axis}, x);
  const char* name = "all_to_all";
  auto& c = context(name);
  detail::check_local(x, name);
  const int rank = x.ndim();
  int split = detail::normalize_axis(split_axis, rank, name);
  int concat = detail::normalize_axis(concat_axis, rank, name);
  auto vma = detail::vma_of(c, x);
  auto g = group_for(c, axes.names(), name);
  Array in = x;
  if (!tiled) {
    // As JAX: split_axis must equal the group size; a new axis of that size
    // appears at concat_axis and split_axis goes away.
    if (x.shape()[split] != g->size())
      throw ShapeError(msg(name, "without tiled, split_axis " + std::to_string(split) + " must equal the number of "
                                 "devices on " + detail::axes_text(axes.names()) + " (" + std::to_string(g->size()) +
                                 "), got shape " + shape_str(x.shape())));
    if (split < concat) {
      ++concat;
      in = expand_dims(x, concat);
    } else if (split > concat) {
      in = expand_dims(x, concat);
      ++split;
    }
  }
  auto out = g->all_to_all(local_of(in), split, concat);
  detail::log_comm(c, name, (g->size() - 1) * detail::nbytes(out) / g->size());
  Array r = make_local(c, out, detail::merged(vma, axes.names()));
  if (!tiled && split != concat) {
    r = squeeze(r, {split});
    detail::set_vma(c, r, detail::merged(vma, axes.names()));
  }
  return r;
}

Array axis_index(const std::string& axis) {
  auto& c = context("axis_index");
  const int i = c.mesh.axis_index(axis);
  if (i < 0) throw ShardingError("[axis_index] no axis named '" + axis + "' in " + c.mesh.str());
  const std::int32_t v = c.mesh.coords(c.pos)[i];
  Array a = device_put(std::vector<std::int32_t>{v}, {}, NamedSharding(c.local_mesh, P()));
  detail::set_vma(c, a, {axis});
  return a;
}

int axis_size(const std::string& axis) {
  auto& c = context("axis_size");
  const int i = c.mesh.axis_index(axis);
  if (i < 0) throw ShardingError("[axis_size] no axis named '" + axis + "' in " + c.mesh.str());
  return c.mesh.shape()[i];
}


// The type as the current trace sees it: inside a shard_map body, with the
// manual axes the value varies over.
std::string typeof(const Array& array) {
  if (!detail::in_manual_body()) return detail::typeof_varying(array, {});
  const Array a = detail::manual_inputs({array}).front();
  return detail::typeof_varying(a, detail::varying_axes(a.peek()));
}

}  // namespace tessera
