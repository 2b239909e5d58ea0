// The per-device kernel of interp2d (primitives/interp2d.hpp): one device's
// block of queries against the whole grid and table, by the kernel of
// backend/cpu/interp2d.hpp.
#include "backend/cpu/interp2d.hpp"
#include "core/array_impl.hpp"
#include "primitives/interp2d.hpp"

namespace tessera::detail {

void Interp2d::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  const std::int64_t n = num_elements(in[0].shape);
  const std::int64_t rest = num_elements(Shape(in[4].shape.begin() + 2, in[4].shape.end()));
  const cpu::Interp2dGrid grid{in[2].data, in[2].dtype, in[2].shape[0], in[3].data, in[3].dtype, in[3].shape[0]};
  cpu::interp2d(method_, fill_, deriv_, grid, in[0].data, in[0].dtype, in[1].data, in[1].dtype, n, in[4].data,
                out[0].dtype, rest, out[0].data);
}

void Interp2dTranspose::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  const std::int64_t n = num_elements(in[0].shape);
  const std::int64_t rest = num_elements(Shape(out[0].shape.begin() + 2, out[0].shape.end()));
  const cpu::Interp2dGrid grid{in[2].data, in[2].dtype, in[2].shape[0], in[3].data, in[3].dtype, in[3].shape[0]};
  cpu::interp2d_transpose(method_, fill_, deriv_, grid, in[0].data, in[0].dtype, in[1].data, in[1].dtype, n,
                          in[4].data, out[0].dtype, rest, out[0].data);
}

}  // namespace tessera::detail
