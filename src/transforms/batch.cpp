// vmap: the batch trace, and chunked maps.
//
// A BatchTrace's values are batched arrays seen as one example: the value's
// type is the batched array's with the batch dim removed, and its payload
// is the batched array and where its batch dim is. Binding a primitive to
// such values unwraps them and calls the primitive's batching rule in the
// parent trace (eager, jit, another vmap, a jvp...), so the rule's ops run
// as ordinary ops on the whole batch; results with a batch dim are wrapped
// again. A primitive whose operands are all outside the trace is passed to
// the parent unchanged: it is the same for every example.
//
// Chunks. With chunk_size c, the mapped arrays are cut along their batch
// dims into chunks of c examples (the last one shorter: no padding), each
// chunk is traced and run as above, and each result is the concatenation of
// the chunks' results. The function runs once per chunk; nothing is
// compiled, so a shorter last chunk costs nothing extra. When the batch is
// sharded over mesh axes, the chunking happens inside a shard_map over those
// axes instead: each device cuts its own block (whatever its length) into
// chunks, so no device ever holds more than c examples' intermediates.
#include <algorithm>
#include <mutex>
#include <optional>

#include "core/promote.hpp"
#include "primitives/shape.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "transforms/rules/rules.hpp"
#include "tessera/ops.hpp"
#include "tessera/shard_map.hpp"
#include "transforms/shard_map.hpp"
#include "tessera/vmap.hpp"
#include "transforms/trace.hpp"

namespace tessera::detail {

namespace {

struct Batched {
  Array value;  // the whole batch
  int bdim;     // where the batch dim is in `value`
};

PartitionSpec spec_without(const PartitionSpec& s, int dim) {
  std::vector<PartitionSpec::Entry> e = s.entries();
  if (dim < static_cast<int>(e.size())) e.erase(e.begin() + dim);
  return PartitionSpec(std::move(e), s.unreduced());
}

PartitionSpec spec_with(const PartitionSpec& s, int dim, PartitionSpec::Entry entry, int rank) {
  std::vector<PartitionSpec::Entry> e = s.entries();
  e.resize(static_cast<size_t>(std::max<int>(rank, static_cast<int>(e.size()))));
  e[dim] = std::move(entry);
  return PartitionSpec(std::move(e), s.unreduced());
}

class BatchTrace final : public Trace {
 public:
  BatchTrace(std::int64_t size, std::optional<std::string> spmd) : size_(size), spmd_(std::move(spmd)) {}

  std::int64_t size() const { return size_; }

  // A batched array as one example of this trace (bdim < 0: the array itself).
  Array wrap(Array value, int bdim) {
    if (bdim < 0) return value;
    if (spmd_) value = constrain(value, bdim);
    Shape shape = value.shape();
    shape.erase(shape.begin() + bdim);
    NamedSharding sharding(value.sharding().mesh(), spec_without(value.sharding().spec(), bdim));
    const DType dtype = value.dtype();
    return make_tracer(this, std::move(shape), dtype, std::move(sharding),
                       std::make_shared<const Batched>(Batched{std::move(value), bdim}), "vmap");
  }

  // The batched array behind `a` and its batch dim (-1 when `a` is not ours).
  std::pair<Array, int> unwrap(const Array& a) const {
    if (!owns(a)) return {a, -1};
    const auto& b = payload_of<Batched>(a);
    return {b.value, b.bdim};
  }

  std::vector<Array> process(const PrimitivePtr& prim, const std::vector<Array>& args) override {
    bool ours = false;
    for (const Array& a : args) ours = ours || owns(a);
    std::vector<Array> out;
    std::vector<int> out_bdims;
    {
      TraceScope up(parent());
      if (!ours) return bind(prim, args);
      std::vector<Array> in;
      std::vector<int> bdims;
      for (const Array& a : args) {
        auto [v, d] = unwrap(a);
        in.push_back(std::move(v));
        bdims.push_back(d);
      }
      out = prim->batch(in, bdims, size_, out_bdims);
    }
    if (out_bdims.size() != out.size())
      throw Error(msg(std::string(prim->name()).c_str(), "internal: the batching rule gave no batch dim per result"));
    for (size_t r = 0; r < out.size(); ++r) out[r] = wrap(std::move(out[r]), out_bdims[r]);
    return out;
  }

