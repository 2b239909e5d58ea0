// Global-view arrays and their placement.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/dtype.hpp"
#include "tessera/error.hpp"
#include "tessera/sharding.hpp"

namespace tessera {

namespace detail {
struct ArrayImpl;
/// Number of elements of `shape`. ShapeError "[op] ..." when a dim is
/// negative or the product of the nonzero dims does not fit int64 (as NumPy,
/// so (2^40, 2^40, 0) is rejected too); it never wraps around.
std::int64_t checked_numel(const Shape& shape, const char* op);
}

struct Shard;

/// A global-view array: shape, dtype, sharding, and one buffer per device of
/// the sharding's mesh (replicated blocks are copied to each holder).
/// Immutable from the user's side; copies share the buffers.
class Array {
 public:
  /// An empty placeholder; most calls on it raise Error.
  Array() = default;

  const Shape& shape() const;
  DType dtype() const;
  int ndim() const;
  /// Number of elements.
  std::int64_t size() const;
  /// Number of bytes of the global array (size() * itemsize(dtype())).
  std::int64_t nbytes() const;
  const NamedSharding& sharding() const;
  /// False for a default-constructed Array.
  bool valid() const { return impl_ != nullptr; }

  /// One entry per device of the mesh, in mesh order: the device, the global
  /// index slices it holds, and its data as a single-device Array.
  std::vector<Shard> addressable_shards() const;

  /// The global array gathered to the host, row-major, converted to T.
  /// DTypeError when a value does not fit T (NaN or inf to an integer, out of
  /// range, negative to unsigned, finite to inf); fractions truncate.
  template <class T>
  std::vector<T> to_vector() const;
  /// The single element of a size-1 array, converted to T as to_vector does;
  /// ShapeError otherwise.
  template <class T>
  T item() const;
  /// Waits until every shard is computed. Returns *this.
  const Array& block_until_ready() const;

  /// Internal: copies the gathered array into `out` as dtype `as`; a value
  /// that does not fit `as` raises DTypeError naming `op`.
  void copy_to_host(void* out, DType as, const char* op = "to_vector") const;
  /// Internal: wraps a finished implementation.
  explicit Array(std::shared_ptr<const detail::ArrayImpl> impl);
  /// Internal: the implementation whose buffers ops read.
  const std::shared_ptr<const detail::ArrayImpl>& impl() const;
  /// Internal: the implementation, checked to exist.
  const detail::ArrayImpl& peek() const { return checked("peek"); }

