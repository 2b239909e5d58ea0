// reshard: the identity primitive that carries a sharding constraint
// (primitives/elementwise's make_constraint): eagerly the planner's plan runs
// through the mesh's communicator; under jit it becomes a reshard step.
#include "ops/common.hpp"
#include "primitives/elementwise.hpp"
#include "sharding/check.hpp"
#include "tessera/explain.hpp"

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

}  // namespace tessera
