// The partitioning engine: one primitive applied to concrete arrays on
// their mesh. propagate.hpp's Partition says where operands must lie and how
// results come out; this brings the operands there, exchanges the halos of
// stencils and carries the totals of scans, runs the primitive's per-device
// kernel on every device, combines partial results over the reduction axes
// and lays the results out as announced.
//
// Halos (Partition::halos). A stencil's rule shares a Halo factor (lo, hi)
// between an operand dim and a result dim: result row i reads operand rows
// [i - lo, i + hi] (hi < 0 when the last rows are not read: diff with a
// prepend longer than n). A position's box of the operand is its own block
// with each halo dim replaced by [a - lo, b + hi) for its result block
// [a, b) on that dim, clipped to the operand's n rows: start = clamp(a - lo,
// 0, n), stop = clamp(b + hi, start, n). So a range cut by the array's end
// stops at n, and an empty one still says where it lies; halos on two dims
// take the corners too. The kernel gets LocalIn.box = the box. A kernel that
// reads rows from several buffers (Primitive::reads_halo_pieces: diff,
// convolve, gradient) gets each device's own block where it lies and the
// rows of the box before and after it, gathered apart (one gather_boxes
// each: only the neighbours' edges move, and no block is copied). Any other
// gets the box in one buffer, from one gather_boxes (its own rows copied
// locally, the neighbours' edges and corners received). When every box is
// the own block (a halo dim that is not sharded) nothing moves.
//
// Scans (Partition::scan). Along a scanned dim split into K > 1 parts, pass
// 1 (Primitive::scan_totals) computes each block's totals, which form a
// small array with one row per part (same spec: part c holds row c); each
// device gathers the rows of the parts before it, and pass 2
// (Primitive::eval_scan) scans its block starting from their sum, added in
// part order: every device adds the same numbers in the same order, on every
// run. Only the totals move.
//
// On CUDA devices the same steps run: the gathers move the halo rows (and
// the totals) between the GPUs' memories, the kernels get device pointers
// and run their CUDA variants (eval_halo_cuda, scan_totals_cuda,
// eval_scan_cuda), the engine waiting for the device's stream after each.
//
// When such steps move nothing the engine records that (explain shows the
// op ran locally). For a member of a compiled program (an ExecContext with a
// member, spmd/member.hpp) every step is this member's share, so the program
// runs the same code on each device.
#include "spmd/engine.hpp"

#include <algorithm>

#include "core/validate.hpp"
#include "runtime/gpus.hpp"
#include "runtime/runtime.hpp"
#include "spmd/exchange.hpp"

namespace tessera::detail {

namespace {

// Runs a halo or scan kernel for the device whose worker calls it, as
// eval_kernel does: the CPU's on a CPU device; on a CUDA device the CUDA
// one, then waits for the device's stream (so the gathered rows it read
// may be freed, and its errors are raised here).
template <class Cpu, class Cuda>
void run_kernel(const Primitive& prim, Cpu&& cpu, Cuda&& cuda) {
  if (!on_cuda_device()) return cpu();
  cuda();
  gpu_wait(*Runtime::get().gpu(current_device()), std::string(prim.name()).c_str());
}

// What the halo and scan steps hand each device's kernel.
struct Steps {
  // Per operand with halo dims, per position: the box it reads, and where
  // it lies (one widened buffer, or pieces; neither: the own block).
  std::vector<std::vector<std::vector<Slice>>> boxes;
  std::vector<std::vector<Buffer>> widened;
  std::vector<std::vector<LocalArgs>> pieces;
  std::vector<std::vector<Buffer>> edges;  // the gathered rows the pieces point into
  // Scan: per position, the totals of the parts before its block.
  std::vector<Buffer> before;
  std::vector<std::vector<Slice>> before_boxes;
  DType before_dtype = DType::f32;
  bool moved = false;

