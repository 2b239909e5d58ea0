// jit: tracing into a Program, compiling it, running it.
//
// Tracing. A JitTrace is pushed and the user's function is called with
// traced values (arrays with a shape, dtype and sharding but no buffers).
// Every primitive bound meanwhile is recorded as an equation; its result
// shardings come from the same propagation engine as eager execution, so a
// jitted function lays out and computes every value exactly as the eager
// one does (the jit == eager property the tests check bitwise). Concrete
// arrays the function captures become constants.
//
// Compiling turns the equations into steps:
//   - kernel: one primitive on every device's local blocks;
//   - reshard: an operand brought to the layout the engine chose (through
//     the one planner), or a result to its final layout;
//   - reduce: partial results combined over the reduction axes;
//   - global: a primitive that partitions itself (a reshape across sharded
//     dims, a shard_map, ...), or one whose partition has engine steps (the
//     halo exchanges of stencils, the carried totals of scans: the engine's
//     eval_partitioned), run as each device's share of its whole-array
//     algorithm (spmd/member.hpp);
//   - fused: a run of fusable kernels whose operands and results all share
//     one shape and layout, executed tile by tile (kTile elements) so the
//     intermediates stay in cache: one pass over memory for the chain.
// Values used only inside a fused run are never materialised.
//
// Running: a call is one SPMD task per device (spmd/program.hpp) that
// walks the steps in order: kernels and fused loops on the device's blocks,
// reshards as the device's share of the planned exchange, reductions as an
// all-reduce within the device's group over the reduction axes (a
// reduce-scatter keeps its box of the result). Every member runs the same
// steps, so their collectives meet in the same order. Only a global step on
// arrays of another mesh splits a call: it runs on the host between tasks.
// Buffers die after their last use, so the caching allocator reuses them
// within the call; a member's buffer read by others stays alive in the
// collective's rendezvous.
//
// On GPUs a cached call replays recordings (see "graph replay" below):
// each run of kernels and fused loops is recorded once per device into a
// CUDA graph and replayed by one launch.
#include "tessera/jit.hpp"

#include <algorithm>
#include <any>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>

#include "backend/cpu/compiled.hpp"
#include "backend/cuda/fused.hpp"
#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "comm/group.hpp"
#include "spmd/member.hpp"
#include "runtime/runtime.hpp"
#include "runtime/timeline.hpp"
#include "transforms/jit_graphs.hpp"
#include "transforms/shard_map.hpp"
#include "spmd/program.hpp"
#include "transforms/trace.hpp"

namespace tessera {
namespace detail {

namespace {


struct Eqn {
  PrimitivePtr prim;
  std::vector<int> in, out;
  std::vector<TypeInfo> types;
  Partition part;
};

struct Program {
  std::vector<AbstractArray> values;
  std::vector<int> inputs, outputs;
  std::vector<std::pair<int, Array>> constants;
  std::vector<Eqn> eqns;
};

class JitTrace final : public Trace {
 public:
  explicit JitTrace(std::string name) : name_(std::move(name)) {}
  Program prog;

  Array new_value(const AbstractArray& a) {
    const int id = static_cast<int>(prog.values.size());
    prog.values.push_back(a);
    return make_tracer(this, a.shape, a.dtype, a.sharding, nullptr, "jit", id);
  }

  int value_of(const Array& a) {
    const auto& impl = a.impl();
    if (impl->trace == this) return impl->value;
    if (impl->trace)
      throw Error(msg(name_.c_str(), "a value traced by another jit call (" + describe(a) +
                                         ") was used here; return it from that function instead"));
    for (const auto& [id, arr] : prog.constants)
      if (arr.impl() == impl) return id;
    const int id = static_cast<int>(prog.values.size());
    prog.values.push_back(AbstractArray{a.shape(), a.dtype(), a.sharding()});
    prog.constants.emplace_back(id, a);
    return id;
  }

  std::vector<Array> process(const PrimitivePtr& prim, const std::vector<Array>& args) override {
    Eqn e;
    e.prim = prim;
    for (const Array& a : args) e.in.push_back(value_of(a));
    const auto in = abstract_of(args);
    e.types = prim->infer(in);
    e.part = partition(*prim, in, e.types);
    std::vector<Array> outs;
    for (size_t r = 0; r < e.types.size(); ++r) {
      outs.push_back(new_value(AbstractArray{e.types[r].shape, e.types[r].dtype, e.part.results[r]}));
      e.out.push_back(outs.back().impl()->value);
    }
    prog.eqns.push_back(std::move(e));
    return outs;
  }

 private:
  std::string name_;
};

// Whole-program propagation, backwards. Tracing partitions each equation as
// eager execution would, looking only at its operands. Afterwards, layouts
// that later uses need flow back: a value used once, by a sharding
// constraint (with_sharding_constraint, out_shardings) or by an equation
// that wants it in another layout, asks its producer for that layout; the
// producer is partitioned again with it as the required result layout (the
// engine then picks the cheapest way to produce it: a reduce-scatter
// straight into it instead of an all-reduce and a reshard, or operands
// resharded early so a fused chain stays whole), and asks its own operands
// in turn. Values used twice, program inputs, constants, primitives that fix
// their own layouts or lower themselves, and Explicit axes (the user's
// types, never moved by a cost decision) stop it.
void propagate_back(Program& p) {
  const size_t nv = p.values.size();
  std::vector<int> uses(nv, 0);
  for (const Eqn& e : p.eqns)
    for (int v : e.in) ++uses[v];
  for (int v : p.outputs) ++uses[v];
  std::vector<char> fixed(nv, 0);
  for (int v : p.inputs) fixed[v] = 1;
  for (const auto& [v, arr] : p.constants) fixed[v] = 1;
  std::vector<std::optional<NamedSharding>> want(nv);
  auto ask = [&](int v, const NamedSharding& s) {
    if (uses[v] == 1 && !fixed[v] && !(p.values[v].sharding == s) && !has_explicit_axes(p.values[v].sharding) &&
        !has_explicit_axes(s))
      want[v] = s;
  };
  for (size_t i = p.eqns.size(); i-- > 0;) {
    Eqn& e = p.eqns[i];
    if (e.prim->identity()) {
      ask(e.in[0], e.part.results[0]);
      continue;
    }
    if (e.out.size() != 1 || !want[e.out[0]] || e.prim->lowers_itself()) continue;
    std::vector<AbstractArray> in;
    for (int v : e.in) in.push_back(p.values[v]);
    Partition np = partition(*e.prim, in, e.types, want[e.out[0]]);
    if (!(np.results[0] == *want[e.out[0]])) continue;  // the primitive fixes its layout
    e.part = std::move(np);
    p.values[e.out[0]].sharding = e.part.results[0];
    for (size_t k = 0; k < e.in.size(); ++k) ask(e.in[k], e.part.operands[k]);
  }
}

}  // namespace

// ------------------------------------------------------------ compiled form

struct Step {
  enum Kind { Kernel, Fused, Reshard, Reduce, Global } kind = Kernel;
  std::vector<int> eqns;       // Kernel, Global: one; Fused: the run, in order
  bool on_host = false;        // Global: runs between the per-device tasks, not as each device's share
  int sink_eqn = -1, sink_out = -1;  // Fused: the reduction the run ends in, and its result's slot
  std::vector<int> in, out;    // slots read and written (Fused: external inputs, materialised outputs)
  std::optional<NamedSharding> target;  // Reshard / Reduce: layout of `out[0]`
  std::vector<std::string> axes;  // Reduce
  ReduceOp op = ReduceOp::Sum;    // Reduce
  std::string what;            // Reshard / Reduce: the op it serves
  std::int64_t bytes = 0;      // communication: most bytes one device receives
  std::string kind_text;       // communication: planner's form
  std::shared_ptr<const ReshardPlan> plan;  // Reshard between different layouts
  std::optional<CommRecord> record;         // communication: what explain shows for it
  std::shared_ptr<const cpu::NativeKernel> native;  // Fused: the group's native loop, if compiled
  std::shared_ptr<struct CudaFused> cuda;           // Fused, on GPUs: the group's CUDA loop
  std::int64_t work_bytes = 0;  // Kernel, Fused: the bytes its blocks read and write over all devices
};

// A fused group on GPUs: the CUDA source of its loop (backend/cuda/fused.hpp)
// with its scalar operands, compiled by the first device's worker that runs
// it (NVRTC needs the GPU's architecture) and shared by the others. Without
// a kernel (an emulated GPU, no NVRTC, a group whose operands broadcast)
// the members run one by one, each a CUDA kernel.
struct CudaFused {
  std::string source;  // empty: no loop for this group
  std::vector<double> f;
  std::vector<std::int64_t> i;
  std::size_t words = 0;  // of the kernel's argument struct
  std::mutex mu;
  bool tried = false;
  std::shared_ptr<const cuda::FusedKernel> kernel;
};

// jit's graph replay on GPUs, per compiled program (see "graph replay").
// A device's recording of a run: the graph, the blocks it reads its
// inputs from and writes its results to, and the temporaries it uses.
struct DeviceGraphs {
  std::mutex mu;
  std::string off;  // why this device runs the run op by op; empty: it replays
  std::shared_ptr<GpuGraph> graph;
  std::vector<Buffer> ins, outs;  // per GraphRun::in (none for constants), per GraphRun::made
  std::vector<Buffer> kept;  // everything the recording allocated (ins and outs too)
};

// A run of consecutive steps that a device records as one graph: kernels
// and fused loops (and layout-keeping reshards, which only rename).
struct GraphRun {
  std::size_t begin = 0, end = 0;  // steps [begin, end)
  std::vector<int> in;    // slots it reads that the caller or earlier steps made
  std::vector<bool> constant;  // per `in`: a captured constant (read where it is)
  std::vector<int> made;  // slots it writes that outlive it (the call sets their blocks)
  std::vector<std::pair<int, int>> aliases;  // (slot that outlives it, the made slot it renames)
  std::vector<int> last_read;  // inputs read for the last time: released after a replay
  mutable std::vector<DeviceGraphs> pos;  // per mesh position
};

struct GraphState {
  std::atomic<std::int64_t> calls{0};
  std::vector<GraphRun> runs;
  std::vector<int> run_at;  // per step: the run that starts there, or -1
};

struct Slot {
  Shape shape;
  DType dtype = DType::f32;
  NamedSharding sharding;
  std::vector<std::vector<Slice>> boxes;  // per mesh position: global indices of its block
  std::vector<Shape> local;               // per mesh position: the block's shape
};

struct Compiled {
  std::string name;
  Program prog;
  Mesh mesh;
  std::vector<Slot> slots;   // program values first, then temporaries
  std::vector<Step> steps;
  std::vector<int> outputs;  // slots returned
  // slot -> index of the last step reading it (-1: never read; outputs live on)
  std::vector<int> last_use;
  // slot of each equation input/output after operand reshards
  std::vector<std::vector<int>> eqn_in, eqn_out;
  // The traced result's tree, leaves emptied (the caller's result type).
  std::shared_ptr<const std::any> tree;
  // GPUs: the graph replay's state, when the program can be recorded
  // (graph_plan); null otherwise.
  std::unique_ptr<GraphState> graphs;

