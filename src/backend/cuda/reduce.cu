// The reduction kernels on CUDA GPUs (reduce.hpp). Every kernel gives one
// thread one output element and has it combine that element's inputs in
// exactly the order the CPU's kernel combines them, with the same
// combine1 (kernels/combine.hpp), so results are the CPU's bit for bit.
//
// reduce: the CPU's reducer (backend/cpu/reduce.cpp) walks the block's rows
// (the lines of the last dim) in row-major order; an output element therefore
// meets its rows in the lexicographic order of the reduced dims, which is
// the order this kernel walks them (an odometer over the reduced dims, the
// kept ones fixed by the output index).
//  - Last dim reduced ("fold"): each row is combined into the output's
//    running value v. For sums the row is cut into pieces of kSumPiece
//    elements (kernels/combine.hpp); each piece's first len/8*8 elements go
//    into eight lanes (element j into lane j mod 8; the lanes start at 0,
//    not at v), merged as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) into v, then
//    the piece's tail (only a row's last piece has one) adds one by one.
//    Other kinds combine the row in order.
//  - Last dim kept: each input element combines into its output in row
//    order, one step per reduced index.
//  The running value is the CPU's accumulator type (f64 for f32 sums,
//  bytes for bool), starts at the kind's identity and is cast to the
//  output's dtype at the end.
//  A piece's lane merge does not depend on v, so when each output sums many
//  elements a first kernel computes every piece's merge in parallel (a
//  thread per piece, into scratch memory) and the second, a thread per
//  output, adds them and the tails into v in order: a sum of n elements
//  then has n / kSumPiece serial steps instead of n / 8.
//
// arg_best: one thread per line, walking it in index order (the tie rule
// needs it), as cpu::arg_best does per line.
//
// tree_combine: one thread per element, folding the n members' values in the
// reduction tree's order (kernels/combine.hpp's tree_fold), in the dtype
// itself as the CPU's combine does.
#include "kernels/combine.hpp"  // first: see launch.cuh

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/kernels.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/reduce.hpp"
#include "tessera/error.hpp"
#include "core/dispatch.hpp"

