// The per-device kernels of the creation primitives
// (primitives/creation.hpp): each device writes its block of the result from
// the block's global box, with the creation kernels (backend/cpu/creation).
#include "backend/cpu/creation.hpp"
#include "core/array_impl.hpp"
#include "primitives/creation.hpp"

namespace tessera::detail {

void Fill::eval_cpu(const LocalArgs&, LocalOuts& out) const {
  cpu::fill(dtype_, out[0].data, num_elements(out[0].shape), value_);
}

void Arange::eval_cpu(const LocalArgs&, LocalOuts& out) const {
  cpu::arange(dtype_, out[0].data, out[0].box[0], start_, step_);
}

void Linspace::eval_cpu(const LocalArgs&, LocalOuts& out) const {
  cpu::linspace(dtype_, out[0].data, out[0].box[0], p_);
}

void Eye::eval_cpu(const LocalArgs&, LocalOuts& out) const {
  cpu::eye(dtype_, out[0].data, out[0].box[0], out[0].box[1], k_);
}

}  // namespace tessera::detail
