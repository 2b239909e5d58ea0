// Copies that bypass the cache, for results written once and read much later.
#pragma once

#include <cstddef>

namespace tessera::cpu {

/// Copies `bytes` from src to dst with non-temporal stores where the CPU has
/// them (x86-64: 64-byte stores with AVX-512, else 16-byte SSE2 ones), so writing a large result does not first
/// read each destination line into the cache. Stores are weakly ordered:
/// call stream_fence() before another thread may read dst.
void stream_copy(void* dst, const void* src, std::size_t bytes);

/// Orders the non-temporal stores of this thread before its later stores.
void stream_fence();

/// Results smaller than this per device are written through the cache: they
/// are likely still cached when the next step reads them.
inline constexpr std::size_t kStreamMinBytes = std::size_t(4) << 20;

}  // namespace tessera::cpu
