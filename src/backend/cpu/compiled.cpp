// The CPU loop of a fused group (see compiled.hpp).
#include "backend/cpu/compiled.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/stream.hpp"
#include "core/array_impl.hpp"

namespace tessera::detail {

namespace {

// Elements per tile of a fused loop: 2 KiB of f32. Small tiles keep the
// loop's reads of its operands and writes of its results finely interleaved,
// close to the access pattern of one hand-fused loop, and a chain of dozens
// of intermediates stays in L1. Measured on 2^24 f32 over 2 devices:
// 2*sin(x)+1 took 4.2-4.4 ms with 512-element tiles, 6.7 ms with 1024 and
// 10 ms with 2048; 256 was no better than 512.
constexpr std::int64_t kTile = 512;
// Tiles ahead the tile loop prefetches its operands: 2*x+1 on 2^24 f32 over
// 2 devices went from 3.9-4.2 ms without to 2.3-2.9 ms with 8 (16 KiB).
// A native loop does neither this nor the streaming of large results below:
// it reads its operands and writes its results in place, as a hand-written
// loop would, and leaves the stream to the hardware prefetcher. Measured on
// 2^24 f32 over 2 Zen 4 devices, the same binary alternating both ways call
// by call: 2*sin(x)+1 took 4.2-6.4 ms in place against 5.2-7.7 ms with the
// prefetches and the streamed copy (0.72-0.88 of the time in every round),
// and the 20-op tanh chain 21.7-27.9 ms against 25.3-32.5 ms.
constexpr std::int64_t kPrefetchTiles = 8;

// Writes the values a broadcast operand (row-major block at `src`, element
// strides `strides` per result dim, 0 where repeated) takes at the result
// elements [t0, t0 + len) of a block of shape `shape` into `dst`. Walks the
// tile row by row: a row is a contiguous copy, or one value repeated.
void broadcast_tile(const unsigned char* src, const std::vector<std::int64_t>& strides, const Shape& shape,
                    std::int64_t t0, std::int64_t len, std::size_t isz, unsigned char* dst) {
  const size_t rank = shape.size();
  const std::int64_t inner = rank ? shape[rank - 1] : 1;
  const std::int64_t inner_stride = rank ? strides[rank - 1] : 0;
  for (std::int64_t f = t0, end = t0 + len; f < end;) {
    const std::int64_t col = f % inner, count = std::min(inner - col, end - f);
    std::int64_t off = 0, row = f / inner;
    for (size_t d = rank > 0 ? rank - 1 : 0; d-- > 0;) {
      off += (row % shape[d]) * strides[d];
      row /= shape[d];
    }
    const unsigned char* p = src + (off + col * inner_stride) * static_cast<std::int64_t>(isz);
    if (inner_stride == 0) {
      auto repeat = [&](auto tag) {
        using T = decltype(tag);
        T v;
        std::memcpy(&v, p, sizeof v);
        std::fill_n(reinterpret_cast<T*>(dst), count, v);
      };
      switch (isz) {
        case 1: repeat(std::uint8_t{}); break;
        case 2: repeat(std::uint16_t{}); break;
        case 4: repeat(std::uint32_t{}); break;
        default: repeat(std::uint64_t{}); break;
      }
    } else {
      std::memcpy(dst, p, static_cast<std::size_t>(count) * isz);
    }
    dst += count * static_cast<std::int64_t>(isz);
    f += count;
  }
}

}  // namespace

void run_fused_loop(const FusedLoop& loop) {
  const Shape& shape = *loop.shape;
  const std::int64_t n = num_elements(shape);
  if (n == 0) return;
  // Per member: where its operands and result live (a base pointer into a
  // full buffer, advanced per tile, or a scratch tile).
  struct Ref {
    unsigned char* base = nullptr;  // full buffer, or nullptr for scratch
    int scratch = -1;
    std::size_t isz = 0;
    std::vector<std::int64_t> strides;  // broadcast operand: element strides per result dim (0: repeated)
    unsigned char* stream = nullptr;    // result: computed in scratch, then streamed here past the cache
  };
  const size_t m = loop.members.size();
  // Scratch tiles: one per member's result, then one per broadcast operand
  // (kept between calls, grown only).
  thread_local std::vector<std::vector<unsigned char>> scratch;
  if (scratch.size() < m) scratch.resize(m);
  auto tile = [&](size_t i, std::size_t isz) {
    if (scratch.size() <= i) scratch.resize(i + 1);
    if (scratch[i].size() < static_cast<std::size_t>(kTile) * isz) scratch[i].resize(static_cast<std::size_t>(kTile) * isz);
  };
  size_t broadcasts = 0;
  std::vector<std::vector<Ref>> ins(m);
  std::vector<Ref> outs(m);
  for (size_t k = 0; k < m; ++k) {
    const FusedLoop::Member& mem = loop.members[k];
    for (const FusedLoop::Arg& a : mem.args) {
      Ref r;
      r.isz = a.isz;
      if (a.member >= 0) {
        // An earlier member's result: its tile, or its materialised block.
        if (outs[a.member].base == nullptr)
          r.scratch = a.member;
        else
          r.base = outs[a.member].base;
      } else {
        r.base = const_cast<unsigned char*>(a.data);
        if (*a.shape != shape) {
          // Broadcast: strides of its block aligned to the result's dims.
          const Shape& ls = *a.shape;
          r.strides.assign(shape.size(), 0);
          std::int64_t stride = 1;
          for (size_t d = ls.size(); d-- > 0;) {
            if (ls[d] != 1) r.strides[d + shape.size() - ls.size()] = stride;
            stride *= ls[d];
          }
          const size_t i = m + broadcasts++;
          tile(i, r.isz);
          r.scratch = static_cast<int>(i);
        }
      }
      ins[k].push_back(std::move(r));
    }
    Ref o;
    o.isz = mem.isz;
    if (mem.out) {
      o.base = mem.out;
      // A large result is written once and read by a later step after the
      // whole loop: storing it past the cache saves reading every line first.
      if (!loop.native && static_cast<std::size_t>(n) * o.isz >= cpu::kStreamMinBytes) {
        o.stream = o.base;
        o.base = nullptr;
        o.scratch = static_cast<int>(k);
        tile(k, o.isz);
      }
    } else {
      o.scratch = static_cast<int>(k);
      tile(k, o.isz);
    }
    outs[k] = o;
  }
  // The native loop's pointers, per tile: the external args in member
  // order, and the results it writes (see FusedLoop::native).
  std::vector<const void*> nin;
  std::vector<void*> nout;
  std::vector<size_t> nout_member;
  if (loop.native)
    for (size_t k = 0; k < m; ++k)
      if (loop.members[k].out || static_cast<int>(k) == loop.sink_from) nout_member.push_back(k);
  auto tile_out = [&](size_t k, std::int64_t t0) {
    return outs[k].base ? static_cast<void*>(outs[k].base + t0 * static_cast<std::int64_t>(outs[k].isz))
                        : static_cast<void*>(scratch[k].data());
  };
  std::vector<const void*> args;
  for (std::int64_t t0 = 0; t0 < n; t0 += kTile) {
    const std::int64_t len = std::min(kTile, n - t0);
    // Operands read from memory: ask for the tile kPrefetchTiles ahead, so
    // its loads are in flight while this tile computes.
    if (const std::int64_t ahead = t0 + kPrefetchTiles * kTile; !loop.native && ahead < n)
      for (size_t k = 0; k < m; ++k)
        for (const Ref& r : ins[k])
          if (r.base && r.strides.empty()) {
            const unsigned char* p = r.base + ahead * static_cast<std::int64_t>(r.isz);
            const std::int64_t bytes = std::min(kTile, n - ahead) * static_cast<std::int64_t>(r.isz);
            for (std::int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o);
          }
    // An external arg's tile: in memory, or its broadcast values in scratch.
    auto arg_tile = [&](const Ref& r) -> const void* {
      if (!r.strides.empty()) {
        broadcast_tile(r.base, r.strides, shape, t0, len, r.isz, scratch[r.scratch].data());
        return scratch[r.scratch].data();
      }
      return r.base ? static_cast<const void*>(r.base + t0 * static_cast<std::int64_t>(r.isz))
                    : static_cast<const void*>(scratch[r.scratch].data());
    };
    bool done = false;
    if (loop.native) {
      nin.clear();
      nout.clear();
      for (size_t k = 0; k < m; ++k)
        for (size_t j = 0; j < ins[k].size(); ++j)
          if (loop.members[k].args[j].member < 0) nin.push_back(arg_tile(ins[k][j]));
      for (size_t k : nout_member) nout.push_back(tile_out(k, t0));
      const cpu::NativeKernel& nk = *loop.native;
      done = nk.fn(nin.data(), nout.data(), nk.f.data(), nk.i.data(), len) == 0;
      // Else some element was beyond a polynomial's range: the tile loop
      // below recomputes the tile, by the slow exact path for those elements.
      if (!done) cpu::note_tile_redone();
    }
    for (size_t k = 0; k < m && !done; ++k) {
      args.clear();
      for (const Ref& r : ins[k]) args.push_back(arg_tile(r));
      loop.members[k].prim->eval_tile(args, tile_out(k, t0), len);
    }
    for (size_t k = 0; k < m; ++k) {
      if (outs[k].stream)
        cpu::stream_copy(outs[k].stream + t0 * static_cast<std::int64_t>(outs[k].isz), tile_out(k, t0),
                         static_cast<std::size_t>(len) * outs[k].isz);
      if (static_cast<int>(k) == loop.sink_from) loop.sink->feed(tile_out(k, t0), len);
    }
  }
  cpu::stream_fence();  // before the task reports done and another thread reads the results
}

}  // namespace tessera::detail