  explicit Compiled(Mesh m) : mesh(std::move(m)) {}
};

namespace {

int add_slot(Compiled& c, const Shape& shape, DType dtype, const NamedSharding& s) {
  Slot sl{shape, dtype, s, {}, {}};
  for (int pos = 0; pos < c.mesh.size(); ++pos) {
    sl.boxes.push_back(s.shard_index(shape, pos));
    sl.local.push_back(box_shape(sl.boxes.back()));
  }
  c.slots.push_back(std::move(sl));
  return static_cast<int>(c.slots.size()) - 1;
}

std::int64_t max_received(const std::vector<std::int64_t>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

// A communication step moving `src` to layout `s` into slot `dst` (a new
// one when -1); returns the slot.
int add_reshard(Compiled& c, int src, const NamedSharding& s, const std::string& what, int dst = -1) {
  const Slot& from = c.slots[src];
  const ReshardPlan plan = plan_reshard(from.shape, from.dtype, from.sharding, s);
  Step st;
  st.kind = Step::Reshard;
  st.in = {src};
  st.target = s;
  st.what = what;
  st.bytes = max_received(plan.bytes_received);
  st.kind_text = plan.kind;
  st.record = plan_record(plan, what.c_str());
  const Shape shape = from.shape;
  const DType dtype = from.dtype;
  if (!(from.sharding == s)) st.plan = std::make_shared<const ReshardPlan>(plan);
  st.out = {dst >= 0 ? dst : add_slot(c, shape, dtype, s)};
  c.steps.push_back(std::move(st));
  return c.steps.back().out[0];
}

bool tile_compatible(const Slot& a, const Slot& b) { return a.shape == b.shape && a.sharding == b.sharding; }

// True when operand `in` broadcasts into result `o` block by block (NumPy
// rules, right-aligned): every dim of `in` either equals the result's and is
// sharded alike, or has size 1 and is whole. Each device's block of `in` is
// then its block of `o` with the size-1 and missing dims repeated, so a
// fused loop can read it tile by tile through strides (a bias row added to
// a matmul result, a scalar).
bool broadcasts_into(const Slot& in, const Slot& o) {
  const size_t ri = in.shape.size(), ro = o.shape.size();
  if (ri > ro || in.shape == o.shape) return false;
  for (size_t d = 0; d < ri; ++d) {
    const int di = static_cast<int>(d), dout = static_cast<int>(d + ro - ri);
    const auto& axes = in.sharding.spec()[di].axes();
    if (in.shape[d] == o.shape[dout] ? axes != o.sharding.spec()[dout].axes() : in.shape[d] != 1 || !axes.empty())
      return false;
  }
  return true;
}

void fuse(Compiled& c) {
  std::vector<Step> out;
  size_t i = 0;
  while (i < c.steps.size()) {
    const Step& s = c.steps[i];
    auto fusable_at = [&](size_t k, int ref) {
      const Step& t = c.steps[k];
      if (t.kind != Step::Kernel || !c.prog.eqns[t.eqns[0]].prim->fusable() || t.out.size() != 1) return false;
      const Slot& o = c.slots[t.out[0]];
      if (ref >= 0 && !tile_compatible(o, c.slots[ref])) return false;
      for (int in : t.in)
        if (!tile_compatible(c.slots[in], o) && !broadcasts_into(c.slots[in], o)) return false;
      return true;
    };
    if (!fusable_at(i, -1)) {
      out.push_back(s);
      ++i;
      continue;
    }
    const int ref = s.out[0];
    size_t j = i + 1;
    while (j < c.steps.size() && fusable_at(j, ref)) ++j;
    std::vector<int> made;
    for (size_t k = i; k < j; ++k) made.push_back(c.steps[k].out[0]);
    // A reduction of a value made in the run ends it: the loop feeds it
    // tiles instead of writing the value.
    const bool sink = j < c.steps.size() && c.steps[j].kind == Step::Kernel && c.steps[j].in.size() == 1 &&
                      c.prog.eqns[c.steps[j].eqns[0]].prim->sinkable() &&
                      std::find(made.begin(), made.end(), c.steps[j].in[0]) != made.end();
    if (j - i < 2 && !sink) {
      out.push_back(s);
      ++i;
      continue;
    }
    Step f;
    f.kind = Step::Fused;
    for (size_t k = i; k < j; ++k) {
      f.eqns.push_back(c.steps[k].eqns[0]);
      for (int in : c.steps[k].in)
        if (std::find(made.begin(), made.end(), in) == made.end() &&
            std::find(f.in.begin(), f.in.end(), in) == f.in.end())
          f.in.push_back(in);
    }
    const size_t after = sink ? j + 1 : j;
    // A value made in the run escapes when a later step or the result reads it.
    for (int m : made) {
      bool escapes = std::find(c.outputs.begin(), c.outputs.end(), m) != c.outputs.end();
      for (size_t k = after; k < c.steps.size() && !escapes; ++k)
        escapes = std::find(c.steps[k].in.begin(), c.steps[k].in.end(), m) != c.steps[k].in.end();
      if (escapes) f.out.push_back(m);
    }
    if (sink) {
      f.sink_eqn = c.steps[j].eqns[0];
      f.sink_out = c.steps[j].out[0];
    }
    out.push_back(std::move(f));
    i = after;
  }
  c.steps = std::move(out);
}

std::shared_ptr<const cpu::NativeKernel> native_loop(const Compiled& c, const Step& st);  // below, with the running
std::shared_ptr<CudaFused> cuda_group(const Compiled& c, const Step& st);                  // below

void graph_plan(Compiled& c);  // below, with the running

std::shared_ptr<Compiled> compile(std::string name, Program prog, const Mesh& mesh) {
  auto c = std::make_shared<Compiled>(mesh);
  c->name = std::move(name);
  for (const auto& v : prog.values) {
    if (!(v.sharding.mesh() == mesh))
      throw ShardingError(msg(c->name.c_str(), "values on different meshes in one program (" + mesh.str() + " and " +
                                                   v.sharding.mesh().str() + ") are not supported"));
    add_slot(*c, v.shape, v.dtype, v.sharding);
  }
  c->eqn_in.resize(prog.eqns.size());
  c->eqn_out.resize(prog.eqns.size());
  for (size_t e = 0; e < prog.eqns.size(); ++e) {
    const Eqn& q = prog.eqns[e];
    const std::string op(q.prim->name());
    std::vector<int> ins;
    for (size_t i = 0; i < q.in.size(); ++i) {
      int s = q.in[i];
      if (!q.prim->identity() && !(c->slots[s].sharding == q.part.operands[i])) s = add_reshard(*c, s, q.part.operands[i], op);
      ins.push_back(s);
    }
    c->eqn_in[e] = ins;
    if (q.prim->identity()) {
      // The value itself, laid out anew: a reshard into the result's slot.
      const int dst = q.out[0];
      if (c->slots[ins[0]].sharding == c->slots[dst].sharding) {
        Step st;
        st.kind = Step::Reshard;
        st.in = {ins[0]};
        st.out = {dst};
        st.target = c->slots[dst].sharding;
        st.what = op;
        st.kind_text = "none";
        c->steps.push_back(std::move(st));
      } else {
        add_reshard(*c, ins[0], c->slots[dst].sharding, op, dst);
      }
      c->eqn_out[e] = {dst};
      continue;
    }
    if (q.prim->lowers_itself() || q.part.has_engine_steps()) {
      Step g;
      g.kind = Step::Global;
      g.eqns = {static_cast<int>(e)};
      g.in = ins;
      g.out = q.out;
      g.what = op;
      // Each device runs its share inside the call's task, unless the
      // primitive opts out or an array it takes or gives is on another mesh.
      g.on_host = !q.prim->runs_per_member();
      for (const auto* v : {&g.in, &g.out})
        for (int sl : *v) g.on_host = g.on_host || !(c->slots[sl].sharding.mesh() == c->mesh);
      c->eqn_out[e] = q.out;
      c->steps.push_back(std::move(g));
      continue;
    }
    Step k;
    k.kind = Step::Kernel;
    k.eqns = {static_cast<int>(e)};
    k.in = ins;
    std::vector<int> outs;
    const bool direct = q.part.reduce_axes.empty();
    for (size_t r = 0; r < q.out.size(); ++r) {
      const bool as_is = direct && q.part.local[r] == q.part.results[r];
      outs.push_back(as_is ? q.out[r] : add_slot(*c, q.types[r].shape, q.types[r].dtype, q.part.local[r]));
    }
    k.out = outs;
    c->eqn_out[e] = outs;
    c->steps.push_back(k);
    for (size_t r = 0; r < q.out.size(); ++r) {
      int s = outs[r];
      if (s == q.out[r]) continue;
      if (!direct) {
        // Combine the partial results into the layout the engine chose
        // (the final blocks: a reduce-scatter; else the local ones).
        const Shape& shape = q.types[r].shape;
        const NamedSharding& into = q.part.combined[r];
        Step red;
        red.kind = Step::Reduce;
        red.in = {s};
        red.target = into;
        red.axes = q.part.reduce_axes;
        red.op = q.prim->partial_op();
        red.what = op;
        red.kind_text = into == q.part.local[r] ? "all-reduce" : "reduce-scatter";
        if (red.op != ReduceOp::Sum) red.kind_text += std::string("(") + detail::name(red.op) + ")";
        std::int64_t group = 1;
        for (const auto& a : red.axes) group *= mesh.axis_size(a);
        std::int64_t most = 0;
        for (int pos = 0; pos < mesh.size(); ++pos)
          most = std::max(most, num_elements(into.shard_shape(shape, pos)) * (group - 1) *
                                    static_cast<std::int64_t>(itemsize(q.types[r].dtype)));
        red.bytes = most;
        const bool final_here = into == q.part.results[r];
        red.out = {final_here ? q.out[r] : add_slot(*c, shape, q.types[r].dtype, into)};
        red.record = reduce_record(mesh, red.axes, q.types[r].dtype, c->slots[s].boxes, c->slots[red.out[0]].boxes,
                                   op.c_str());
        c->steps.push_back(red);
        s = red.out[0];
        if (final_here) continue;
      }
      add_reshard(*c, s, q.part.results[r], op, q.out[r]);
    }
  }
  c->outputs = prog.outputs;
  c->prog = std::move(prog);
  fuse(*c);
  for (Step& st : c->steps) {
    if (st.kind == Step::Fused) {
      if (Runtime::get().platform() == Platform::Cuda)
        st.cuda = cuda_group(*c, st);
      else
        st.native = native_loop(*c, st);
    }
    for (const std::vector<int>* slots : {&st.in, &st.out})
      for (int sl : *slots)
        for (const Shape& l : c->slots[sl].local)
          st.work_bytes += num_elements(l) * static_cast<std::int64_t>(itemsize(c->slots[sl].dtype));
    if (st.sink_out >= 0)
      for (const Shape& l : c->slots[st.sink_out].local)
        st.work_bytes += num_elements(l) * static_cast<std::int64_t>(itemsize(c->slots[st.sink_out].dtype));
  }
  c->last_use.assign(c->slots.size(), -1);
  for (size_t k = 0; k < c->steps.size(); ++k)
    for (int s : c->steps[k].in) c->last_use[s] = static_cast<int>(k);
  for (int s : c->outputs) c->last_use[s] = static_cast<int>(c->steps.size());
  if (Runtime::get().platform() == Platform::Cuda) graph_plan(*c);
  return c;
}

// ------------------------------------------------------------------ running

using Buffers = std::vector<std::vector<Buffer>>;  // [slot][position]

// The block that step result `s` is written to at `pos`: a new one, or
// the one set there beforehand (a graph replay's call sets its results'
// blocks before the steps run; slots are written once, so a slot holds a
// buffer before its step only then).
const Buffer& out_block(const Compiled& c, int s, int pos, Buffers& bufs) {
  Buffer& b = bufs[s][pos];
  if (b.device_id() < 0)
    b = Buffer(c.mesh.devices()[pos].id(),
               static_cast<std::size_t>(num_elements(c.slots[s].local[pos])) * itemsize(c.slots[s].dtype));
  return b;
}

void run_kernel(const Compiled& c, const Step& st, int pos, Buffers& bufs) {
  const Eqn& q = c.prog.eqns[st.eqns[0]];
  LocalArgs in;
  in.reserve(st.in.size());
  for (int s : st.in) {
    const Slot& sl = c.slots[s];
    in.push_back(LocalIn{bufs[s][pos].device_data(), sl.local[pos], sl.dtype, sl.boxes[pos]});
  }
  LocalOuts out;
  out.reserve(st.out.size());
  for (int s : st.out) {
    const Slot& sl = c.slots[s];
    const Buffer& b = out_block(c, s, pos, bufs);
    out.push_back(LocalOut{b.device_data(), sl.local[pos], sl.dtype, sl.boxes[pos]});
  }
  TimelineScope scope(q.prim->name(), "kernel");
  eval_kernel(*q.prim, in, out);
}

// A fused step's members as its loops see them: per member, the
// primitive, each arg as (earlier member, -1) or (-1, slot), the slot it
// makes and whether it is written out (a result of the step).
struct FusedMember {
  const Primitive* prim = nullptr;
  std::vector<std::pair<int, int>> args;
  int slot = -1;
  bool out = false;
};

std::vector<FusedMember> fused_members(const Compiled& c, const Step& st) {
  std::vector<FusedMember> members;
  std::vector<int> made;  // slot each member writes, in member order
  for (int e : st.eqns) {
    FusedMember mem;
    mem.prim = c.prog.eqns[e].prim.get();
    for (int s : c.eqn_in[e]) {
      auto it = std::find(made.begin(), made.end(), s);
      mem.args.emplace_back(it != made.end() ? static_cast<int>(it - made.begin()) : -1, s);
    }
    mem.slot = c.eqn_out[e][0];
    mem.out = std::find(st.out.begin(), st.out.end(), mem.slot) != st.out.end();
    made.push_back(mem.slot);
    members.push_back(std::move(mem));
  }
  return members;
}

// The member whose value a fused step's sink reads (-1: no sink).
int sink_member(const Compiled& c, const Step& st) {
  if (st.sink_eqn < 0) return -1;
  const int si = c.eqn_in[st.sink_eqn][0];
  for (size_t k = 0; k < st.eqns.size(); ++k)
    if (c.eqn_out[st.eqns[k]][0] == si) return static_cast<int>(k);
  return -1;
}

// Fused step `st` as a generated loop sees it (backend/cpu/native.hpp);
// nullopt when a member has no element expression.
std::optional<cpu::NativeGroup> native_group(const Compiled& c, const Step& st) {
  cpu::NativeGroup g;
  const int sink_from = sink_member(c, st);
  const std::vector<FusedMember> members = fused_members(c, st);
  for (size_t k = 0; k < members.size(); ++k) {
    cpu::NativeGroup::Member nm;
    auto e = members[k].prim->element_expr();
    if (!e) return std::nullopt;
    nm.expr = *e;
    for (const auto& [member, s] : members[k].args) {
      cpu::NativeGroup::Arg a;
      a.member = member;
      if (member < 0) {
        a.input = static_cast<int>(g.inputs.size());
        g.inputs.push_back(c.slots[s].dtype);
      }
      nm.args.push_back(a);
    }
    if (members[k].out || static_cast<int>(k) == sink_from) nm.output = g.num_outputs++;
    g.members.push_back(std::move(nm));
  }
  return g;
}

// The native loop of fused step `st`, when the mode asks for one and it can
// be built; else nullptr (the tile loop).
std::shared_ptr<const cpu::NativeKernel> native_loop(const Compiled& c, const Step& st) {
  const cpu::NativeMode mode = cpu::native_mode();
  if (mode == cpu::NativeMode::Off) return nullptr;
  if (mode == cpu::NativeMode::Auto) {
    std::int64_t most = 0;
    for (const Shape& l : c.slots[c.eqn_out[st.eqns[0]][0]].local) most = std::max(most, num_elements(l));
    if (most < cpu::native_min_elements()) return nullptr;
  }
  const auto g = native_group(c, st);
  return g ? cpu::native_kernel(*g) : nullptr;
}

// The CUDA loop's source of fused step `st`: one thread per element of
// the result block, so every external operand must have that block's
// layout (broadcast operands leave the group to its members).
std::shared_ptr<CudaFused> cuda_group(const Compiled& c, const Step& st) {
  auto cf = std::make_shared<CudaFused>();
  const Slot& res = c.slots[c.eqn_out[st.eqns[0]][0]];
  for (int in : st.in)
    if (!tile_compatible(c.slots[in], res)) return cf;
  const auto g = native_group(c, st);
  if (!g) return cf;
  cf->source = cpu::native_source(*g, cpu::NativeTarget::Cuda, &cf->f, &cf->i);
  cf->words = cpu::cuda_args_layout(g->inputs.size(), static_cast<std::size_t>(g->num_outputs), cf->f.size(),
                                    cf->i.size())
                  .words;
  return cf;
}

// A fused step on a GPU: the group's CUDA loop, or its members one after
// another (each result in memory); then the reduction it ends in.
void run_fused_cuda(const Compiled& c, const Step& st, int pos, Buffers& bufs) {
  const int dev = c.mesh.devices()[pos].id();
  const Shape& shape = c.slots[c.eqn_out[st.eqns[0]][0]].local[pos];
  const std::int64_t n = num_elements(shape);
  TimelineScope scope("fused", "fused");
  const std::vector<FusedMember> members = fused_members(c, st);
  const int sink_from = sink_member(c, st);
  // Each member's block where it is written to memory: a result of the
  // step, or (members run one by one, or the sink's operand) a temporary.
  std::vector<Buffer> value(members.size());
  for (size_t k = 0; k < members.size(); ++k)
    if (members[k].out) value[k] = out_block(c, members[k].slot, pos, bufs);
  CudaFused& cf = *st.cuda;
  const cuda::FusedKernel* kernel = nullptr;
  if (!cf.source.empty()) {
    std::lock_guard<std::mutex> lock(cf.mu);
    if (!cf.tried) {
      cf.tried = true;
      std::string why;
      cf.kernel = cuda::fused_kernel(cf.source, cpu::kernel_cache_dir(), &why);
    }
    kernel = cf.kernel.get();
  }
  auto temp = [&](size_t k) {
    if (value[k].device_data() == nullptr && n > 0)
      value[k] = Buffer(dev, static_cast<std::size_t>(n) * itemsize(c.slots[members[k].slot].dtype));
  };
  if (kernel != nullptr) {
    // The argument struct's words: inputs, outputs, float and integer
    // scalars (cpu::cuda_args_layout), arrays at least one long.
    std::vector<const void*> ins;
    std::vector<void*> outs;
    for (size_t k = 0; k < members.size(); ++k) {
      for (const auto& [member, s] : members[k].args)
        if (member < 0) ins.push_back(bufs[s][pos].device_data());
      if (members[k].out || static_cast<int>(k) == sink_from) {
        temp(k);
        outs.push_back(value[k].device_data());
      }
    }
    std::vector<std::uint64_t> words;
    words.reserve(cf.words);
    auto put = [&](auto v, std::size_t count) {
      for (std::size_t j = 0; j < std::max<std::size_t>(count, 1); ++j) {
        std::uint64_t w = 0;
        if (j < count) std::memcpy(&w, &v[j], sizeof w);
        words.push_back(w);
      }
    };
    put(ins.data(), ins.size());
    put(outs.data(), outs.size());
    put(cf.f.data(), cf.f.size());
    put(cf.i.data(), cf.i.size());
    cuda::launch_fused(*kernel, words.data(), words.size(), ins.size(), outs.size(), cpu::cuda_fix_slot(dev, "jit"),
                       n, "jit");
    gpu_op_done(*Runtime::get().gpu(dev), "jit");
  } else {
    for (size_t k = 0; k < members.size(); ++k) {
      LocalArgs in;
      for (const auto& [member, s] : members[k].args) {
        const Slot& sl = c.slots[s];
        if (member >= 0)
          in.push_back(LocalIn{value[member].device_data(), shape, sl.dtype, sl.boxes[pos]});
        else
          in.push_back(LocalIn{bufs[s][pos].device_data(), sl.local[pos], sl.dtype, sl.boxes[pos]});
      }
      temp(k);
      const Slot& so = c.slots[members[k].slot];
      LocalOuts out{LocalOut{value[k].device_data(), shape, so.dtype, so.boxes[pos]}};
      eval_kernel(*members[k].prim, in, out);
    }
  }
  if (st.sink_eqn >= 0) {
    const Slot& so = c.slots[st.sink_out];
    const Slot& si = c.slots[c.eqn_in[st.sink_eqn][0]];
    const Buffer& b = out_block(c, st.sink_out, pos, bufs);
    LocalArgs in{LocalIn{value[sink_from].device_data(), si.local[pos], si.dtype, si.boxes[pos]}};
    LocalOuts out{LocalOut{b.device_data(), so.local[pos], so.dtype, so.boxes[pos]}};
    eval_kernel(*c.prog.eqns[st.sink_eqn].prim, in, out);
  }
}

void run_fused(const Compiled& c, const Step& st, int pos, Buffers& bufs) {
  if (st.cuda) return run_fused_cuda(c, st, pos, bufs);
  const int dev = c.mesh.devices()[pos].id();
  const Shape& shape = c.slots[c.eqn_out[st.eqns[0]][0]].local[pos];  // every member's result block
  const std::int64_t n = num_elements(shape);
  std::string label;  // "fused[sin,multiply,add]", only while a trace records
  if (tracing()) {
    label = "fused[";
    for (size_t k = 0; k < st.eqns.size(); ++k) {
      if (k) label += ",";
      label += c.prog.eqns[st.eqns[k]].prim->name();
    }
    if (st.sink_eqn >= 0) label += std::string(",") + std::string(c.prog.eqns[st.sink_eqn].prim->name());
    label += "]";
  }
  // Recorded with the bytes the loop writes to the result.
  const int res = st.sink_out >= 0 ? st.sink_out : st.out.empty() ? c.eqn_out[st.eqns.back()][0] : st.out.back();
  TimelineScope scope(label, "fused", num_elements(c.slots[res].local[pos]) *
                                          static_cast<std::int64_t>(itemsize(c.slots[res].dtype)));
  for (int s : st.out)
    bufs[s][pos] = Buffer(dev, static_cast<std::size_t>(n) * itemsize(c.slots[s].dtype));
  std::unique_ptr<TileSink> sink;
  const int sink_from = sink_member(c, st);  // the member whose result the sink reads
  if (st.sink_eqn >= 0) {
    const Slot& so = c.slots[st.sink_out];
    const int si = c.eqn_in[st.sink_eqn][0];
    const Slot& sl = c.slots[si];
    Buffer b(dev, static_cast<std::size_t>(num_elements(so.local[pos])) * itemsize(so.dtype));
    sink = c.prog.eqns[st.sink_eqn].prim->sink(LocalIn{nullptr, sl.local[pos], sl.dtype, sl.boxes[pos]},
                                                 LocalOut{b.data(), so.local[pos], so.dtype, so.boxes[pos]});
    bufs[st.sink_out][pos] = std::move(b);
  }
  // The loop itself is the backend's (backend/cpu/compiled.hpp).
  FusedLoop loop;
  loop.shape = &shape;
  loop.sink = sink.get();
  loop.sink_from = sink_from;
  loop.native = st.native.get();
  const std::vector<FusedMember> members = fused_members(c, st);
  loop.members.resize(members.size());
  for (size_t k = 0; k < members.size(); ++k) {
    FusedLoop::Member& mem = loop.members[k];
    mem.prim = members[k].prim;
    for (const auto& [member, s] : members[k].args) {
      FusedLoop::Arg a;
      a.isz = itemsize(c.slots[s].dtype);
      a.member = member;
      if (member < 0) {
        a.data = static_cast<const unsigned char*>(bufs[s][pos].data());
        a.shape = &c.slots[s].local[pos];
      }
      mem.args.push_back(std::move(a));
    }
    const int so = members[k].slot;
    mem.isz = itemsize(c.slots[so].dtype);
    if (members[k].out) mem.out = static_cast<unsigned char*>(bufs[so][pos].data());
  }
  run_fused_loop(loop);
  if (sink) sink->finish();
}

Array slot_array(const Compiled& c, int s, const Buffers& bufs) {
  const Slot& sl = c.slots[s];
  return wrap(sl.shape, sl.dtype, sl.sharding, bufs[s]);
}

// A primitive that partitions itself, on the whole arrays (host side).
// The layouts a global step's results take.
std::vector<NamedSharding> result_layouts(const Compiled& c, const Step& st) {
  std::vector<NamedSharding> layouts;
  for (int s : st.out) layouts.push_back(c.slots[s].sharding);
  return layouts;
}

// A global step's results: the primitive's own eval_global, or the engine
// running the steps its partition plans around the kernel (halo exchanges,
// carried scan totals).
std::vector<Array> run_global_results(const ExecContext& ctx, const Compiled& c, const Step& st,
                                      const std::vector<Array>& in) {
  const Eqn& q = c.prog.eqns[st.eqns[0]];
  if (q.prim->lowers_itself()) return q.prim->eval_global(ctx, in, q.types, result_layouts(c, st));
  return eval_partitioned(ctx, *q.prim, in, q.types, q.part);
}

void run_global(const Compiled& c, const Step& st, Buffers& bufs) {
  std::vector<Array> in;
  for (int s : st.in) in.push_back(slot_array(c, s, bufs));
  auto res = run_global_results(ExecContext::whole(), c, st, in);
  for (size_t r = 0; r < st.out.size(); ++r) bufs[st.out[r]] = res[r].impl()->buffers;
}

// Member `pos`'s share of a reshard or reduce step.
void run_comm(const Compiled& c, const Step& st, int pos, Buffers& bufs, MemberContext& m) {
  const Slot& from = c.slots[st.in[0]];
  const Slot& to = c.slots[st.out[0]];
  if (st.kind == Step::Reshard) {
    if (!st.plan) {
      bufs[st.out[0]][pos] = bufs[st.in[0]][pos];
      return;
    }
    TimelineScope scope("reshard", "reshard", st.plan->bytes_received[pos]);
    bufs[st.out[0]][pos] = m.whole(st.what).exchange(*st.plan, pos, bufs[st.in[0]][pos]);
    return;
  }
  // Reduce: every member of the group over the reduction axes holds a
  // partial of the same box; all-reduce it, then keep this member's box of
  // the result (smaller for a reduce-scatter).
  bufs[st.out[0]][pos] = reduce_member(m.over(st.axes, st.what), bufs[st.in[0]][pos], from.boxes[pos], to.boxes[pos],
                                       to.dtype, st.op, c.mesh.devices()[pos].id());
}

// The trace around one member's share of a global step: a lowering that
// binds ops (a primitive written with ops, as a user may) runs each of them
// as this member's share too.
class MemberTrace final : public Trace {
 public:
  explicit MemberTrace(MemberContext& m) : m_(m) {}
  std::vector<Array> process(const PrimitivePtr& prim, const std::vector<Array>& args) override {
    return eval_eager(ExecContext(m_), *prim, args);
  }

 private:
  MemberContext& m_;
};

// A primitive that partitions itself, run as member `pos`'s share
// (spmd/member.hpp): the arrays it sees hold only this member's blocks.
void run_global_member(const Compiled& c, const Step& st, int pos, Buffers& bufs, MemberContext& m,
                       std::vector<CommRecord>* records) {
  const Eqn& q = c.prog.eqns[st.eqns[0]];
  const int n = c.mesh.size();
  std::vector<Array> in;
  for (int s : st.in) {
    std::vector<Buffer> b(n);
    b[pos] = bufs[s][pos];
    in.push_back(wrap(c.slots[s].shape, c.slots[s].dtype, c.slots[s].sharding, std::move(b)));
  }
  TimelineScope scope(q.prim->name(), "kernel");
  RecordRedirect redirect(records);
  MemberTrace trace(m);
  TraceScope binds(&trace);
  auto res = run_global_results(ExecContext(m), c, st, in);
  for (size_t r = 0; r < st.out.size(); ++r) bufs[st.out[r]][pos] = res[r].impl()->buffers[pos];
}

// ------------------------------------------------------------ graph replay
//
// On GPUs, each op's kernels end with a wait for the device's stream, and a
// small op costs its launches and that round trip more than its work. In a
// cached call, each run of two or more kernels and fused loops in a row
// (graph_plan: no communication and no step that partitions itself in
// between) instead replays a recording of the device's work for the run
// (runtime/gpus.hpp): one launch of a CUDA graph, one wait.
//
// A graph holds the addresses it was recorded with, so it owns what it
// touches: blocks for the run's inputs and for its results (what outlives
// the run), and the temporaries its steps allocated while recording (their
// blocks, the kernels' scratch), all kept alive with it (KeepAllocations)
// so that no one else gets their memory. A replay copies the call's inputs
// into the graph's blocks, launches the graph, and copies its results out
// to new blocks of the call's, all on the device's stream, then waits once;
// the steps' host code does not run. The copies are the price of replaying
// whatever blocks the call has; a run is recorded only where they are
// small beside the launches and waits saved (kGraphCopyBytesPerKernel).
// Captured constants are read where they are (the program holds them).
//
// The first call runs op by op (it compiles the fused loops); the second
// records. Recording fails when a step needs the GPU's results on the host
// (a median's passes, a scatter's index tables, a key's words): the device
// then runs that run op by op from then on, and the refusal is counted
// (jit_graph_stats). So is a graph that would keep more than
// kGraphKeepBytes. TESSERA_CUDA_GRAPHS=0 turns replay off.

constexpr std::size_t kGraphKeepBytes = std::size_t(64) << 20;
// A run is recorded only when its inputs and results, copied at every
// replay, take at most this per kernel whose launch and wait it saves
// (a GPU copies 4 MiB in a few microseconds, less than a launch and a
// wait take).
constexpr std::int64_t kGraphCopyBytesPerKernel = std::int64_t(4) << 20;

}  // namespace

namespace {
std::mutex g_graph_stats_mu;
JitGraphStats g_graph_stats;

void count_graph(std::int64_t JitGraphStats::*what, const std::string& why = {}) {
  std::lock_guard<std::mutex> lock(g_graph_stats_mu);
  ++(g_graph_stats.*what);
  if (!why.empty()) g_graph_stats.last_reason = why;
}

// TESSERA_CUDA_GRAPHS, read once; set_jit_graphs overrides it.
std::atomic<int> g_graphs_on{-1};

bool graphs_enabled() {
  int on = g_graphs_on.load(std::memory_order_relaxed);
  if (on < 0) {
    const char* v = std::getenv("TESSERA_CUDA_GRAPHS");
    on = v == nullptr || std::string(v) != "0" ? 1 : 0;
    int unread = -1;
    g_graphs_on.compare_exchange_strong(unread, on, std::memory_order_relaxed);
    on = g_graphs_on.load(std::memory_order_relaxed);
  }
  return on == 1;
}
}  // namespace

void set_jit_graphs(bool on) { g_graphs_on.store(on ? 1 : 0, std::memory_order_relaxed); }

JitGraphStats jit_graph_stats() {
  std::lock_guard<std::mutex> lock(g_graph_stats_mu);
  return g_graph_stats;
}

namespace {

// The runs of `c` that are worth recording: two or more kernels or fused
// loops in a row (one saves no launch).
void graph_plan(Compiled& c) {
  auto g = std::make_unique<GraphState>();
  g->run_at.assign(c.steps.size(), -1);
  auto recordable = [&](const Step& st) {
    return !st.on_host && (st.kind == Step::Kernel || st.kind == Step::Fused || (st.kind == Step::Reshard && !st.plan));
  };
  for (std::size_t a = 0; a < c.steps.size();) {
    if (!recordable(c.steps[a])) {
      ++a;
      continue;
    }
    std::size_t b = a;
    int kernels = 0;
    while (b < c.steps.size() && recordable(c.steps[b])) kernels += c.steps[b++].kind != Step::Reshard;
    if (kernels >= 2) {
      GraphRun r;
      r.begin = a;
      r.end = b;
      std::vector<int> same(c.slots.size(), -1);  // a renaming reshard's result: its source
      std::vector<bool> here(c.slots.size(), false), written(c.slots.size(), false);
      for (std::size_t j = a; j < b; ++j) {
        const Step& st = c.steps[j];
        for (int s : st.in) {
          if (!here[s] && std::find(r.in.begin(), r.in.end(), s) == r.in.end()) r.in.push_back(s);
          if (!here[s] && c.last_use[s] < static_cast<int>(b) &&
              std::find(r.last_read.begin(), r.last_read.end(), s) == r.last_read.end())
            r.last_read.push_back(s);
        }
        std::vector<int> outs = st.out;
        if (st.sink_out >= 0) outs.push_back(st.sink_out);
        for (int s : outs) {
          here[s] = true;
          if (st.kind == Step::Reshard)
            same[s] = st.in[0];
          else
            written[s] = true;
        }
      }
      for (std::size_t s = 0; s < c.slots.size(); ++s) {
        if (!here[s] || c.last_use[s] < static_cast<int>(b)) continue;  // not made here, or dead after
        int root = static_cast<int>(s);
        while (same[root] >= 0) root = same[root];
        if (root != static_cast<int>(s)) r.aliases.emplace_back(static_cast<int>(s), root);
        if (written[root] && std::find(r.made.begin(), r.made.end(), root) == r.made.end()) r.made.push_back(root);
      }
      for (int s : r.in)
        r.constant.push_back(std::any_of(c.prog.constants.begin(), c.prog.constants.end(),
                                         [s](const auto& k) { return k.first == s; }));
      // What a replay copies, on the device that copies most.
      std::int64_t copied = 0;
      for (int pos = 0; pos < c.mesh.size(); ++pos) {
        std::int64_t here_bytes = 0;
        for (size_t i = 0; i < r.in.size(); ++i)
          if (!r.constant[i]) here_bytes += num_elements(c.slots[r.in[i]].local[pos]) * itemsize(c.slots[r.in[i]].dtype);
        for (int s : r.made) here_bytes += num_elements(c.slots[s].local[pos]) * itemsize(c.slots[s].dtype);
        copied = std::max(copied, here_bytes);
      }
      if (copied > kernels * kGraphCopyBytesPerKernel) {
        a = b;
        continue;
      }
      r.pos = std::vector<DeviceGraphs>(static_cast<std::size_t>(c.mesh.size()));
      g->run_at[a] = static_cast<int>(g->runs.size());
      g->runs.push_back(std::move(r));
    }
    a = b;
  }
  if (!g->runs.empty()) c.graphs = std::move(g);
}

// Member `pos`'s share of run `run` in a cached call: recorded the first
// time, replayed after. `steps` runs the run's steps op by op: the
// recording, and the fallback when a recording fails.
void run_graphed(const Compiled& c, const GraphRun& run, int pos, Buffers& bufs, const std::function<void()>& steps) {
  DeviceGraphs& dg = run.pos[static_cast<size_t>(pos)];
  std::unique_lock<std::mutex> lock(dg.mu);
  if (!dg.off.empty()) {
    lock.unlock();
    return steps();
  }
  const int dev = c.mesh.devices()[pos].id();
  const GpuHandle& g = *Runtime::get().gpu(dev);
  const char* op = c.name.c_str();
  auto bytes = [&](int s) {
    return static_cast<std::size_t>(num_elements(c.slots[s].local[pos])) * itemsize(c.slots[s].dtype);
  };
  const bool recording = !dg.graph;
  if (recording) {
    // Record: the graph's own blocks for the run's inputs and results, and
    // everything the steps allocate, are kept with it. The column as the
    // call had it is put back afterwards (the steps replace and release
    // its buffers as they go).
    std::vector<Buffer> before(c.slots.size());
    for (size_t s = 0; s < c.slots.size(); ++s) before[s] = bufs[s][pos];
    std::string why;
    {
      KeepAllocations keep(&dg.kept);  // this scope only: not the fallback's allocations
      dg.ins.assign(run.in.size(), Buffer());
      for (size_t i = 0; i < run.in.size(); ++i)
        if (!run.constant[i]) bufs[run.in[i]][pos] = dg.ins[i] = Buffer(dev, bytes(run.in[i]));
      dg.outs.clear();
      for (int s : run.made) {
        dg.outs.push_back(Buffer(dev, bytes(s)));
        bufs[s][pos] = dg.outs.back();
      }
      bool started = false;
      try {
        gpu_record_begin(g);
        started = true;
        steps();
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (started) {
        std::string end_why;
        dg.graph = gpu_record_end(g, &end_why);
        if (why.empty() && !dg.graph) why = end_why;
      }
    }
    for (size_t s = 0; s < c.slots.size(); ++s) bufs[s][pos] = before[s];
    std::size_t kept = 0;
    for (const Buffer& b : dg.kept) kept += b.nbytes();
    if (why.empty() && kept > kGraphKeepBytes)
      why = "its graph would keep " + format_bytes(static_cast<std::int64_t>(kept)) + " per device (at most " +
            format_bytes(static_cast<std::int64_t>(kGraphKeepBytes)) + ")";
    if (!why.empty()) {
      dg.graph.reset();
      dg.kept.clear();
      dg.ins.clear();
      dg.outs.clear();
      dg.off = why;
      lock.unlock();
      count_graph(&JitGraphStats::refused, why);
      return steps();
    }
  }
  // Replay: the inputs into the graph's blocks, the graph, its results out
  // to new blocks of the call's; one wait for all.
  for (size_t i = 0; i < run.in.size(); ++i)
    if (!run.constant[i])
      gpu_copy(g, dg.ins[i].device_data(), bufs[run.in[i]][pos].device_data(), bytes(run.in[i]),
               CopyKind::DeviceToDevice, op, false);
  gpu_graph_launch(g, *dg.graph, op);
  for (size_t i = 0; i < run.made.size(); ++i) {
    const int s = run.made[i];
    Buffer out(dev, bytes(s));
    gpu_copy(g, out.device_data(), dg.outs[i].device_data(), bytes(s), CopyKind::DeviceToDevice, op, false);
    bufs[s][pos] = std::move(out);
  }
  gpu_wait(g, op);
  count_graph(recording ? &JitGraphStats::recorded : &JitGraphStats::replayed);
  // The run's results under all their names, and its inputs released as
  // the steps would have.
  for (const auto& [o, r] : run.aliases) bufs[o][pos] = bufs[r][pos];
  for (int s : run.last_read) bufs[s][pos] = Buffer();
}

bool moves_data(const Step& st) {
  return (st.kind == Step::Reshard && st.plan) || st.kind == Step::Reduce || st.kind == Step::Global;
}

std::vector<Array> execute(const Compiled& c, const std::vector<Array>& args) {
  TimelineScope scope(c.name, "task");
  Buffers bufs(c.slots.size(), std::vector<Buffer>(c.mesh.size()));
  // A cached call on GPUs replays the recordable runs (run_graphed).
  const bool graphed = c.graphs && c.graphs->calls.fetch_add(1, std::memory_order_relaxed) > 0 && graphs_enabled() &&
                       !tracing();
  for (size_t i = 0; i < c.prog.inputs.size(); ++i) bufs[c.prog.inputs[i]] = args[i].impl()->buffers;
  for (const auto& [id, arr] : c.prog.constants) bufs[id] = arr.impl()->buffers;
  size_t k = 0;
  while (k < c.steps.size()) {
    if (c.steps[k].on_host) {
      run_global(c, c.steps[k], bufs);
      for (int s : c.steps[k].in)
        if (c.last_use[s] == static_cast<int>(k)) bufs[s].assign(c.mesh.size(), Buffer());
      ++k;
      continue;
    }
    // Steps up to the next global one that cannot run per member: one
    // task per device. Records of the communication the global steps plan
    // as they run come from the first member of this process (plans are
    // global: every member records the same), in step order.
    size_t end = k;
    bool comm = false;
    size_t globals = 0;
    while (end < c.steps.size() && !c.steps[end].on_host) {
      comm = comm || moves_data(c.steps[end]);
      if (c.steps[end].kind == Step::Global) ++globals;
      ++end;
    }
    std::vector<std::vector<CommRecord>> global_records(globals);
    int recorder = 0;
    while (recorder + 1 < c.mesh.size() && !Runtime::get().is_local(c.mesh.devices()[recorder].id())) ++recorder;
    auto member = [&](int pos, Session* session) {
      std::optional<MemberContext> m;
      if (session) m.emplace(c.mesh, pos, *session);
      size_t g = 0;
      auto step = [&](size_t j) {
        const Step& s = c.steps[j];
        switch (s.kind) {
          case Step::Kernel: run_kernel(c, s, pos, bufs); break;
          case Step::Fused: run_fused(c, s, pos, bufs); break;
          case Step::Global:
            run_global_member(c, s, pos, bufs, *m, pos == recorder ? &global_records[g] : nullptr);
            ++g;
            break;
          default: run_comm(c, s, pos, bufs, *m); break;
        }
        for (int in : s.in)
          if (c.last_use[in] == static_cast<int>(j)) bufs[in][pos] = Buffer();
      };
      for (size_t j = k; j < end; ++j) {
        if (const int r = graphed ? c.graphs->run_at[j] : -1; r >= 0 && c.graphs->runs[r].end <= end) {
          const GraphRun& run = c.graphs->runs[r];
          run_graphed(c, run, pos, bufs, [&] {
            for (size_t i = run.begin; i < run.end; ++i) step(i);
          });
          j = run.end - 1;
          continue;
        }
        step(j);
      }
    };
    // Without communication no session is needed (nor the SPMD lock).
    if (comm)
      run_spmd(c.mesh, [&](int pos, Session& session) { member(pos, &session); });
    else {
      // Small work runs on this thread, device after device (see
      // for_each_device).
      std::int64_t bytes = 0;
      for (size_t j = k; j < end; ++j) bytes += c.steps[j].work_bytes;
      for_each_device(ExecContext::whole(), c.mesh, [&](int pos) { member(pos, nullptr); }, bytes);
    }
    size_t g = 0;
    for (size_t j = k; j < end; ++j) {
      if (c.steps[j].record) record_comm(*c.steps[j].record);
      if (c.steps[j].kind == Step::Global)
        for (const CommRecord& r : global_records[g++]) record_comm(r);
    }
    k = end;
  }
  std::vector<Array> outs;
  for (int s : c.outputs) outs.push_back(slot_array(c, s, bufs));
  return outs;
}

// -------------------------------------------------------------------- text

std::string slot_name(int s) { return "%" + std::to_string(s); }

std::string slot_type(const Compiled& c, int s) {
  const Slot& sl = c.slots[s];
  return type_str(AbstractArray{sl.shape, sl.dtype, sl.sharding});
}

// "%4: f32[8@x] = add(%3, %2)" over the given slots.
std::string eqn_text(const Compiled& c, int e, const std::vector<int>& in, const std::vector<int>& out) {
  const Eqn& q = c.prog.eqns[e];
  std::string s;
  for (size_t r = 0; r < out.size(); ++r) s += (r ? ", " : "") + slot_name(out[r]) + ": " + slot_type(c, out[r]);
  s += " = " + std::string(q.prim->name());
  const std::string p = q.prim->params();
  if (!p.empty()) s += "[" + p + "]";
  s += "(";
  for (size_t i = 0; i < in.size(); ++i) s += (i ? ", " : "") + slot_name(in[i]);
  return s + ")";
}

}  // namespace

// -------------------------------------------------------------------- cache

struct JitCache::State {
  std::string name;
  JitOptions opt;
  std::mutex mu;
  struct Entry {
    std::vector<AbstractArray> sig;
    std::string statics;
    std::shared_ptr<Compiled> compiled;
  };
  std::vector<Entry> entries;
};

namespace {

bool same_sig(const std::vector<AbstractArray>& a, const std::vector<Array>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& impl = b[i].peek();
    if (a[i].dtype != impl.dtype || a[i].shape != impl.shape || !(a[i].sharding == impl.sharding)) return false;
  }
  return true;
}

}  // namespace

bool tracing_jit() { return dynamic_cast<JitTrace*>(current_trace()) != nullptr; }

JitCache::JitCache(std::string name, JitOptions opt) : st_(std::make_unique<State>()) {
  st_->name = std::move(name);
  st_->opt = std::move(opt);
}
JitCache::~JitCache() = default;

const JitOptions& JitCache::options() const { return st_->opt; }
const std::string& JitCache::name() const { return st_->name; }

int JitCache::size() const {
  std::lock_guard<std::mutex> lock(st_->mu);
  return static_cast<int>(st_->entries.size());
}

namespace {

std::shared_ptr<Compiled> get_compiled(JitCache::State& st, std::vector<Array>& args, const std::string& statics,
                                       const TraceFn& f, const std::vector<NamedSharding>& in_shardings);

}  // namespace

JitResult JitCache::call(std::vector<Array> args, const std::string& statics, const TraceFn& f,
                         const std::vector<NamedSharding>& in_shardings) {
  args = manual_inputs(std::move(args));  // inside a shard_map body: captures as local copies
  // Inside another jit's trace the function is traced inline, and so it is
  // on values of another transformation (vmap, jvp): their trace sees the
  // function's primitives one by one.
  bool transformed = false;
  for (const Array& a : args) transformed = transformed || (a.valid() && a.impl()->trace);
  if (tracing_jit() || transformed) {
    auto tree = std::make_shared<std::any>();
    auto outs = f(args, *tree);
    return {std::move(outs), std::move(tree)};
  }
  auto c = get_compiled(*st_, args, statics, f, in_shardings);
  auto out = execute(*c, args);
  manual_results(args, out);
  return {std::move(out), c->tree};
}

Lowered JitCache::lower(std::vector<Array> args, const std::string& statics, const TraceFn& f,
                        const std::vector<NamedSharding>& in_shardings) {
  if (tracing_jit()) throw Error(msg(st_->name.c_str(), "lower() cannot be called while tracing another jit"));
  return Lowered(get_compiled(*st_, args, statics, f, in_shardings));
}

namespace {

std::shared_ptr<Compiled> get_compiled(JitCache::State& st, std::vector<Array>& args, const std::string& statics,
                                       const TraceFn& f, const std::vector<NamedSharding>& in_shardings) {
  const char* name = st.name.c_str();
  if (args.empty()) throw Error(msg(name, "the function takes no arrays; jit needs at least one array argument"));
  for (size_t i = 0; i < args.size(); ++i) {
    check_operand(args[i], name, ("argument " + std::to_string(i)).c_str());
    if (args[i].impl()->trace) throw Error(msg(name, "argument " + std::to_string(i) + " is a traced value of another trace"));
  }
  if (!in_shardings.empty()) {
    if (in_shardings.size() != args.size())
      throw ShardingError(msg(name, "internal: " + std::to_string(in_shardings.size()) + " in_shardings for " +
                                        std::to_string(args.size()) + " array arguments"));
    for (size_t i = 0; i < args.size(); ++i)
      if (!(args[i].sharding() == in_shardings[i])) args[i] = device_put(args[i], in_shardings[i]);
  }
  {
    std::lock_guard<std::mutex> lock(st.mu);
    for (const auto& e : st.entries)
      if (e.statics == statics && same_sig(e.sig, args)) return e.compiled;
  }
  const Mesh mesh = args[0].sharding().mesh();
  JitTrace trace(st.name);
  std::vector<Array> tracers;
  for (const Array& a : args) {
    trace.prog.inputs.push_back(static_cast<int>(trace.prog.values.size()));
    tracers.push_back(trace.new_value(AbstractArray{a.shape(), a.dtype(), a.sharding()}));
  }
  std::vector<Array> outs;
  auto tree = std::make_shared<std::any>();
  clear_error_site();
  try {
    TraceScope scope(&trace);
    outs = f(tracers, *tree);
    if (const auto& os = st.opt.out_shardings; !os.empty()) {
      // One entry per result, or one for all.
      if (os.size() != 1 && os.size() != outs.size())
        throw ShardingError(msg(name, "out_shardings has " + std::to_string(os.size()) + " entries for " +
                                          std::to_string(outs.size()) + " results"));
      for (size_t i = 0; i < outs.size(); ++i) outs[i] = with_sharding_constraint(outs[i], os[os.size() == 1 ? 0 : i]);
    }
  } catch (Error& e) {
    // An op raised while tracing: say where the user called it.
    if (auto site = take_error_site()) {
      std::string where = " (in ";
      where += site->file_name();
      where += ":" + std::to_string(site->line()) + ", traced by " + st.name + ")";
      e.append(where);
    }
    throw;
  }
  for (const Array& o : outs) {
    check_operand(o, name, "result");
    trace.prog.outputs.push_back(trace.value_of(o));
  }
  propagate_back(trace.prog);
  auto c = compile(st.name, std::move(trace.prog), mesh);
  c->tree = std::move(tree);
  std::lock_guard<std::mutex> lock(st.mu);
  // Another thread may have compiled the same signature meanwhile: keep one.
  for (const auto& e : st.entries)
    if (e.statics == statics && same_sig(e.sig, args)) return e.compiled;
  st.entries.push_back({abstract_of(args), statics, c});
  return c;
}

}  // namespace
}  // namespace detail

std::string Lowered::as_text() const {
  using namespace detail;
  const Compiled& c = *c_;
  std::string s = c.name + " on " + c.mesh.str() + "\n  program(";
  for (size_t i = 0; i < c.prog.inputs.size(); ++i)
    s += (i ? ", " : "") + slot_name(c.prog.inputs[i]) + ": " + slot_type(c, c.prog.inputs[i]);
  s += ")\n";
  for (const auto& [id, arr] : c.prog.constants) s += "  " + slot_name(id) + ": " + slot_type(c, id) + " = constant\n";
  for (size_t e = 0; e < c.prog.eqns.size(); ++e) {
    const Eqn& q = c.prog.eqns[e];
    s += "  " + eqn_text(c, static_cast<int>(e), q.in, q.out) + "\n";
  }
  s += "  return ";
  for (size_t i = 0; i < c.outputs.size(); ++i) s += (i ? ", " : "") + slot_name(c.outputs[i]);
  s += "\ncompiled: " + std::to_string(c.steps.size()) + " steps\n";
  for (const Step& st : c.steps) {
    switch (st.kind) {
      case Step::Kernel:
        s += "  kernel " + eqn_text(c, st.eqns[0], st.in, st.out) + "\n";
        break;
      case Step::Global:
        s += "  global " + eqn_text(c, st.eqns[0], st.in, st.out) + "\n";
        break;
      case Step::Fused: {
        s += "  fused loop [";
        for (size_t k = 0; k < st.eqns.size(); ++k)
          s += (k ? ", " : "") + std::string(c.prog.eqns[st.eqns[k]].prim->name());
        if (st.sink_eqn >= 0) s += " -> " + std::string(c.prog.eqns[st.sink_eqn].prim->name());
        s += "] reads";
        for (int in : st.in) s += " " + slot_name(in);
        s += ", writes";
        for (int o : st.out) s += " " + slot_name(o) + ": " + slot_type(c, o);
        if (st.sink_out >= 0) s += " " + slot_name(st.sink_out) + ": " + slot_type(c, st.sink_out);
        // The compiled loop's source is kept in the kernel cache under this name.
        if (st.native) s += "; native loop " + st.native->key;
        s += "\n";
        break;
      }
      case Step::Reshard:
        s += "  " + slot_name(st.out[0]) + ": " + slot_type(c, st.out[0]) + " = reshard " + slot_name(st.in[0]) + " (" +
             st.kind_text + ", " + format_bytes(st.bytes) + " per device) for " + st.what + "\n";
        break;
      case Step::Reduce: {
        std::string axes;
        for (size_t i = 0; i < st.axes.size(); ++i) axes += (i ? "," : "") + st.axes[i];
        s += "  " + slot_name(st.out[0]) + ": " + slot_type(c, st.out[0]) + " = " + st.kind_text + " " +
             slot_name(st.in[0]) + " over (" + axes + ") (" + format_bytes(st.bytes) + " per device) for " + st.what +
             "\n";
        break;
      }
    }
  }
  return s;
}

}  // namespace tessera
