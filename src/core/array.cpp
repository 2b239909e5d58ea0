// Array accessors, placement from the host, gathering to the host.
#include <algorithm>
#include <cstring>
#include <iostream>

#include "core/array_impl.hpp"
#include "core/checked.hpp"

namespace tessera {
namespace detail {
std::string type_text(const Shape& shape, DType dtype, const NamedSharding& sharding);
}


using detail::ArrayImpl;
using detail::Buffer;

Array::Array(std::shared_ptr<const detail::ArrayImpl> impl) : impl_(std::move(impl)) {}

const std::shared_ptr<const detail::ArrayImpl>& Array::impl() const { return impl_; }

const ArrayImpl& Array::concrete(const char* op) const {
  const ArrayImpl& a = checked(op);
  if (a.trace)
    throw Error(std::string("[") + op + "] cannot read " + detail::typeof_varying(*this, {}) +
                ": it is a value traced by " + a.traced_by +
                " (its contents exist only when the transformed function runs); return it from the " + a.traced_by +
                "-transformed function instead");
  return a;
}

const ArrayImpl& Array::checked(const char* op) const {
  if (!impl_) throw Error(std::string("[") + op + "] the array is empty (default-constructed)");
  return *impl_;
}

const Shape& Array::shape() const { return checked("shape").shape; }
DType Array::dtype() const { return checked("dtype").dtype; }
int Array::ndim() const { return static_cast<int>(checked("ndim").shape.size()); }
std::int64_t Array::size() const { return detail::num_elements(checked("size").shape); }
std::int64_t Array::nbytes() const { return size() * static_cast<std::int64_t>(itemsize(dtype())); }
const NamedSharding& Array::sharding() const { return checked("sharding").sharding; }

const Array& Array::block_until_ready() const {
  // Ops complete before they return (eager execution waits on the workers);
  // this stays the synchronisation point for when dispatch becomes async.
  checked("block_until_ready");
  return *this;
}

std::vector<Shard> Array::addressable_shards() const {
  const ArrayImpl& a = concrete("addressable_shards");
  const Mesh& mesh = a.sharding.mesh();
  std::vector<Shard> out;
  out.reserve(mesh.size());
  // replica_id counts earlier devices holding the same block.
  std::vector<std::vector<Slice>> seen;
  std::vector<int> seen_count;
  for (int pos = 0; pos < mesh.size(); ++pos) {
    Shard sh;
    sh.device = mesh.devices()[pos];
    sh.index = a.sharding.shard_index(a.shape, pos);
    auto it = std::find(seen.begin(), seen.end(), sh.index);
    if (it == seen.end()) {
      seen.push_back(sh.index);
      seen_count.push_back(1);
    } else {
      sh.replica_id = seen_count[it - seen.begin()]++;
    }
    // Another process's device: its data lives there.
    if (!detail::Runtime::get().is_local(sh.device.id())) continue;
    Mesh single(std::vector<Device>{sh.device}, {1}, {mesh.axis_names().empty() ? "d" : mesh.axis_names()[0]});
    auto impl = std::make_shared<ArrayImpl>(detail::box_shape(sh.index), a.dtype, NamedSharding(single, P()));
    impl->buffers.push_back(a.buffers[pos]);
    sh.data = Array(std::move(impl));
    out.push_back(std::move(sh));
  }
  return out;
}

void Array::copy_to_host(void* out, DType as, const char* op) const {
  const ArrayImpl& a = concrete(op);
  const std::vector<Slice> whole = detail::whole_box(a.shape);
  const std::size_t isz = itemsize(a.dtype);
  // Gather straight into `out` when no conversion is needed, otherwise into a
  // staging copy converted at the end. Each distinct block is read once.
  std::vector<unsigned char> staging;
  void* dst = out;
  if (as != a.dtype) {
    staging.resize(static_cast<std::size_t>(detail::num_elements(a.shape)) * isz);
    dst = staging.data();
  }
  // Each distinct block from a device of this process that holds it.
  std::vector<std::vector<Slice>> done, missing;
  const detail::Runtime& rt = detail::Runtime::get();
  const Mesh& mesh = a.sharding.mesh();
  for (int pos = 0; pos < mesh.size(); ++pos) {
    auto idx = a.sharding.shard_index(a.shape, pos);
    if (detail::box_empty(idx)) continue;
    if (std::find(done.begin(), done.end(), idx) != done.end()) continue;
    if (!rt.is_local(mesh.devices()[pos].id())) {
      if (std::find(missing.begin(), missing.end(), idx) == missing.end()) missing.push_back(idx);
      continue;
    }
    done.push_back(idx);
    // A GPU's block comes straight into place when it is one run of `dst`.
    detail::read_box(a.buffers[pos], idx, dst, whole, idx, isz, op);
  }
  for (const auto& idx : missing)
    if (std::find(done.begin(), done.end(), idx) == done.end())
      throw Error(std::string("[") + op + "] " + detail::type_text(a.shape, a.dtype, a.sharding) +
                  " is not fully addressable: process " + std::to_string(rt.process_index()) +
                  " holds only the blocks of its own devices (of " + mesh.str() +
                  "); gather it with process_allgather, or read addressable_shards()");
  if (as != a.dtype) detail::convert_checked(dst, a.dtype, out, as, detail::num_elements(a.shape), op);
}

namespace detail {

Array make_array(const Shape& shape, DType dtype, const NamedSharding& sharding,
                 const std::function<void(int, Buffer&)>& fill) {
  return make_array_on(shape, dtype, sharding, fill,
                       [&](const std::function<void(int)>& fn) { run_on_devices(sharding.mesh().devices(), fn); });
}

Array make_array_on(const Shape& shape, DType dtype, const NamedSharding& sharding,
                    const std::function<void(int, Buffer&)>& fill,
                    const std::function<void(const std::function<void(int)>&)>& each) {
  auto impl = std::make_shared<ArrayImpl>(shape, dtype, sharding);
  const Mesh& mesh = sharding.mesh();
  impl->buffers.resize(mesh.size());
  each([&](int pos) {
    auto n = num_elements(sharding.shard_shape(shape, pos));
    Buffer b(mesh.devices()[pos].id(), static_cast<std::size_t>(n) * itemsize(dtype));
    fill(pos, b);
    impl->buffers[pos] = std::move(b);
  });
  return Array(std::move(impl));
}

void check_shape(const Shape& shape, const char* op) { checked_numel(shape, op); }

Array make_array_from_blocks(const Shape& shape, DType dtype, const NamedSharding& sharding,
                             const std::function<void(const std::vector<Slice>&, void*)>& fill) {
  checked_nbytes(shape, dtype, "make_array_from_callback");
  sharding.check_rank(static_cast<int>(shape.size()), "make_array_from_callback");
  // The callback runs on the calling thread, once per distinct block; the
  // device workers then copy their block into their own memory.
  const Mesh& mesh = sharding.mesh();
  const std::size_t isz = itemsize(dtype);
  std::vector<std::vector<Slice>> blocks;
  std::vector<std::vector<unsigned char>> data;
  std::vector<int> block_of(mesh.size());
  for (int pos = 0; pos < mesh.size(); ++pos) {
    auto idx = sharding.shard_index(shape, pos);
    auto it = std::find(blocks.begin(), blocks.end(), idx);
    if (it == blocks.end()) {
      blocks.push_back(idx);
      data.emplace_back(static_cast<std::size_t>(num_elements(box_shape(idx))) * isz);
      if (!data.back().empty()) fill(idx, data.back().data());
      block_of[pos] = static_cast<int>(blocks.size()) - 1;
    } else {
      block_of[pos] = static_cast<int>(it - blocks.begin());
    }
  }
  return make_array(shape, dtype, sharding, [&](int pos, Buffer& b) {
    write_buffer(b, data[block_of[pos]].data(), b.nbytes(), "make_array_from_callback");
  });
}

}  // namespace detail

Array device_put_raw(const void* data, DType dtype, const Shape& shape, const NamedSharding& sharding) {
  detail::checked_nbytes(shape, dtype, "device_put");
  sharding.check_rank(static_cast<int>(shape.size()), "device_put");
  const std::vector<Slice> whole = detail::whole_box(shape);
  const std::size_t isz = itemsize(dtype);
  // Each worker copies its block straight from the host buffer.
  return detail::make_array(shape, dtype, sharding, [&](int pos, Buffer& b) {
    if (b.nbytes() == 0) return;
    auto idx = sharding.shard_index(shape, pos);
    // Kernels read bool elements as C++ bool, where a byte other than 0 or 1
    // is undefined: raw host bytes are normalised on the way (on the host).
    if (dtype == DType::bool_) {
      const detail::Buffer staging = b.on_host() ? b : detail::Buffer::host_staging(b.device_id(), b.nbytes());
      auto* p = static_cast<unsigned char*>(staging.data());
      detail::copy_box(data, whole, p, idx, idx, isz);
      for (std::size_t i = 0; i < b.nbytes(); ++i) p[i] = p[i] != 0;
      if (!b.on_host()) detail::write_buffer(b, p, b.nbytes(), "device_put");
      return;
    }
    // A GPU's block goes straight from `data` when it is one run of it.
    detail::write_box(data, whole, b, idx, idx, isz, "device_put");
  });
}

Array device_put(const std::vector<bool>& data, const Shape& shape, const NamedSharding& sharding) {
  const std::int64_t n = detail::checked_numel(shape, "device_put");
  if (static_cast<std::int64_t>(data.size()) != n)
    throw ShapeError("[device_put] host data has " + std::to_string(data.size()) + " elements but shape " +
                     shape_str(shape) + " needs " + std::to_string(n));
  std::vector<std::uint8_t> bytes(data.begin(), data.end());
  return device_put_raw(bytes.data(), DType::bool_, shape, sharding);
}

namespace detail {
std::string type_text(const Shape& shape, DType dtype, const NamedSharding& sharding) {
  const auto& spec = sharding.spec();
  std::string s = dtype_name(dtype) + "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d) s += ",";
    s += std::to_string(shape[d]);
    const auto& axes = spec[static_cast<int>(d)].axes();
    if (axes.size() == 1) {
      s += "@" + axes[0];
    } else if (axes.size() > 1) {
      s += "@(";
      for (size_t i = 0; i < axes.size(); ++i) s += (i ? "," : "") + axes[i];
      s += ")";
    }
  }
  return s + "]";
}
}  // namespace detail

std::string detail::typeof_varying(const Array& array, const std::vector<std::string>& vma) {
  std::string s = type_text(array.shape(), array.dtype(), array.sharding());
  if (!vma.empty()) {
    s += "{V:";
    for (size_t i = 0; i < vma.size(); ++i) s += (i ? "," : "") + vma[i];
    s += "}";
  }
  return s;
}

}  // namespace tessera
