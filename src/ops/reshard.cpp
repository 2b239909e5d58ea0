// reshard: the identity primitive that carries a sharding constraint
// (primitives/elementwise's make_constraint): eagerly the planner's plan runs
// through the mesh's communicator; under jit it becomes a reshard step.
#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/elementwise.hpp"
#include "core/check_spec.hpp"
#include "tessera/distributed.hpp"
#include "tessera/explain.hpp"
#include "runtime/runtime.hpp"

namespace tessera {

Array reshard(const Array& array, const NamedSharding& sharding) {
  if (!array.valid()) throw Error("[reshard] the array is empty (default-constructed)");
  if (!(array.sharding().mesh() == sharding.mesh()))
    throw ShardingError("[reshard] source and target must be on the same mesh: source " +
                        array.sharding().mesh().str() + ", target " + sharding.mesh().str() +
                        "; use device_put to move between meshes");
  sharding.check_rank(array.ndim(), "reshard");
  if (array.sharding() == sharding) {
    detail::record_none(sharding.mesh(), "reshard");
    return array;
  }
  return detail::bind1(detail::make_constraint("reshard", sharding), {array});
}

Array reshard(const Array& array, const PartitionSpec& spec) {
  if (!array.valid()) throw Error("[reshard] the array is empty (default-constructed)");
  const Mesh& mesh = array.sharding().mesh();
  // Validate here so the message names this op, not the sharding constructor.
  detail::check_spec(mesh, spec, "reshard");
  return reshard(array, NamedSharding(mesh, spec));
}

Array device_put(const Array& array, const NamedSharding& sharding) {
  sharding.check_rank(array.ndim(), "device_put");
  const auto& src = array.sharding();
  if (src.mesh() == sharding.mesh()) return reshard(array, sharding);
  // A traced value has no contents to carry over (as in JAX, a transformed
  // function runs on one set of devices).
  if (const detail::ArrayImpl& a = *array.impl(); a.trace)
    throw ShardingError("[device_put] cannot move " + typeof(array) + ", a value traced by " + a.traced_by +
                        ", to another mesh (" + sharding.str() + ") inside the transformed function; move it " +
                        "before calling the " + a.traced_by + "-transformed function, or after");
  // Different meshes (possibly different devices): go through the host,
  // gathering from every process when this one does not hold it all.
  std::vector<unsigned char> host(static_cast<std::size_t>(array.nbytes()));
  if (detail::Runtime::get().process_count() > 1)
    detail::process_allgather_raw(array, host.data(), array.dtype());
  else
    array.copy_to_host(host.data(), array.dtype());
  return device_put_raw(host.data(), array.dtype(), array.shape(), sharding);
}

}  // namespace tessera