namespace tessera::cuda {

namespace {

using detail::combine1;
using std::int64_t;

using detail::dispatch;

// The CPU reducer's identity, accumulator type and the kinds it runs per
// dtype (kernels/combine.hpp).
using detail::kReduceRuns;
using detail::reduce_identity;
using detail::ReduceAcc;

void check_rank(const char* op, std::size_t rank) {
  if (rank > static_cast<std::size_t>(kMaxRank))
    throw ShapeError(std::string("[") + op + "] CUDA kernels take arrays of at most " + std::to_string(kMaxRank) +
                     " dims, got " + std::to_string(rank));
}

// ---------------------------------------------------------------- reduce

// The eight lanes over x[0, full8), merged: what a row piece adds to v
// before its tail.
template <ReduceOp r, class T>
TESSERA_HD ReduceAcc<T> piece_merge(const T* x, int64_t full8) {
  using A = ReduceAcc<T>;
  A lane[8];
  for (int q = 0; q < 8; ++q) lane[q] = A{};
  for (int64_t j = 0; j < full8; j += 8)
    for (int q = 0; q < 8; ++q) lane[q] = combine1<r, A>(lane[q], static_cast<A>(x[j + q]));
  const A l01 = combine1<r, A>(lane[0], lane[1]), l23 = combine1<r, A>(lane[2], lane[3]);
  const A l45 = combine1<r, A>(lane[4], lane[5]), l67 = combine1<r, A>(lane[6], lane[7]);
  return combine1<r, A>(combine1<r, A>(l01, l23), combine1<r, A>(l45, l67));
}

// Whether combining a row's pieces separately and then the pieces' values
// in order gives the bits of one pass along the row: sums (whose pieces are
// the CPU's own order), and the kinds whose combine does not round: max and
// min (ties keep the earlier value, as one pass does, and any NaN gives the
// canonical NaN), any, all and integer products (wrapping multiplication is
// associative).
template <ReduceOp r, class T>
inline constexpr bool kPiecesExact = r == ReduceOp::Sum || r == ReduceOp::Max || r == ReduceOp::Min ||
                                     r == ReduceOp::Any || r == ReduceOp::All || !std::is_floating_point_v<T>;

// Thread per (row, piece, lane) of a block whose last dim is summed: lane q
// of the piece (its elements j = q mod 8 of the full groups, from zero),
// into lanes[(row * pieces + piece) * 8 + q]. The eight threads of a piece
// are neighbours, so a warp reads four pieces' 32-byte runs per step, where
// a thread per piece would read 32 scattered ones.
template <class T>
struct LaneKernel {
  const T* in;
  ReduceAcc<T>* lanes;
  int64_t inner, pieces;
  TESSERA_HD void operator()(int64_t i) const {
    using A = ReduceAcc<T>;
    const int64_t piece = i >> 3, q = i & 7;
    const int64_t row = piece / pieces, p = piece - row * pieces;
    const int64_t start = p * detail::kSumPiece;
    const int64_t len = inner - start < detail::kSumPiece ? inner - start : detail::kSumPiece;
    const T* x = in + row * inner + start;
    A v = A{};
    for (int64_t j = q; j < len / 8 * 8; j += 8) v = combine1<ReduceOp::Sum, A>(v, static_cast<A>(x[j]));
    lanes[i] = v;
  }
};

// Thread per piece: its eight lanes merged as piece_merge merges them.
template <class T>
struct MergeKernel {
  const ReduceAcc<T>* lanes;
  ReduceAcc<T>* merged;
  TESSERA_HD void operator()(int64_t i) const {
    using A = ReduceAcc<T>;
    constexpr ReduceOp r = ReduceOp::Sum;
    const A* l = lanes + i * 8;
    const A l01 = combine1<r, A>(l[0], l[1]), l23 = combine1<r, A>(l[2], l[3]);
    const A l45 = combine1<r, A>(l[4], l[5]), l67 = combine1<r, A>(l[6], l[7]);
    merged[i] = combine1<r, A>(combine1<r, A>(l01, l23), combine1<r, A>(l45, l67));
  }
};

// Thread per (row, piece) of a block whose last dim is reduced by one of
// the exact kinds other than sums: the whole piece combined from the
// identity into merged[row * pieces + piece]. (Lanes would change which of
// two equal values max and min keep, -0 or +0.)
template <ReduceOp r, class T>
struct PieceKernel {
  const T* in;
  ReduceAcc<T>* merged;
  int64_t inner, pieces;
  ReduceAcc<T> init;
  TESSERA_HD void operator()(int64_t i) const {
    const int64_t row = i / pieces, p = i - row * pieces;
    const int64_t start = p * detail::kSumPiece;
    const int64_t len = inner - start < detail::kSumPiece ? inner - start : detail::kSumPiece;
    const T* x = in + row * inner + start;
    ReduceAcc<T> v = init;
    for (int64_t j = 0; j < len; ++j) v = combine1<r, ReduceAcc<T>>(v, static_cast<ReduceAcc<T>>(x[j]));
    merged[i] = v;
  }
};

// v of lane k of the calling warp, for every accumulator type (1, 4 or 8
// bytes; __shfl_sync takes 32- and 64-bit words). Device code only.
template <class A>
TESSERA_HD A shuffle(A v, int k) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(A) == 8) {
    return __builtin_bit_cast(A, __shfl_sync(0xffffffffu, __builtin_bit_cast(long long, v), k));
  } else if constexpr (sizeof(A) == 4) {
    return __builtin_bit_cast(A, __shfl_sync(0xffffffffu, __builtin_bit_cast(int, v), k));
  } else {
    static_assert(sizeof(A) == 1, "shuffle: an accumulator of 1, 4 or 8 bytes");
    return static_cast<A>(__shfl_sync(0xffffffffu, static_cast<unsigned>(v), k));
  }
#else
  (void)k;
  return v;
#endif
}

