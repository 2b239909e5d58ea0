// FNV-1a, 64 bits: the same value on every process, build and run (which
// std::hash does not promise), so it can name cache files and compare
// collective signatures across processes. Not a security boundary.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace tessera::detail {

inline std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

/// fnv1a as 16 lower-case hex digits.
inline std::string fnv1a_hex(std::string_view s) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(s)));
  return buf;
}

}  // namespace tessera::detail