 private:
  // spmd_axis_name: the batch dim sharded over the named axis.
  Array constrain(const Array& v, int bdim) const {
    const PartitionSpec& s = v.sharding().spec();
    if (bdim < s.size() && s[bdim].axes() == std::vector<std::string>{*spmd_}) return v;
    TraceScope up(parent());
    return with_sharding_constraint(v, spec_with(s, bdim, PartitionSpec::Entry(*spmd_), v.ndim()), {});
  }

  std::int64_t size_;
  std::optional<std::string> spmd_;
};

int normalize(int axis, int rank, const char* name, const std::string& what) {
  const int a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    throw ShapeError(msg(name, what + " has axis " + std::to_string(axis) + " but rank " + std::to_string(rank)));
  return a;
}

int out_axis_for(const VmapOptions& opt, size_t r, size_t nres, const char* name) {
  const auto& oa = opt.out_axes;
  if (oa.empty()) return 0;
  if (oa.size() == 1) return oa[0];
  if (oa.size() != nres)
    throw ShapeError(msg(name, "out_axes has " + std::to_string(oa.size()) + " entries for " + std::to_string(nres) +
                                   " result arrays"));
  return oa[r];
}

JitResult run_batch(const std::vector<Array>& args, const std::vector<int>& axes, std::int64_t size,
                    const VmapOptions& opt, const TraceFn& f, const char* name, JitCache* compile = nullptr);

// One batch compiled: the batched program traced under jit (cached by the
// chunk's shape, so equal chunks trace once) and run as one compiled
// program, whose elementwise chains are fused loops. jit gives eager's
// bits, so the results are those of the eager batch.
JitResult run_compiled(const std::vector<Array>& args, const std::vector<int>& axes, std::int64_t size,
                       const VmapOptions& opt, const TraceFn& f, const char* name, JitCache& cache) {
  return cache.call(args, std::to_string(size), [&](const std::vector<Array>& traced, std::any& tree) {
    JitResult r = run_batch(traced, axes, size, opt, f, name);
    tree = *r.tree;
    return r.outs;
  });
}

// One batch (or chunk) of `size` examples: args[i] mapped along axes[i].
// With `compile` (concrete arguments only), as one compiled program.
JitResult run_batch(const std::vector<Array>& args, const std::vector<int>& axes, std::int64_t size,
                    const VmapOptions& opt, const TraceFn& f, const char* name, JitCache* compile) {
  if (compile) return run_compiled(args, axes, size, opt, f, name, *compile);
  BatchTrace trace(size, opt.spmd_axis_name);
  std::vector<Array> ins;
  for (size_t i = 0; i < args.size(); ++i) ins.push_back(axes[i] == not_mapped ? args[i] : trace.wrap(args[i], axes[i]));
  auto tree = std::make_shared<std::any>();
  std::vector<Array> outs;
  {
    TraceScope scope(&trace);
    outs = f(ins, *tree);
  }
  std::vector<Array> res;
  for (size_t r = 0; r < outs.size(); ++r) {
    if (!outs[r].valid()) throw Error(msg(name, "result " + std::to_string(r) + " is an empty array"));
    auto [v, bdim] = trace.unwrap(outs[r]);
    const int oa = out_axis_for(opt, r, outs.size(), name);
    if (oa == not_mapped) {
      if (bdim >= 0)
        throw ShapeError(msg(name, "out_axes is not_mapped for result " + std::to_string(r) + ", but it depends on the "
                                       "example (" + typeof(v) + " batched along dim " + std::to_string(bdim) + ")"));
      res.push_back(v);
      continue;
    }
    const int rank = static_cast<int>(outs[r].ndim()) + 1;
    const int to = normalize(oa, rank, name, "out_axes entry for result " + std::to_string(r));
    res.push_back(bdim >= 0 ? move_dim(v, bdim, to) : move_dim(batch_first(v, -1, size), 0, to));
  }
  return {std::move(res), std::move(tree)};
}

// Mesh axes the mapped dim of `a` is sharded over (none for a traced or
// single-device value).
std::vector<std::string> batch_axes(const Array& a, int axis) {
  const NamedSharding& s = a.sharding();
  if (s.mesh().size() == 1 || axis >= s.spec().size()) return {};
  return s.spec()[axis].axes();
}

// The joined result of a chunked map over concrete values, written chunk by
// chunk into its slice. The output is allocated once, when the first chunk
// gives its type and layout, with the layout concatenate gives the chunks
// (so the result is what joining them would give, bitwise, layout
// included); each chunk is copied into the devices' blocks through the box
// exchange, whatever the chunk's own layout (a device receives only the part
// of the chunk its block holds), and then dropped. A chunked map so holds its output and one chunk's
// values, never every chunk's results and their concatenation at once.
class ChunkJoin {
 public:
  // `first`: the first chunk's result, joined along `dim` with the other
  // chunks of `c` examples each (the last may be short) into `size`.
  ChunkJoin(const Array& first, int dim, std::int64_t size, std::int64_t c, const char* name)
      : dim_(dim), name_(name) {
    std::vector<AbstractArray> parts;
    for (std::int64_t lo = 0; lo < size; lo += c) {
      Shape s = first.shape();
      s[dim] = std::min(size, lo + c) - lo;
      parts.push_back(AbstractArray{std::move(s), first.dtype(), first.sharding()});
    }
    const PrimitivePtr concat = make_concatenate("concatenate", dim, false, first.dtype());
    const auto types = concat->infer(parts);
    const Partition part = partition(*concat, parts, types);
    out_ = make_array(ExecContext::whole(), types[0].shape, first.dtype(), part.results[0], [](int, Buffer&) {});
  }

