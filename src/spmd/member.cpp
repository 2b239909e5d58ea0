// Member mode (see member.hpp).
#include "spmd/member.hpp"

#include <algorithm>

#include "core/array_impl.hpp"

namespace tessera::detail {

Group& MemberContext::over(const std::vector<std::string>& axes, const std::string& op) {
  for (auto& [a, g] : groups_)
    if (a == axes) return *g;
  groups_.emplace_back(axes, communicator_for(mesh_).group(session_, mesh_, axes, pos_, op));
  return *groups_.back().second;
}

Buffer reduce_member(Group& g, const Buffer& partial, const std::vector<Slice>& partial_box,
                     const std::vector<Slice>& out_box, DType dtype, ReduceOp op, int device_id) {
  Local r = g.all_reduce(Local{partial, box_shape(partial_box), dtype}, op);
  if (out_box == partial_box) return std::move(r.data);
  const std::size_t isz = itemsize(dtype);
  Buffer out(device_id, static_cast<std::size_t>(num_elements(box_shape(out_box))) * isz);
  // In either memory space (a CUDA device's result stays on its GPU).
  if (out.nbytes() > 0) copy_box(r.data, partial_box, out, out_box, out_box, isz, "all_reduce");
  return out;
}


}  // namespace tessera::detail