template <ReduceOp r, class T>
struct ReduceKernel {
  using A = ReduceAcc<T>;
  const T* in;
  T* out;
  A init;
  // Output index -> input offset: the kept dims (the last dim excluded when
  // folding), with their input strides.
  int nkept = 0;
  int64_t kdims[kMaxRank] = {}, kstride[kMaxRank] = {};
  // The odometer: the reduced dims walked per output (the last dim excluded
  // when folding), in dim order, and the number of their combinations.
  int nred = 0;
  int64_t rdims[kMaxRank] = {}, rstride[kMaxRank] = {};
  int64_t steps = 0;
  bool fold = true;
  int64_t inner = 1, pieces = 1;
  // Each row piece's lane merge (row * pieces + piece), when the piece
  // kernel computed them; else this kernel does.
  const A* merged = nullptr;
  // Outputs (a kept last dim's merged pieces are piece-major: piece p of
  // output o at p * nout + o).
  int64_t nout = 0;

  // v combined with m[0], m[step], ... (count of them) in order. One
  // thread walks a long row's merged pieces (32768 of a 2^28 sum): its
  // loads go out kBatch at a time, all in flight together, and only the
  // combining is a chain.
  static constexpr int kBatch = 16;
  TESSERA_HD static A in_order(A v, const A* m, int64_t count, int64_t step = 1) {
    int64_t p = 0;
    for (; p + kBatch <= count; p += kBatch) {
      A b[kBatch];
      for (int k = 0; k < kBatch; ++k) b[k] = m[(p + k) * step];
      for (int k = 0; k < kBatch; ++k) v = combine1<r, A>(v, b[k]);
    }
    for (; p < count; ++p) v = combine1<r, A>(v, m[p * step]);
    return v;
  }

  // in_order(v, m, count) by the 32 threads of a warp, each `lane`: they
  // load a tile of kWarpTile merges at once (coalesced, the next tile in
  // flight while this one is combined) and pass them round by shuffles;
  // every lane combines all of them in order, so each ends with the one
  // thread's value. A single long row (a whole-array sum: 32768 merges of
  // a 2^28 sum) is then a chain of additions fed from registers rather
  // than one thread waiting on its loads. Device code only.
  static constexpr int kWarpLoads = 4, kWarpTile = 32 * kWarpLoads;
  TESSERA_HD static A in_order_warp(A v, const A* m, int64_t count, int lane) {
#ifdef __CUDA_ARCH__
    A cur[kWarpLoads], next[kWarpLoads];
    auto load = [&](A* t, int64_t at) {
      for (int u = 0; u < kWarpLoads; ++u) {
        const int64_t i = at + u * 32 + lane;
        t[u] = i < count ? m[i] : A{};
      }
    };
    int64_t p = 0;
    load(cur, 0);
    for (; p + kWarpTile <= count; p += kWarpTile) {
      load(next, p + kWarpTile);
#pragma unroll
      for (int u = 0; u < kWarpLoads; ++u)
#pragma unroll
        for (int k = 0; k < 32; ++k) v = combine1<r, A>(v, shuffle(cur[u], k));
      for (int u = 0; u < kWarpLoads; ++u) cur[u] = next[u];
    }
    for (; p < count; ++p) v = combine1<r, A>(v, m[p]);
    return v;
#else
    (void)lane;
    return in_order(v, m, count);
#endif
  }

  // The merges of a row's pieces combined into v in order: by one thread,
  // or by the warp of `lane` (>= 0).
  TESSERA_HD A row_merges(A v, int64_t row_index, int lane) const {
    const A* m = merged + row_index * pieces;
    return lane < 0 ? in_order(v, m, pieces) : in_order_warp(v, m, pieces, lane);
  }

