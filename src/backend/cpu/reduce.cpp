// Reduction kernels (see reduce.hpp).
#include "backend/cpu/reduce.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <limits>
#include <type_traits>

#include "core/dispatch.hpp"
#include "core/nd_index.hpp"

namespace tessera::detail::cpu {

namespace {

// The identities, accumulator types (f32 sums accumulate in f64 locally;
// the mesh-level combine is in the output dtype), the kinds run per dtype
// and argmax's comparisons are the GPU's too (kernels/combine.hpp).

// Reduces a row-major block fed in order, in chunks of any size. Rows are
// the lines of the last dim, stepped with NdIndex over the others. A reduced
// last dim folds each row into one accumulator (f32 sums in f64); a kept one
// accumulates the row elementwise into an output row. Sums cut a reduced row
// into pieces of kSumPiece elements (kernels/combine.hpp) and split each
// piece into eight lanes (element j into lane j mod 8 up to the piece's last
// full group of eight), merged in a fixed tree into the row's accumulator
// before the piece's tail: independent lanes let the compiler vectorise,
// independent pieces let a GPU sum them in parallel, and the order of every
// addition depends only on the element's place in its row, never on where a
// chunk starts, so any split of the block gives the same bits. Sums over a
// kept last dim add an output row's rows into a partial row, which joins the
// output row every kRowPiece rows (and at the end): pieces of rows a GPU can
// sum in parallel.
template <ReduceOp r, class T>
class Streamer final : public Reducer {
  using A = ReduceAcc<T>;

 public:
  Streamer(const Shape& shape, const std::vector<bool>& reduced, void* out)
      : rank_(static_cast<int>(shape.size())),
        out_(static_cast<T*>(out)),
        rows_(first_dims(shape, rank_ > 0 ? rank_ - 1 : 0), strides(shape, reduced)) {
    std::int64_t nout = 1;
    for (int d = 0; d < rank_; ++d)
      if (!reduced[d]) nout *= shape[d];
    acc_.assign(static_cast<size_t>(nout), static_cast<A>(reduce_identity<T>(r)));
    inner_ = rank_ > 0 ? shape[rank_ - 1] : 1;
    fold_ = rank_ == 0 || reduced[rank_ - 1];
    if (r == ReduceOp::Sum && !fold_ && inner_ > 0) {
      part_.assign(static_cast<size_t>(nout), A{});
      rows_in_part_.assign(static_cast<size_t>(nout / inner_), 0);
    }
  }

  void feed(const void* chunk, std::int64_t n) override {
    const T* x = static_cast<const T*>(chunk);
    while (n > 0) {
      if (j_ == 0) start_row();
      std::int64_t take = std::min(n, inner_ - j_);
      if (fold_) {
        if (p_ == 0) start_piece();
        take = std::min(take, piece_ - p_);
        fold(x, take);
        p_ += take;
        if (p_ == piece_) p_ = 0;
      } else {
        for (std::int64_t k = 0; k < take; ++k) row_[j_ + k] = combine1<r, A>(row_[j_ + k], static_cast<A>(x[k]));
      }
      j_ += take;
      x += take;
      n -= take;
      if (j_ == inner_) end_row();
    }
  }

  void finish() override {
    for (size_t o = 0; o < rows_in_part_.size(); ++o)
      if (rows_in_part_[o] > 0) join_part(static_cast<std::int64_t>(o));
    for (size_t i = 0; i < acc_.size(); ++i) out_[i] = static_cast<T>(acc_[i]);
  }

 private:
  static std::vector<std::int64_t> strides(const Shape& shape, const std::vector<bool>& reduced) {
    std::vector<std::int64_t> st(shape.size(), 0);
    std::int64_t s = 1;
    for (size_t d = shape.size(); d-- > 0;)
      if (!reduced[d]) {
        st[d] = s;
        s *= shape[d];
      }
    return st;
  }

  void start_row() {
    const std::int64_t o = rows_.offset(0);
    if (fold_)
      v_ = acc_[o];
    else
      row_ = (part_.empty() ? acc_.data() : part_.data()) + o;
  }

  // Output row o's partial row joins it.
  void join_part(std::int64_t o) {
    A* a = acc_.data() + o * inner_;
    A* p = part_.data() + o * inner_;
    for (std::int64_t j = 0; j < inner_; ++j) {
      a[j] = combine1<r, A>(a[j], p[j]);
      p[j] = A{};
    }
    rows_in_part_[static_cast<size_t>(o)] = 0;
  }

  // The piece starting at row position j_: its length and lanes.
  void start_piece() {
    piece_ = std::min(kSumPiece, inner_ - j_);
    full8_ = r == ReduceOp::Sum ? piece_ / 8 * 8 : 0;
    for (A& l : lane_) l = A{};
    merged_ = false;
  }

  void end_row() {
    if (fold_) {
      acc_[rows_.offset(0)] = v_;
    } else if (!part_.empty()) {
      const std::int64_t o = rows_.offset(0) / inner_;
      if (++rows_in_part_[static_cast<size_t>(o)] == kRowPiece) join_part(o);
    }
    j_ = 0;
    if (rank_ > 0) rows_.next();
  }

