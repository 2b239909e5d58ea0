// Non-temporal copies (see stream.hpp).
#include "backend/cpu/stream.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tessera::cpu {

namespace {

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// 64-byte stores: a whole line per instruction.
__attribute__((target("avx512f"))) void stream_body_avx512(unsigned char* d, const unsigned char* s, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 64)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), _mm512_loadu_si512(s + i));
}
// Read once, on first use (__builtin_cpu_init first: this may run before
// the runtime's own CPU detection has).
bool has_avx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
}
#endif

}  // namespace

void stream_copy(void* dst, const void* src, std::size_t bytes) {
#if defined(__x86_64__)
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  // The head up to 64-byte alignment of dst and the tail go through the
  // cache.
  const std::size_t head = std::min(bytes, (64 - reinterpret_cast<std::uintptr_t>(d) % 64) % 64);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  const std::size_t body = bytes / 64 * 64;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  if (has_avx512()) {
    stream_body_avx512(d, s, body);
  } else
#endif
  {
    for (std::size_t i = 0; i < body; i += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
  }
  std::memcpy(d + body, s + body, bytes - body);
#else
  std::memcpy(dst, src, bytes);
#endif
}

void stream_fence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

}  // namespace tessera::cpu