  // v combined with the row x[0, inner), row number `row_index` of the
  // block, as the CPU's fold does it (lane: as row_merges).
  TESSERA_HD A row(A v, const T* x, int64_t row_index, int lane) const {
    if constexpr (r == ReduceOp::Sum) {
      if (merged) {
        // Every piece but the last is whole (kSumPiece is a multiple of 8):
        // the merges in order, then the last piece's tail.
        v = row_merges(v, row_index, lane);
        const int64_t start = (pieces - 1) * detail::kSumPiece;
        for (int64_t j = start + (inner - start) / 8 * 8; j < inner; ++j) v = combine1<r, A>(v, static_cast<A>(x[j]));
        return v;
      }
      for (int64_t p = 0; p < pieces; ++p) {
        const int64_t start = p * detail::kSumPiece;
        const int64_t len = inner - start < detail::kSumPiece ? inner - start : detail::kSumPiece;
        const int64_t full8 = len / 8 * 8;
        v = combine1<r, A>(v, piece_merge<r, T>(x + start, full8));
        for (int64_t j = start + full8; j < start + len; ++j) v = combine1<r, A>(v, static_cast<A>(x[j]));
      }
      return v;
    }
    if (merged) return row_merges(v, row_index, lane);
    for (int64_t j = 0; j < inner; ++j) v = combine1<r, A>(v, static_cast<A>(x[j]));
    return v;
  }

  // Output o's first input element.
  TESSERA_HD int64_t base_of(int64_t o) const {
    int64_t base = 0;
    for (int64_t i = o, d = nkept - 1; d >= 0; --d) {
      const int64_t q = i / kdims[d];
      base += (i - q * kdims[d]) * kstride[d];
      i = q;
    }
    return base;
  }

  // Steps [s0, s1) of an output's walk over the reduced dims (the last
  // fastest) from `base`, combined into v one element each (a kept last
  // dim).
  TESSERA_HD A walk(A v, int64_t base, int64_t s0, int64_t s1) const {
    if (nred == 1) {
      // One reduced dim (a column of a matrix): a stride, without the
      // odometer, whose run-time-indexed digits would live in local memory
      // and be read and written at every element.
      const int64_t st = rstride[0];
      for (int64_t s = s0, off = base + s0 * st; s < s1; ++s, off += st)
        v = combine1<r, A>(v, static_cast<A>(in[off]));
      return v;
    }
    int64_t idx[kMaxRank] = {};
    int64_t off = base;
    for (int64_t i = s0, d = nred - 1; d >= 0; --d) {
      const int64_t q = i / rdims[d];
      idx[d] = i - q * rdims[d];
      off += idx[d] * rstride[d];
      i = q;
    }
    for (int64_t s = s0; s < s1; ++s) {
      v = combine1<r, A>(v, static_cast<A>(in[off]));
      for (int d = nred - 1; d >= 0; --d) {
        off += rstride[d];
        if (++idx[d] < rdims[d]) break;
        off -= rstride[d] * rdims[d];
        idx[d] = 0;
      }
    }
    return v;
  }

  // A kept last dim: output o's piece p of kRowPiece steps, from the
  // identity (zero for sums).
  TESSERA_HD A kept_piece(int64_t o, int64_t p) const {
    const int64_t s0 = p * detail::kRowPiece;
    const int64_t s1 = steps - s0 < detail::kRowPiece ? steps : s0 + detail::kRowPiece;
    return walk(init, base_of(o), s0, s1);
  }

  TESSERA_HD void operator()(int64_t o) const {
    const int64_t base = base_of(o);
    A v = init;
    if (!fold) {
      // Sums join their pieces of rows in order (the CPU's partial rows);
      // the exact kinds may too, when the piece kernel ran.
      const int64_t np = (steps + detail::kRowPiece - 1) / detail::kRowPiece;
      if (merged) {
        v = in_order(v, merged + o, np, nout);
      } else if constexpr (r == ReduceOp::Sum) {
        for (int64_t p = 0; p < np; ++p) v = combine1<r, A>(v, kept_piece(o, p));
      } else {
        v = walk(v, base, 0, steps);
      }
      out[o] = static_cast<T>(v);
      return;
    }
    out[o] = static_cast<T>(fold_rows(v, base, -1));
  }

