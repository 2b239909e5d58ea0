// A build without CUDA has no NCCL transport (comm/direct.hpp).
#include "comm/direct.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {

DeviceTransport& nccl_transport() {
  throw DeviceError("[devices] TESSERA_GPU_COLLECTIVES=nccl: this build has no CUDA backend");
}

}  // namespace tessera::detail