 private:
  const detail::ArrayImpl& checked(const char* op) const;
  // checked(), and an Error for a value traced by jit (no data to read).
  const detail::ArrayImpl& concrete(const char* op) const;
  std::shared_ptr<const detail::ArrayImpl> impl_;
};

/// One device's piece of an Array.
struct Shard {
  Device device;
  /// Global index range held, one Slice per dimension.
  std::vector<Slice> index;
  /// Which copy this is among the devices holding the same block (0 = first).
  int replica_id = 0;
  /// The local block as an Array on that single device.
  Array data;
};

template <class T>
std::vector<T> Array::to_vector() const {
  (void)checked("to_vector");  // an empty array's error names the call the user made
  if constexpr (std::is_same_v<T, bool>) {
    // std::vector<bool> packs bits: gather into bytes (0 or 1) first.
    std::vector<unsigned char> tmp(static_cast<std::size_t>(size()));
    copy_to_host(tmp.data(), DType::bool_);
    return std::vector<bool>(tmp.begin(), tmp.end());
  } else {
    std::vector<T> out(static_cast<std::size_t>(size()));
    copy_to_host(out.data(), dtype_of<T>());
    return out;
  }
}

template <class T>
T Array::item() const {
  if (size() != 1) throw ShapeError("[item] expected an array with one element, got shape " + shape_str(shape()));
  if constexpr (std::is_same_v<T, bool>) {
    unsigned char v = 0;
    copy_to_host(&v, DType::bool_, "item");
    return v != 0;
  } else {
    T v{};
    copy_to_host(&v, dtype_of<T>(), "item");
    return v;
  }
}

/// Places host data (row-major, `shape`) onto devices per `sharding`. The
/// element type comes from `dtype` (raw form) or T (typed forms).
Array device_put_raw(const void* data, DType dtype, const Shape& shape, const NamedSharding& sharding);

template <class T>
Array device_put(std::span<const T> data, const Shape& shape, const NamedSharding& sharding) {
  const std::int64_t n = detail::checked_numel(shape, "device_put");
  if (static_cast<std::int64_t>(data.size()) != n)
    throw ShapeError("[device_put] host data has " + std::to_string(data.size()) + " elements but shape " +
                     shape_str(shape) + " needs " + std::to_string(n));
  return device_put_raw(data.data(), dtype_of<T>(), shape, sharding);
}
template <class T>
Array device_put(const std::vector<T>& data, const Shape& shape, const NamedSharding& sharding) {
  return device_put(std::span<const T>(data.data(), data.size()), shape, sharding);
}
Array device_put(const std::vector<bool>& data, const Shape& shape, const NamedSharding& sharding);
/// Redistributes `array` to `sharding`. Same mesh: reshard(). Another mesh:
/// moved through the host.
Array device_put(const Array& array, const NamedSharding& sharding);

/// Builds an array block by block: `callback(index)` returns the row-major
/// data (as std::vector<T>) for the global index slices `index`; it is called
/// once per distinct non-empty block, on the calling thread.
template <class F>
Array make_array_from_callback(const Shape& shape, DType dtype, const NamedSharding& sharding, F&& callback);

namespace detail {
/// Type-erased form: `fill(index, out)` writes the block for `index` into
/// `out` (row-major, dtype `dtype`).
Array make_array_from_blocks(const Shape& shape, DType dtype, const NamedSharding& sharding,
                             const std::function<void(const std::vector<Slice>&, void*)>& fill);
/// Converts n elements between dtypes with astype's semantics (see
/// docs/semantics.md: float to int saturates, NaN gives 0, int to int wraps).
void convert(const void* src, DType from, void* dst, DType to, std::int64_t n);
/// The same for values crossing between host and devices: DTypeError
/// "[op] value V at index I does not fit in T" where a value does not fit
/// (see Array::to_vector).
void convert_checked(const void* src, DType from, void* dst, DType to, std::int64_t n, const char* op);
}  // namespace detail

template <class F>
Array make_array_from_callback(const Shape& shape, DType dtype, const NamedSharding& sharding, F&& callback) {
  return detail::make_array_from_blocks(
      shape, dtype, sharding, [&](const std::vector<Slice>& index, void* out) {
        auto block = callback(index);
        using T = typename decltype(block)::value_type;
        Shape block_shape;
        for (const auto& s : index) block_shape.push_back(s.size());
        const std::int64_t n = detail::checked_numel(block_shape, "make_array_from_callback");
        if (static_cast<std::int64_t>(block.size()) != n)
          throw ShapeError("[make_array_from_callback] callback returned " + std::to_string(block.size()) +
                           " elements for a block of " + std::to_string(n));
        if constexpr (std::is_same_v<T, bool>) {
          std::vector<unsigned char> tmp(block.begin(), block.end());  // bytes 0 or 1
          detail::convert_checked(tmp.data(), DType::bool_, out, dtype, n, "make_array_from_callback");
        } else {
          detail::convert_checked(block.data(), dtype_of<T>(), out, dtype, n, "make_array_from_callback");
        }
      });
}

/// Moves `array` to `sharding` on the same mesh through the one
/// redistribution planner: each destination shard receives exactly the pieces
/// it lacks, from the devices that hold them; nothing passes through one place.
Array reshard(const Array& array, const NamedSharding& sharding);
/// Same, with a new spec on the array's own mesh.
Array reshard(const Array& array, const PartitionSpec& spec);

/// Type string: "f32[10@x,8@y]", "f32[8@(x,y),4]".
std::string typeof(const Array& array);

/// Prints the layout of a 1-d or 2-d array as a grid of blocks, each labelled
/// with the devices holding it ("CPU 0,4"), sized in proportion to the block.
/// Devices holding empty blocks are listed below the grid.
void visualize_sharding(const Array& array);
void visualize_sharding(const Array& array, std::ostream& os);
/// The same text for a shape and sharding, without data.
std::string visualize_sharding_str(const Shape& shape, const NamedSharding& sharding);

}  // namespace tessera