  // A folding reduction's output from its first input element `base`: its
  // rows in the odometer's order (the last reduced dim fastest), each
  // combined into v by row (lane: as row_merges).
  TESSERA_HD A fold_rows(A v, int64_t base, int lane) const {
    int64_t idx[kMaxRank] = {};
    int64_t off = base;
    for (int64_t s = 0; s < steps; ++s) {
      v = row(v, in + off, off / inner, lane);
      // Next combination: the last reduced dim fastest.
      for (int d = nred - 1; d >= 0; --d) {
        off += rstride[d];
        if (++idx[d] < rdims[d]) break;
        off -= rstride[d] * rdims[d];
        idx[d] = 0;
      }
    }
    return v;
  }
};

#ifdef __CUDACC__
// A warp per output of a folding reduction whose pieces' merges are
// computed (ReduceKernel::in_order_warp); lane 0 writes the output.
template <ReduceOp r, class T>
__global__ void __launch_bounds__(256) fold_by_warps(ReduceKernel<r, T> k) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t o = t >> 5;  // the same for a whole warp: all of it returns, or none
  if (o >= k.nout) return;
  const ReduceAcc<T> v = k.fold_rows(k.init, k.base_of(o), static_cast<int>(t & 31));
  if ((t & 31) == 0) k.out[o] = static_cast<T>(v);
}
#endif

// Thread per (output, piece of kRowPiece rows) of a reduction over leading
// dims: the piece into merged[piece * nout + output], so that the threads
// of a warp write neighbours and the final pass's threads read them.
// Neighbouring threads take neighbouring outputs, whose elements are
// neighbours in memory: a warp reads whole runs of a row.
template <ReduceOp r, class T>
struct KeptPieceKernel {
  ReduceKernel<r, T> k;
  ReduceAcc<T>* merged;
  int64_t nout;
  TESSERA_HD void operator()(int64_t i) const {
    const DivMod po = divmod(i, nout);  // i = p * nout + o
    merged[i] = k.kept_piece(po.r, po.q);
  }
};

// ---------------------------------------------------------------- argmax

template <class T>
struct ArgBestKernel {
  bool is_max;
  const T* in;
  T* value;
  int64_t* index;
  int64_t len, inner, base;
  T none;

  TESSERA_HD void operator()(int64_t e) const {
    const int64_t a = e / inner, c = e - a * inner;
    T bv = none;
    int64_t bi = -1;
    const T* p = in + a * len * inner + c;
    for (int64_t j = 0; j < len; ++j) {
      const T x = p[j * inner];
      if (bi < 0 || detail::arg_better(is_max, x, base + j, bv, bi)) bv = x, bi = base + j;
    }
    value[e] = bv;
    index[e] = bi;
  }
};

template <class T>
struct CandidatesKernel {
  const T* value;
  const int64_t* index;
  const T* best;
  int64_t* out;

  TESSERA_HD void operator()(int64_t k) const {
    out[k] = index[k] >= 0 && detail::arg_same_value(value[k], best[k]) ? index[k] : INT64_MAX;
  }
};

struct IndicesKernel {
  const int64_t* first;
  std::int32_t* out;
  TESSERA_HD void operator()(int64_t k) const { out[k] = static_cast<std::int32_t>(first[k]); }
};

// ---------------------------------------------------------------- combine

template <ReduceOp r, class T>
struct TreeKernel {
  const T* parts;
  T* out;
  int n;
  int64_t count;

  struct Leaf {
    const T* p;
    int64_t count;
    TESSERA_HD T operator()(int k) const { return p[k * count]; }
  };

  TESSERA_HD void operator()(int64_t i) const { out[i] = detail::tree_fold<r, T>(n, Leaf{parts + i, count}); }
};

}  // namespace

