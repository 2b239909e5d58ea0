// The transformation rules of searchsorted and median
// (primitives/search.hpp): batching, and the median's JVP. Written with ops.
#include <memory>
#include <source_location>

#include "primitives/search.hpp"
#include "tessera/ops.hpp"
#include "transforms/rules/rules.hpp"

namespace tessera::detail {

// Elementwise in the values: a batch of values is searched as it lies. A
// sequence per example falls back to one search per example.
std::vector<Array> Searchsorted::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                                       std::vector<int>& ob) const {
  if (bd[0] >= 0) return Primitive::batch(in, bd, size, ob);
  ob = {bd[1]};
  return {bind1(shared_from_this(), in)};
}

// Each example's selections are the batch-first operand's selections
// with the batch dim kept.
std::vector<Array> MedianMiddle::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                                       std::vector<int>& ob) const {
  std::vector<Array> args{batch_first(in[0], bd[0], size)};
  if (masked_) args.push_back(batch_first(in[1], bd[1], size));
  std::vector<int> axes;
  for (int a : axes_) axes.push_back(a + 1);
  ob = {0, 0};
  return detail::bind(std::make_shared<MedianMiddle>(axes, keepdims_, masked_), args);
}

// Each middle element moves with the elements equal to it (ties share
// the derivative equally, as for max and min).
std::vector<Array> MedianMiddle::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                     std::vector<Array>& to) const {
  auto out = detail::bind(shared_from_this(), p);
  to.assign(2, Array());
  if (!t[0].valid()) return out;
  const std::source_location here{};
  const Array& x = p[0];
  const Array tx = t[0].dtype() == x.dtype() ? t[0] : astype(t[0], x.dtype(), here);
  for (int r = 0; r < 2; ++r) {
    Array sel = equal(x, keepdims_ ? out[r] : expanded(out[r]), {}, here);
    if (masked_) sel = logical_and(sel, p[1], {}, here);
    const Array num = sum(where(sel, tx, 0.0, here), axes_, {keepdims_}, here);
    const Array den = sum(astype(sel, x.dtype(), here), axes_, {keepdims_}, here);
    to[r] = divide(num, den, {}, here);
  }
  return out;
}

Array MedianMiddle::expanded(const Array& y) const {
  Shape s = y.shape();
  for (int a : axes_) s.insert(s.begin() + a, 1);
  return reshape(y, s, {}, {});
}

}  // namespace tessera::detail
