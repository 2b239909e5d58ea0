// Host math of the shape ops (see shape_ops.hpp).
#include "core/shape_ops.hpp"

#include <cstring>
#include <type_traits>

#include "core/dispatch.hpp"
#include "core/elementwise_op.hpp"

namespace tessera::detail {

std::vector<std::int64_t> strides_of(const Shape& s) {
  std::vector<std::int64_t> st(s.size());
  std::int64_t acc = 1;
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    st[d] = acc;
    acc *= s[d];
  }
  return st;
}

// The offsets and strides cpu::copy_affine computes
// (backend/cpu/shape.cpp), in the same way.
AffineWalk affine_walk(const Affine& m, const std::vector<Slice>& sbox, const std::vector<Slice>& blk,
                       const std::vector<Slice>& r, std::size_t isz) {
  auto sizes = [](const std::vector<Slice>& b) {
    Shape s(b.size());
    for (size_t d = 0; d < b.size(); ++d) s[d] = b[d].size();
    return s;
  };
  const auto is = static_cast<std::int64_t>(isz);
  const auto sst = strides_of(sizes(sbox));
  const auto dst_st = strides_of(sizes(blk));
  std::vector<std::int64_t> c(static_cast<std::size_t>(m.in_rank), 0);
  AffineWalk w;
  w.extents = sizes(r);
  w.src_strides.resize(r.size());
  w.dst_strides.resize(r.size());
  std::int64_t doff = 0;
  for (size_t j = 0; j < r.size(); ++j) {
    if (m.src[j] >= 0) c[m.src[j]] = m.offset[j] + m.step[j] * r[j].start;
    w.src_strides[j] = m.src[j] >= 0 ? m.step[j] * sst[m.src[j]] * is : 0;
    w.dst_strides[j] = dst_st[j] * is;
    doff += (r[j].start - blk[j].start) * dst_st[j];
  }
  std::int64_t soff = 0;
  for (int d = 0; d < m.in_rank; ++d) soff += (c[d] - sbox[d].start) * sst[d];
  w.src_offset = soff * is;
  w.dst_offset = doff * is;
  return w;
}

std::vector<unsigned char> scalar_bytes(const Scalar& v, DType dtype) {
  std::vector<unsigned char> b(itemsize(dtype));
  detail::dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    T x;
    if (dtype == DType::bool_)
      x = static_cast<T>(v.kind() == Scalar::Kind::Float ? v.as_double() != 0.0 : v.as_int() != 0);
    else if constexpr (std::is_floating_point_v<T>)
      x = static_cast<T>(v.as_double());
    else
      x = static_cast<T>(v.kind() == Scalar::Kind::Float ? static_cast<std::int64_t>(v.as_double()) : v.as_int());
    std::memcpy(b.data(), &x, sizeof(T));
  });
  return b;
}

std::vector<std::int64_t> broadcast_strides(const std::vector<std::int64_t>& local,
                                            const std::vector<std::int64_t>& out) {
  const int r = static_cast<int>(out.size()), lr = static_cast<int>(local.size());
  std::vector<std::int64_t> st(r, 0);
  std::int64_t acc = 1;
  for (int d = lr - 1; d >= 0; --d) {
    const int od = d + (r - lr);
    st[od] = (local[d] == 1 && out[od] != 1) ? 0 : acc;
    acc *= local[d];
  }
  return st;
}

}  // namespace tessera::detail