  /// The blocks position `pos`'s kernel reads.
  LocalArgs args(const std::vector<Array>& ops, int pos) const {
    LocalArgs in;
    in.reserve(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      const Array& a = ops[i];
      if (boxes[i].empty()) {
        in.push_back(LocalIn{a.impl()->buffers[pos].device_data(), local_shape(a, pos), a.dtype(), local_index(a, pos)});
        continue;
      }
      const std::vector<Slice>& box = boxes[i][pos];
      const void* data = !pieces[i].empty()    ? nullptr
                         : !widened[i].empty() ? widened[i][pos].device_data()
                                               : a.impl()->buffers[pos].device_data();
      in.push_back(LocalIn{data, box_shape(box), a.dtype(), box});
    }
    return in;
  }
};

// The box of operand `i` each position reads (see the top of this file).
std::vector<std::vector<Slice>> halo_boxes(const Partition& part, int i, const Array& a,
                                           const std::vector<TypeInfo>& types) {
  const int npos = a.sharding().mesh().size();
  std::vector<std::vector<Slice>> boxes(npos);
  for (int pos = 0; pos < npos; ++pos) {
    boxes[pos] = local_index(a, pos);
    for (const Partition::HaloDim& h : part.halos) {
      if (h.operand != i) continue;
      const std::vector<Slice> rbox = part.local[h.result].shard_index(types[h.result].shape, pos);
      const std::int64_t n = a.shape()[h.dim];
      const Slice r = rbox[h.result_dim];
      const std::int64_t start = std::clamp<std::int64_t>(r.start - h.lo, 0, n);
      const std::int64_t stop = box_empty(rbox) ? start : std::clamp<std::int64_t>(r.stop + h.hi, start, n);
      boxes[pos][h.dim] = Slice{start, stop};
    }
  }
  return boxes;
}

// The halo step: each operand's boxes, and the gathers that bring them.
void exchange_halos(const ExecContext& ctx, const Primitive& prim, const Partition& part, const std::vector<Array>& ops,
                    const std::vector<TypeInfo>& types, const char* op, Steps& st) {
  const int npos = part.local.front().mesh().size();
  for (const Partition::HaloDim& h : part.halos) {
    const int i = h.operand;
    if (!st.boxes[i].empty()) continue;
    const Array& a = ops[i];
    st.boxes[i] = halo_boxes(part, i, a, types);
    bool own = true;
    for (int pos = 0; pos < npos && own; ++pos)
      own = box_empty(st.boxes[i][pos]) || st.boxes[i][pos] == local_index(a, pos);
    if (own) continue;
    int dims = 0;
    for (const Partition::HaloDim& g : part.halos) dims += g.operand == i;
    if (!prim.reads_halo_pieces() || dims > 1) {
      st.widened[i] = gather_boxes(ctx, a, st.boxes[i], op);
      st.moved = true;
      continue;
    }
    // The rows of the box before the own block and after it, gathered
    // apart; the own block is read where it lies.
    std::vector<std::vector<Slice>> lo(npos), hi(npos);
    bool any_lo = false, any_hi = false;
    for (int pos = 0; pos < npos; ++pos) {
      const Slice w = st.boxes[i][pos][h.dim], b = local_index(a, pos)[h.dim];
      lo[pos] = hi[pos] = st.boxes[i][pos];
      lo[pos][h.dim] = Slice{w.start, std::max(w.start, std::min(w.stop, b.start))};
      const std::int64_t after = std::max(w.start, b.stop);
      hi[pos][h.dim] = Slice{after, std::max(after, w.stop)};
      any_lo = any_lo || !box_empty(lo[pos]);
      any_hi = any_hi || !box_empty(hi[pos]);
    }
    std::vector<Buffer> lo_buf(npos), hi_buf(npos);
    if (any_lo) lo_buf = gather_boxes(ctx, a, lo, op);
    if (any_hi) hi_buf = gather_boxes(ctx, a, hi, op);
    st.moved = st.moved || any_lo || any_hi;
    st.pieces[i].resize(npos);
    for (int pos = 0; pos < npos; ++pos) {
      LocalArgs& p = st.pieces[i][pos];
      if (!box_empty(lo[pos]))
        p.push_back(LocalIn{lo_buf[pos].device_data(), box_shape(lo[pos]), a.dtype(), lo[pos]});
      if (!box_empty(local_index(a, pos)))
        p.push_back(LocalIn{a.impl()->buffers[pos].device_data(), local_shape(a, pos), a.dtype(), local_index(a, pos)});
      if (!box_empty(hi[pos]))
        p.push_back(LocalIn{hi_buf[pos].device_data(), box_shape(hi[pos]), a.dtype(), hi[pos]});
    }
    st.edges.push_back(std::move(lo_buf));
    st.edges.push_back(std::move(hi_buf));
  }
}

// The scan step: the totals of the parts before each block along the
// scanned dim (nothing when that dim is whole).
void carry_totals(const ExecContext& ctx, const Primitive& prim, const Partition& part, const std::vector<Array>& ops,
                  const std::vector<TypeInfo>& types, const char* op, Steps& st) {
  const Partition::ScanDim& s = *part.scan;
  const NamedSharding& sh = ops[s.operand].sharding();
  const int parts = sh.num_parts(s.dim);
  if (parts <= 1) return;
  Shape tshape = ops[s.operand].shape();
  tshape[s.dim] = parts;
  st.before_dtype = types[s.result].dtype;
  const Array totals = make_array(ctx, tshape, st.before_dtype, sh, [&](int pos, Buffer& b) {
    std::vector<Slice> tbox = sh.shard_index(tshape, pos);
    LocalOut t{b.device_data(), box_shape(tbox), st.before_dtype, std::move(tbox)};
    const LocalArgs in = st.args(ops, pos);
    run_kernel(prim, [&] { prim.scan_totals(in, t); }, [&] { prim.scan_totals_cuda(in, t); });
  });
  const int npos = sh.mesh().size();
  st.before_boxes.resize(npos);
  for (int pos = 0; pos < npos; ++pos) {
    st.before_boxes[pos] = local_index(totals, pos);
    st.before_boxes[pos][s.dim] = Slice{0, sh.part_index(s.dim, pos)};
  }
  st.before = gather_boxes(ctx, totals, st.before_boxes, op);
  st.moved = true;
}

}  // namespace

std::vector<AbstractArray> abstract_of(const std::vector<Array>& args) {
  std::vector<AbstractArray> out;
  out.reserve(args.size());
  for (const Array& a : args) out.push_back(AbstractArray{a.shape(), a.dtype(), a.sharding()});
  return out;
}

std::vector<Array> eval_partitioned(const ExecContext& ctx, const Primitive& prim, const std::vector<Array>& args,
                                    const std::vector<TypeInfo>& types, const Partition& part) {
  const std::string name(prim.name());
  const char* op = name.c_str();
  if (prim.identity()) return {reshard_for(ctx, args[0], part.results[0], op)};
  if (prim.lowers_itself()) {
    if (!prim.lowers_on_cuda()) require_cpu_platform(name, "this op");
    auto res = prim.eval_global(ctx, args, types, part.results);
    for (size_t r = 0; r < res.size(); ++r)
      if (r >= types.size() || !(res[r].sharding() == part.results[r]) || res[r].shape() != types[r].shape)
        throw Error(msg(op, "internal: result " + std::to_string(r) + " is " + describe(res[r]) +
                                ", not the layout the primitive announced"));
    return res;
  }
  std::vector<Array> ops(args.size());
  for (size_t i = 0; i < args.size(); ++i) ops[i] = reshard_for(ctx, args[i], part.operands[i], op);
  if (part.local.empty()) return {};
  const Mesh& mesh = part.local.front().mesh();
  Steps st;
  st.boxes.resize(ops.size());
  st.widened.resize(ops.size());
  st.pieces.resize(ops.size());
  exchange_halos(ctx, prim, part, ops, types, op, st);
  if (part.scan) carry_totals(ctx, prim, part, ops, types, op, st);
  if (part.has_engine_steps() && !st.moved) record_none(mesh, op);

  const size_t nr = types.size();
  std::vector<std::vector<Buffer>> bufs(nr, std::vector<Buffer>(mesh.size()));
  // What the kernels read and write over all devices (operands counted as
  // laid out: halo boxes and scan totals are small beside them).
  std::int64_t bytes = 0;
  for (int pos = 0; pos < mesh.size(); ++pos) {
    for (const Array& a : ops) bytes += num_elements(local_shape(a, pos)) * static_cast<std::int64_t>(itemsize(a.dtype()));
    for (size_t r = 0; r < types.size(); ++r)
      bytes += num_elements(part.local[r].shard_shape(types[r].shape, pos)) *
               static_cast<std::int64_t>(itemsize(types[r].dtype));
  }
  for_each_device(ctx, mesh, [&](int pos) {
    const LocalArgs in = st.args(ops, pos);
    LocalOuts out;
    out.reserve(nr);
    for (size_t r = 0; r < nr; ++r) {
      auto box = part.local[r].shard_index(types[r].shape, pos);
      Shape shape = box_shape(box);
      Buffer b(mesh.devices()[pos].id(), static_cast<std::size_t>(num_elements(shape)) * itemsize(types[r].dtype));
      out.push_back(LocalOut{b.device_data(), std::move(shape), types[r].dtype, std::move(box)});
      bufs[r][pos] = std::move(b);
    }
    if (prim.reads_halo_pieces()) {
      std::vector<LocalArgs> held(ops.size());
      for (size_t i = 0; i < ops.size(); ++i)
        if (!st.pieces[i].empty()) held[i] = st.pieces[i][pos];
      run_kernel(prim, [&] { prim.eval_halo(in, held, out); }, [&] { prim.eval_halo_cuda(in, held, out); });
    } else if (st.before.empty()) {
      eval_kernel(prim, in, out);
    } else {
      const std::vector<Slice>& b = st.before_boxes[pos];
      const LocalIn before{st.before[pos].device_data(), box_shape(b), st.before_dtype, b};
      run_kernel(prim, [&] { prim.eval_scan(in, before, out); }, [&] { prim.eval_scan_cuda(in, before, out); });
    }
  }, bytes);
  std::vector<Array> results;
  results.reserve(nr);
  for (size_t r = 0; r < nr; ++r) {
    const TypeInfo& t = types[r];
    Array res;
    if (!part.reduce_axes.empty()) {
      // Partial results: combine over the reduction axes (a reduce-scatter
      // when the engine chose to combine into the final blocks).
      const NamedSharding& into = part.combined[r];
      std::vector<std::vector<Slice>> pboxes(mesh.size()), oboxes(mesh.size());
      for (int pos = 0; pos < mesh.size(); ++pos) {
        pboxes[pos] = part.local[r].shard_index(t.shape, pos);
        oboxes[pos] = into.shard_index(t.shape, pos);
      }
      const DType dt = t.dtype;
      res = wrap(t.shape, t.dtype, into, reduce_over(ctx, mesh, part.reduce_axes, prim.partial_op(), dt, bufs[r], pboxes, oboxes, op));
    } else {
      res = wrap(t.shape, t.dtype, part.local[r], std::move(bufs[r]));
    }
    results.push_back(reshard_for(ctx, res, part.results[r], op));
  }
  return results;
}

std::vector<Array> eval_eager(const ExecContext& ctx, const Primitive& prim, const std::vector<Array>& args) {
  for (const Array& a : args)
    if (a.impl()->trace)
      throw Error(msg(std::string(prim.name()).c_str(),
                      describe(a) + " is a value traced by " + a.impl()->traced_by +
                          " that escaped its function; return it from the transformed function instead"));
  const auto in = abstract_of(args);
  const auto types = prim.infer(in);
  return eval_partitioned(ctx, prim, args, types, partition(prim, in, types));
}

}  // namespace tessera::detail
