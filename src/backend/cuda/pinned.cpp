// The page-locked block cache's bookkeeping and the staged copy's loop
// (pinned.hpp); the CUDA calls they drive are memory.cpp's.
#include "backend/cuda/pinned.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <utility>

#include "tessera/error.hpp"

namespace tessera::detail::pinned {

HostBlockCache::HostBlockCache(Alloc alloc, Free free, std::size_t keep_limit)
    : alloc_(std::move(alloc)), free_(std::move(free)), limit_(keep_limit) {}

HostBlockCache::~HostBlockCache() { trim(); }

std::size_t HostBlockCache::size_class(std::size_t n) const {
  if (n <= kMinClass) return kMinClass;
  // Beyond the largest power of two there is no class: such a block (and
  // one whose class the cache could never keep) has its own size.
  if (n > (std::size_t(1) << (sizeof(std::size_t) * 8 - 1))) return n;
  const std::size_t c = std::bit_ceil(n);
  return c <= limit_ ? c : n;
}

void* HostBlockCache::allocate(std::size_t n, const char* op) {
  const std::size_t c = size_class(n);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = kept_.find(c); it != kept_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      stats_.kept_bytes -= c;
      --stats_.kept_blocks;
      stats_.in_use_bytes += c;
      ++stats_.in_use_blocks;
      ++stats_.reused;
      return p;
    }
  }
  // Outside the lock: locking pages takes a while, and other threads' reuse
  // need not wait for it.
  std::string why;
  void* p = alloc_(c, &why);
  if (p == nullptr) {
    // Kept blocks of other classes may be what the system lacks.
    trim();
    why.clear();
    p = alloc_(c, &why);
  }
  if (p == nullptr)
    throw DeviceError("[" + std::string(op) + "] cannot allocate " + std::to_string(n) +
                      " bytes of page-locked host memory: " + (why.empty() ? "out of memory" : why));
  std::lock_guard<std::mutex> lock(mu_);
  stats_.in_use_bytes += c;
  ++stats_.in_use_blocks;
  ++stats_.fresh;
  return p;
}

void HostBlockCache::free(void* p, std::size_t n) {
  if (p == nullptr) return;
  const std::size_t c = size_class(n);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.in_use_bytes -= c;
    --stats_.in_use_blocks;
    if (c <= limit_ && stats_.kept_bytes + c <= limit_) {
      kept_[c].push_back(p);
      stats_.kept_bytes += c;
      ++stats_.kept_blocks;
      return;
    }
    ++stats_.released;
  }
  free_(p, c);
}

std::size_t HostBlockCache::release_all_locked(std::vector<std::pair<void*, std::size_t>>& out) {
  std::size_t n = 0;
  for (auto& [c, blocks] : kept_) {
    for (void* p : blocks) out.emplace_back(p, c);
    n += blocks.size();
  }
  kept_.clear();
  stats_.kept_bytes = 0;
  stats_.kept_blocks = 0;
  stats_.released += n;
  return n;
}

void HostBlockCache::trim() {
  std::vector<std::pair<void*, std::size_t>> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    release_all_locked(out);
  }
  for (auto& [p, c] : out) free_(p, c);
}

HostBlockCache::Stats HostBlockCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

namespace {
std::atomic<std::size_t> g_threshold{kStageThreshold}, g_chunk{kStageChunk};
}  // namespace

StageSizes stage_sizes() { return {g_threshold.load(), g_chunk.load()}; }

void set_stage_sizes(StageSizes s) {
  g_threshold.store(s.threshold);
  g_chunk.store(std::max<std::size_t>(s.chunk, 1));
}

// The chunks alternate between the two buffers: chunk i uses bounce[i % 2].
// Invariant (both directions): bounce[b] is written (by the host's memcpy
// or a DMA) only after wait(b) has returned for its previous use, so a
// chunk in flight is never overwritten; and for ToHost a buffer is read by
// the host only after wait(b) for the DMA that filled it.
void staged_copy(const Stage& s, Direction d, unsigned char* host, std::size_t nbytes) {
  if (nbytes == 0) return;
  const std::size_t chunks = (nbytes + s.chunk - 1) / s.chunk;
  auto span = [&](std::size_t i) { return std::min(s.chunk, nbytes - i * s.chunk); };
  if (d == Direction::ToDevice) {
    for (std::size_t i = 0; i < chunks; ++i) {
      const int b = static_cast<int>(i % 2);
      s.wait(b);
      std::memcpy(s.bounce[b], host + i * s.chunk, span(i));
      s.dma(b, i * s.chunk, span(i));
    }
    return;
  }
  // ToHost: queue chunk i's DMA, then drain chunk i-1 while it runs.
  for (std::size_t i = 0; i <= chunks; ++i) {
    if (i < chunks) {
      const int b = static_cast<int>(i % 2);
      s.wait(b);
      s.dma(b, i * s.chunk, span(i));
    }
    if (i > 0) {
      const int b = static_cast<int>((i - 1) % 2);
      s.wait(b);
      std::memcpy(host + (i - 1) * s.chunk, s.bounce[b], span(i - 1));
    }
  }
}

}  // namespace tessera::detail::pinned
