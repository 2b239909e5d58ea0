// The transformation rules of reshape (primitives/reshape.hpp): batching,
// JVP and transpose, written with ops; and reshape_back, the transpose that
// expand_dims and squeeze share with it.
#include "transforms/rules/reshape.hpp"

#include "primitives/reshape.hpp"
#include "tessera/ops.hpp"
#include "transforms/rules/rules.hpp"

namespace tessera::detail {

Array reshape_back(const Array& ct, const AbstractArray& operand) {
  return ct.valid() ? reshape(ct, operand.shape, {.out_sharding = operand.sharding.spec()}, {}) : Array();
}

std::vector<Array> Reshape::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                                  std::vector<int>& ob) const {
  const Array x = move_dim(in[0], bd[0], 0);
  Shape out{size};
  out.insert(out.end(), out_.begin(), out_.end());
  std::optional<NamedSharding> req;
  if (requested_) {
    std::vector<PartitionSpec::Entry> e = requested_->spec().entries();
    const auto& xs = x.sharding().spec();
    e.insert(e.begin(), xs.size() > 0 ? xs[0] : PartitionSpec::Entry());
    req = NamedSharding(requested_->mesh(), PartitionSpec(std::move(e)));
  }
  ob = {0};
  return {bind1(std::make_shared<Reshape>(std::move(out), std::move(req)), {x})};
}

std::vector<Array> Reshape::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                std::vector<Array>& to) const {
  return linear_jvp(*this, p, t, to);
}

std::vector<Array> Reshape::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                      const std::vector<AbstractArray>& types, const std::vector<bool>&) const {
  return {reshape_back(ct[0], types[0])};
}

}  // namespace tessera::detail