  // Writes `part` at `offset` along the dim.
  void write(const Array& part, std::int64_t offset) {
    const NamedSharding& s = out_.sharding();
    const int n = s.mesh().size();
    const int rank = out_.ndim();
    std::vector<std::vector<Slice>> blocks(n), regions(n), wanted(n);
    for (int t = 0; t < n; ++t) {
      blocks[t] = s.shard_index(out_.shape(), t);
      regions[t] = blocks[t];
      Slice& r = regions[t][dim_];
      r = Slice{std::max(r.start, offset), std::min(r.stop, offset + part.shape()[dim_])};
      if (r.stop < r.start) r.stop = r.start;
      wanted[t] = regions[t];  // the same box in the chunk's indices
      wanted[t][dim_] = Slice{r.start - offset, r.stop - offset};
      if (box_empty(regions[t])) wanted[t] = empty_box(rank);
    }
    const std::vector<Buffer> got = gather_boxes(ExecContext::whole(), part, wanted, name_);
    const std::size_t isz = itemsize(out_.dtype());
    for_each_device(ExecContext::whole(), s.mesh(), [&](int t) {
      if (box_empty(regions[t])) return;
      copy_box(got[t], regions[t], out_.impl()->buffers[t], blocks[t], regions[t], isz, name_);
    });
  }

  const Array& result() const { return out_; }