namespace {

// Whether a reduction runs a piece kernel first: over the pieces of its
// summed rows (the last dim reduced) or of its outputs' rows (the last dim
// kept); `owners` rows or outputs have `pieces` pieces each.
struct PiecePlan {
  bool pieces_pay = false;  // a piece kernel runs (scratch memory)
  bool fold = true;
  int64_t owners = 0, pieces = 0;
};

PiecePlan piece_plan(ReduceOp op, DType t, const std::vector<int64_t>& shape, const std::vector<bool>& reduced) {
  PiecePlan s;
  const int rank = static_cast<int>(shape.size());
  const bool exact = dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    return detail::with_op(op, [&](auto kind) {
      constexpr ReduceOp r = decltype(kind)::value;
      return kReduceRuns<r, T> && kPiecesExact<r, T>;
    });
  });
  if (!exact) return s;
  s.fold = rank == 0 || reduced[static_cast<std::size_t>(rank - 1)];
  const int64_t inner = rank > 0 ? shape[static_cast<std::size_t>(rank - 1)] : 1;
  int64_t total = 1, nout = 1;
  for (int d = 0; d < rank; ++d) {
    total *= shape[static_cast<std::size_t>(d)];
    if (!reduced[static_cast<std::size_t>(d)]) nout *= shape[static_cast<std::size_t>(d)];
  }
  if (inner == 0 || nout == 0 || total == 0) return s;
  if (s.fold) {
    s.owners = total / inner;
    s.pieces = (inner + detail::kSumPiece - 1) / detail::kSumPiece;
    // Worth a second kernel when each output's thread would otherwise walk
    // many elements: then it reads one merge per piece instead.
    s.pieces_pay = total / nout >= 4096;
  } else {
    // Each output walks total / nout rows, one element each: pieces pay when
    // there are several and too few outputs to fill a GPU.
    s.owners = nout;
    s.pieces = (total / nout + detail::kRowPiece - 1) / detail::kRowPiece;
    s.pieces_pay = s.pieces >= 2 && nout <= (int64_t(1) << 16);
  }
  return s;
}

}  // namespace

std::size_t reduce_scratch(ReduceOp op, DType t, const std::vector<int64_t>& shape, const std::vector<bool>& reduced) {
  const PiecePlan s = piece_plan(op, t, shape, reduced);
  if (!s.pieces_pay) return 0;
  const std::size_t acc = t == DType::f32 ? sizeof(double) : itemsize(t);  // ReduceAcc's size
  // Sums of a last dim keep each piece's eight lanes too.
  if (op == ReduceOp::Sum && s.fold) return static_cast<std::size_t>(s.owners * s.pieces) * 9 * acc;
  return static_cast<std::size_t>(s.owners * s.pieces) * acc;
}

