// The partitioning engine: one primitive applied to concrete arrays on
// their mesh. propagate.hpp's Partition says where operands must lie and how
// results come out; this brings the operands there, runs the primitive's
// per-device kernel on every device, combines partial results over the
// reduction axes and lays the results out as announced.
#include "spmd/engine.hpp"

#include "core/validate.hpp"
#include "spmd/exchange.hpp"

namespace tessera::detail {

std::vector<AbstractArray> abstract_of(const std::vector<Array>& args) {
  std::vector<AbstractArray> out;
  out.reserve(args.size());
  for (const Array& a : args) out.push_back(AbstractArray{a.shape(), a.dtype(), a.sharding()});
  return out;
}

std::vector<Array> eval_partitioned(const Primitive& prim, const std::vector<Array>& args,
                                    const std::vector<TypeInfo>& types, const Partition& part) {
  const std::string name(prim.name());
  const char* op = name.c_str();
  if (prim.identity()) return {reshard_for(args[0], part.results[0], op)};
  if (prim.lowers_itself()) {
    auto res = prim.eval_global(args, types, part.results);
    for (size_t r = 0; r < res.size(); ++r)
      if (r >= types.size() || !(res[r].sharding() == part.results[r]) || res[r].shape() != types[r].shape)
        throw Error(msg(op, "internal: result " + std::to_string(r) + " is " + describe(res[r]) +
                                ", not the layout the primitive announced"));
    return res;
  }
  std::vector<Array> ops(args.size());
  for (size_t i = 0; i < args.size(); ++i) ops[i] = reshard_for(args[i], part.operands[i], op);
  if (part.local.empty()) return {};
  const Mesh& mesh = part.local.front().mesh();
  const size_t nr = types.size();
  std::vector<std::vector<Buffer>> bufs(nr, std::vector<Buffer>(mesh.size()));
  for_each_device(mesh, [&](int pos) {
    LocalArgs in;
    in.reserve(ops.size());
    for (const Array& a : ops)
      in.push_back(LocalIn{local_data(a, pos), local_shape(a, pos), a.dtype(), local_index(a, pos)});
    LocalOuts out;
    out.reserve(nr);
    for (size_t r = 0; r < nr; ++r) {
      auto box = part.local[r].shard_index(types[r].shape, pos);
      Shape shape = box_shape(box);
      Buffer b(mesh.devices()[pos].id(), static_cast<std::size_t>(num_elements(shape)) * itemsize(types[r].dtype));
      out.push_back(LocalOut{b.data(), std::move(shape), types[r].dtype, std::move(box)});
      bufs[r][pos] = std::move(b);
    }
    prim.eval_cpu(in, out);
  });
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
      res = wrap(t.shape, t.dtype, into, reduce_over(mesh, part.reduce_axes, prim.partial_op(), dt, bufs[r], pboxes, oboxes, op));
    } else {
      res = wrap(t.shape, t.dtype, part.local[r], std::move(bufs[r]));
    }
    results.push_back(reshard_for(res, part.results[r], op));
  }
  return results;
}

std::vector<Array> eval_eager(const Primitive& prim, const std::vector<Array>& args) {
  for (const Array& a : args)
    if (a.impl()->trace)
      throw Error(msg(std::string(prim.name()).c_str(),
                      describe(a) + " is a value traced by " + a.impl()->traced_by +
                          " that escaped its function; return it from the transformed function instead"));
  const auto in = abstract_of(args);
  const auto types = prim.infer(in);
  return eval_partitioned(prim, args, types, partition(prim, in, types));
}

}  // namespace tessera::detail