 private:
  int dim_;
  const char* name_;
  Array out_;
};

JitResult chunked(const std::vector<Array>& args, const std::vector<int>& axes, std::int64_t size,
                  const VmapOptions& opt, const TraceFn& f, const char* name, JitCache* compile = nullptr) {
  const std::int64_t c = opt.chunk_size;
  if (size <= c) return run_batch(args, axes, size, opt, f, name, compile);
  // Per result: its chunks in order (traced results, joined at the end), or
  // its output written in place (concrete ones).
  std::vector<std::vector<Array>> parts;
  std::vector<std::optional<ChunkJoin>> joins;
  std::vector<int> dims;
  std::shared_ptr<const std::any> tree;
  for (std::int64_t lo = 0; lo < size; lo += c) {
    const std::int64_t hi = std::min(size, lo + c);
    std::vector<Array> chunk;
    for (size_t i = 0; i < args.size(); ++i) {
      if (axes[i] == not_mapped) {
        chunk.push_back(args[i]);
        continue;
      }
      std::vector<SliceSpec> sl(static_cast<size_t>(args[i].ndim()));
      sl[axes[i]] = SliceSpec{lo, hi, 1};
      chunk.push_back(slice(args[i], sl, {}));
    }
    JitResult r = run_batch(chunk, axes, hi - lo, opt, f, name, compile);
    if (!tree) {
      tree = r.tree;
      parts.resize(r.outs.size());
      joins.resize(r.outs.size());
      dims.assign(r.outs.size(), not_mapped);
      for (size_t k = 0; k < r.outs.size(); ++k) {
        const int oa = out_axis_for(opt, k, r.outs.size(), name);
        if (oa == not_mapped) continue;
        dims[k] = normalize(oa, r.outs[k].ndim(), name, "out_axes entry for result " + std::to_string(k));
        if (!r.outs[k].impl()->trace) joins[k].emplace(r.outs[k], dims[k], size, c, name);
      }
    }
    for (size_t k = 0; k < r.outs.size(); ++k) {
      if (joins[k]) {
        joins[k]->write(r.outs[k], lo);
      } else if (dims[k] != not_mapped || parts[k].empty()) {
        parts[k].push_back(std::move(r.outs[k]));
      }
    }
    // A chunk's results are dropped here, before the next chunk runs.
  }
  std::vector<Array> outs;
  for (size_t k = 0; k < parts.size(); ++k) {
    if (joins[k]) {
      outs.push_back(joins[k]->result());
      continue;
    }
    if (dims[k] == not_mapped) {
      outs.push_back(parts[k].front());
      continue;
    }
    // A chunk's layout may depend on its size (Explicit axes on a short last
    // chunk, say): every chunk takes the first's before they are joined.
    for (Array& part : parts[k])
      if (!(part.sharding() == parts[k].front().sharding())) part = reshard(part, parts[k].front().sharding());
    outs.push_back(parts[k].size() == 1 ? parts[k].front() : concatenate(parts[k], dims[k], {}));
  }
  return {std::move(outs), std::move(tree)};
}

}  // namespace

JitResult vmap_call(const std::vector<Array>& args_in, const std::vector<int>& axes_in, const VmapOptions& opt,
                    const TraceFn& f, const char* name, bool compile) {
  const std::vector<Array> args = manual_inputs(args_in);  // inside a shard_map body: captures as local copies
  if (opt.chunk_size < 0)
    throw ShapeError(msg(name, "chunk_size must be >= 0, got " + std::to_string(opt.chunk_size)));
  std::vector<int> axes(axes_in.size());
  std::int64_t size = -1;
  size_t first = args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].valid()) throw Error(msg(name, "array " + std::to_string(i) + " of the arguments is empty"));
    if (axes_in[i] == not_mapped) {
      axes[i] = not_mapped;
      continue;
    }
    axes[i] = normalize(axes_in[i], args[i].ndim(), name, "argument array " + std::to_string(i) + " (" +
                                                              typeof(args[i]) + ")");
    const std::int64_t n = args[i].shape()[axes[i]];
    if (size < 0) {
      size = n;
      first = i;
    } else if (n != size) {
      throw ShapeError(msg(name, "mapped axes differ in size: array " + std::to_string(first) + " has " +
                                     std::to_string(size) + " examples along axis " + std::to_string(axes[first]) +
                                     ", array " + std::to_string(i) + " has " + std::to_string(n) + " along axis " +
                                     std::to_string(axes[i])));
    }
  }
  if (size < 0) throw ShapeError(msg(name, "no argument is mapped (every in_axes entry is not_mapped)"));
  bool concrete = true;
  for (const Array& a : args) concrete = concrete && !a.impl()->trace;
  // Compiled batches only at the top: under a trace the enclosing
  // transformation decides, and a shard_map body runs per device.
  std::optional<JitCache> cache;
  if (compile && concrete && !in_manual_body() && !current_trace()) cache.emplace(name, JitOptions{});
  JitCache* const jc = cache ? &*cache : nullptr;
  if (opt.chunk_size == 0) return run_batch(args, axes, size, opt, f, name, jc);

  // A batch sharded over devices: each device chunks its own block.
  const std::vector<std::string> baxes = batch_axes(args[first], axes[first]);
  if (baxes.empty() || !concrete || in_manual_body()) return chunked(args, axes, size, opt, f, name, jc);

  const Mesh& mesh = args[first].sharding().mesh();
  std::vector<PartitionSpec> in_specs;
  for (size_t i = 0; i < args.size(); ++i) {
    if (axes[i] == not_mapped || !(args[i].sharding().mesh() == mesh)) {
      in_specs.push_back(P());
      continue;
    }
    in_specs.push_back(spec_with(PartitionSpec(), axes[i], PartitionSpec::Entry(baxes), args[i].ndim()));
  }
  VmapOptions local = opt;
  local.out_axes = {};
  for (size_t k = 0; k < opt.out_axes.size(); ++k)
    local.out_axes.push_back(opt.out_axes[k] == not_mapped ? not_mapped : 0);
  // Every device runs the body at once: the first result tree is kept
  // under a lock.
  std::mutex tree_mu;
  std::shared_ptr<const std::any> tree;
  ShardMapBody body = [&](const std::vector<Array>& blocks) {
    JitResult r = chunked(blocks, axes, blocks[first].shape()[axes[first]], local, f, name);
    std::lock_guard<std::mutex> lock(tree_mu);
    if (!tree) tree = r.tree;
    return r.outs;
  };
  // Every result mapped: one out spec stands for all of them. With some
  // not_mapped, shard_map needs a spec per result before the body runs, and
  // the result count comes from running the function on one example of
  // zeros.
  std::vector<PartitionSpec> out_specs;
  const bool all_mapped = std::find(opt.out_axes.begin(), opt.out_axes.end(), not_mapped) == opt.out_axes.end();
  size_t nres = 0;
  if (all_mapped) {
    out_specs.push_back(P(PartitionSpec::Entry(baxes)));
  } else {
    std::vector<Array> one;
    for (size_t i = 0; i < args.size(); ++i) {
      if (axes[i] == not_mapped) {
        one.push_back(args[i]);
        continue;
      }
      Shape s = args[i].shape();
      s[axes[i]] = 1;
      one.push_back(zeros(s, args[i].dtype(), NamedSharding(mesh, P()), {}));
    }
    VmapOptions probe = local;
    probe.chunk_size = 0;
    nres = run_batch(one, axes, 1, probe, f, name).outs.size();
  }
  for (size_t k = 0; k < nres; ++k)
    out_specs.push_back(out_axis_for(opt, k, nres, name) == not_mapped ? P() : P(PartitionSpec::Entry(baxes)));
  std::vector<Array> outs = shard_map_call(body, mesh, in_specs, out_specs, ShardMapOptions{}, args);
  for (size_t k = 0; k < outs.size(); ++k) {
    const int oa = out_axis_for(opt, k, outs.size(), name);
    if (oa == not_mapped || oa == 0) continue;
    outs[k] = move_dim(outs[k], 0, normalize(oa, outs[k].ndim(), name, "out_axes entry for result " + std::to_string(k)));
  }
  return {std::move(outs), tree};
}

}  // namespace tessera::detail