void reduce(ReduceOp op, DType t, const void* in, const std::vector<int64_t>& shape, const std::vector<bool>& reduced,
            void* out, void* scratch) {
  const char* name = detail::name(op);
  check_rank(name, shape.size());
  const int rank = static_cast<int>(shape.size());
  int64_t total = 1, nout = 1;
  for (int d = 0; d < rank; ++d) {
    total *= shape[static_cast<std::size_t>(d)];
    if (!reduced[static_cast<std::size_t>(d)]) nout *= shape[static_cast<std::size_t>(d)];
  }
  if (nout == 0) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    detail::with_op(op, [&](auto kind) {
      constexpr ReduceOp r = decltype(kind)::value;
      if constexpr (kReduceRuns<r, T>) {
        ReduceKernel<r, T> k;
        k.in = static_cast<const T*>(in);
        k.out = static_cast<T*>(out);
        k.init = static_cast<ReduceAcc<T>>(reduce_identity<T>(r));
        k.fold = rank == 0 || reduced[static_cast<std::size_t>(rank - 1)];
        k.inner = rank > 0 && k.fold ? shape[static_cast<std::size_t>(rank - 1)] : 1;
        k.pieces = (k.inner + detail::kSumPiece - 1) / detail::kSumPiece;
        const PiecePlan plan = piece_plan(op, t, shape, reduced);
        auto* merged = plan.pieces_pay ? static_cast<ReduceAcc<T>*>(scratch) : nullptr;
        // Row-major input strides; the dims the odometer and the output index
        // walk.
        int64_t stride[kMaxRank] = {};
        int64_t s = 1;
        for (int d = rank - 1; d >= 0; --d) {
          stride[d] = s;
          s *= shape[static_cast<std::size_t>(d)];
        }
        k.steps = total == 0 ? 0 : 1;
        const int walked = k.fold && rank > 0 ? rank - 1 : rank;
        for (int d = 0; d < walked; ++d) {
          const int64_t n = shape[static_cast<std::size_t>(d)];
          if (reduced[static_cast<std::size_t>(d)]) {
            k.rdims[k.nred] = n;
            k.rstride[k.nred++] = stride[d];
            k.steps *= n;
          } else {
            k.kdims[k.nkept] = n;
            k.kstride[k.nkept++] = stride[d];
          }
        }
        if constexpr (kPiecesExact<r, T>) {
          const int64_t count = plan.owners * plan.pieces;
          if (merged != nullptr && plan.fold) {
            if constexpr (r == ReduceOp::Sum) {
              ReduceAcc<T>* lanes = merged + count;
              for_each(name, count * 8, LaneKernel<T>{k.in, lanes, k.inner, plan.pieces});
              for_each(name, count, MergeKernel<T>{lanes, merged});
            } else {
              for_each(name, count, PieceKernel<r, T>{k.in, merged, k.inner, plan.pieces, k.init});
            }
          } else if (merged != nullptr) {
            for_each(name, count, KeptPieceKernel<r, T>{k, merged, nout});
          }
          k.merged = merged;
        }
        k.nout = nout;
        // Rows of many pieces: a warp per output walks their merges.
        if (k.merged != nullptr && k.fold && k.pieces >= ReduceKernel<r, T>::kWarpTile) {
          if (const Current& c = current(name); !c.emulated) {
            const int64_t threads = nout * 32;
            fold_by_warps<r, T><<<static_cast<unsigned>((threads + 255) / 256), 256, 0,
                                  static_cast<cudaStream_t>(c.stream)>>>(k);
            check(static_cast<int>(cudaGetLastError()), name, "a kernel launch");
            return;
          }
        }
        for_each(name, nout, k);
      }
    });
  });
}

void arg_best(bool is_max, DType t, const void* in, const std::vector<int64_t>& shape, int axis, int64_t base,
              void* value, int64_t* index) {
  const char* name = is_max ? "argmax" : "argmin";
  check_rank(name, shape.size());
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[static_cast<std::size_t>(d)];
  for (std::size_t d = static_cast<std::size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    ArgBestKernel<T> k{is_max, static_cast<const T*>(in), static_cast<T*>(value), index,
                       shape[static_cast<std::size_t>(axis)], inner, base,
                       reduce_identity<T>(is_max ? ReduceOp::Max : ReduceOp::Min)};
    for_each(name, outer * inner, k);
  });
}

void arg_candidates(DType t, const void* value, const int64_t* index, const void* best, int64_t n, int64_t* out) {
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    for_each("argmax", n,
             CandidatesKernel<T>{static_cast<const T*>(value), index, static_cast<const T*>(best), out});
  });
}

void arg_indices(const int64_t* first, int64_t n, std::int32_t* out) {
  for_each("argmax", n, IndicesKernel{first, out});
}

void tree_combine(ReduceOp op, DType t, int n, const void* parts, void* out, int64_t count, int device,
                  const char* op_name) {
  if (n < 1)
    throw Error(std::string("[") + op_name + "] internal: a combine of " + std::to_string(n) + " members");
  if (const Current& c = current(op_name); c.device_id != device)
    throw DeviceError(std::string("[") + op_name + "] internal: a combine for device " + std::to_string(device) +
                      " called on the worker of device " + std::to_string(c.device_id));
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    detail::with_op(op, [&](auto kind) {
      for_each(op_name, count,
               TreeKernel<decltype(kind)::value, T>{static_cast<const T*>(parts), static_cast<T*>(out), n, count});
    });
  });
}

}  // namespace tessera::cuda