  // The lanes join the row's accumulator once per piece, after its last full
  // group (at its start when it has none).
  void merge() {
    if constexpr (r == ReduceOp::Sum) {
      if (merged_) return;
      merged_ = true;
      const A l01 = combine1<r, A>(lane_[0], lane_[1]), l23 = combine1<r, A>(lane_[2], lane_[3]);
      const A l45 = combine1<r, A>(lane_[4], lane_[5]), l67 = combine1<r, A>(lane_[6], lane_[7]);
      v_ = combine1<r, A>(v_, combine1<r, A>(combine1<r, A>(l01, l23), combine1<r, A>(l45, l67)));
    }
  }

  void fold(const T* x, std::int64_t take) {
    std::int64_t k = 0;
    if constexpr (r == ReduceOp::Sum) {
      for (; k < take && p_ + k < full8_ && ((p_ + k) & 7) != 0; ++k)
        lane_[(p_ + k) & 7] = combine1<r, A>(lane_[(p_ + k) & 7], static_cast<A>(x[k]));
      A lane[8];
      for (int q = 0; q < 8; ++q) lane[q] = lane_[q];
      for (; k + 8 <= take && p_ + k + 8 <= full8_; k += 8)
        for (int q = 0; q < 8; ++q) lane[q] = combine1<r, A>(lane[q], static_cast<A>(x[k + q]));
      for (int q = 0; q < 8; ++q) lane_[q] = lane[q];
      for (; k < take && p_ + k < full8_; ++k)
        lane_[(p_ + k) & 7] = combine1<r, A>(lane_[(p_ + k) & 7], static_cast<A>(x[k]));
      if (p_ + k == full8_) merge();
    }
    A v = v_;
    for (; k < take; ++k) v = combine1<r, A>(v, static_cast<A>(x[k]));
    v_ = v;
  }

  int rank_;
  T* out_;
  NdIndex<1> rows_;
  std::vector<A> acc_;
  std::vector<A> part_;                      // sums over a kept last dim: each output row's partial row
  std::vector<std::int64_t> rows_in_part_;  // and how many rows it holds
  std::int64_t inner_ = 1, j_ = 0;
  std::int64_t piece_ = 0, full8_ = 0, p_ = 0;  // the current piece of a folded row: length, full groups, position
  bool fold_ = true, merged_ = false;
  A v_{};
  A lane_[8] = {};
  A* row_ = nullptr;
};

}  // namespace

bool reduce_runs(ReduceOp op, DType t) {
  return dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    return with_op(op, [&](auto kind) { return kReduceRuns<decltype(kind)::value, T>; });
  });
}

std::unique_ptr<Reducer> make_reducer(ReduceOp op, DType t, const Shape& shape, const std::vector<bool>& reduced,
                                      void* out) {
  return dispatch(t, [&](auto tag) -> std::unique_ptr<Reducer> {
    using T = decltype(tag);
    return with_op(op, [&](auto kind) -> std::unique_ptr<Reducer> {
      if constexpr (kReduceRuns<decltype(kind)::value, T>)
        return std::make_unique<Streamer<decltype(kind)::value, T>>(shape, reduced, out);
      else
        return nullptr;
    });
  });
}

void reduce(ReduceOp op, DType t, const void* in, const Shape& shape, const std::vector<bool>& reduced, void* out) {
  auto r = make_reducer(op, t, shape, reduced, out);
  if (!r) return;
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  r->feed(in, n);
  r->finish();
}

void arg_best(bool is_max, DType t, const void* in, const Shape& shape, int axis, std::int64_t base, void* value,
              std::int64_t* index) {
  const int rank = static_cast<int>(shape.size());
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (int d = axis + 1; d < rank; ++d) inner *= shape[d];
  const std::int64_t len = shape[axis];
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(in);
    T* v = static_cast<T*>(value);
    const T none = reduce_identity<T>(is_max ? ReduceOp::Max : ReduceOp::Min);
    // Lines run along `axis` with stride `inner`: the walk goes row by row
    // (j outer, c inner) so reads stay contiguous; each line still sees its
    // elements in index order, which is what the tie rule needs.
    for (std::int64_t a = 0; a < outer; ++a) {
      T* bv = v + a * inner;
      std::int64_t* bi = index + a * inner;
      for (std::int64_t c = 0; c < inner; ++c) bv[c] = none, bi[c] = -1;
      for (std::int64_t j = 0; j < len; ++j) {
        const T* row = p + (a * len + j) * inner;
        for (std::int64_t c = 0; c < inner; ++c)
          if (bi[c] < 0 || arg_better(is_max, row[c], base + j, bv[c], bi[c])) bv[c] = row[c], bi[c] = base + j;
      }
    }
  });
}

void arg_candidates(DType t, const void* value, const std::int64_t* index, const void* best, std::int64_t n,
                    std::int64_t* out) {
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    const T* v = static_cast<const T*>(value);
    const T* b = static_cast<const T*>(best);
    for (std::int64_t k = 0; k < n; ++k)
      out[k] = index[k] >= 0 && arg_same_value(v[k], b[k]) ? index[k] : std::numeric_limits<std::int64_t>::max();
  });
}

}  // namespace tessera::detail::cpu
