// Meshes: n-d grids of devices with named axes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/device.hpp"

namespace tessera {

/// How ops treat a mesh axis (see docs/semantics.md).
/// Auto: shardings propagate automatically. Explicit: the sharding is part of
/// the type and ambiguity is an error. Manual: inside shard_map bodies.
enum class AxisType { Auto, Explicit, Manual };

/// "Auto", "Explicit" or "Manual".
std::string axis_type_name(AxisType t);

/// An n-d grid of devices with named axes. Devices are stored row-major: the
/// device at coordinates (c0, c1, ...) is devices()[c0 * s1 * s2... + c1 * ...].
/// Copies share the same immutable description.
class Mesh {
 public:
  /// A mesh over the given devices, `shape` row-major. Raises ShardingError
  /// when the product of `shape` differs from the number of devices, a device
  /// repeats, an axis size is < 1, or names are empty, repeated or of a
  /// different count than `shape`. `axis_types` defaults to all Auto.
  Mesh(std::vector<Device> devices, std::vector<int> shape, std::vector<std::string> axis_names,
       std::vector<AxisType> axis_types = {});

  const std::vector<Device>& devices() const;
  const std::vector<int>& shape() const;
  const std::vector<std::string>& axis_names() const;
  const std::vector<AxisType>& axis_types() const;
  /// Number of devices.
  int size() const;
  /// Number of axes.
  int ndim() const;
  /// Size of the named axis; ShardingError if there is no such axis.
  int axis_size(const std::string& name) const;
  /// Position of the named axis, or -1.
  int axis_index(const std::string& name) const;
  /// Position of `d` in devices(), or -1 if the mesh does not contain it.
  int device_position(const Device& d) const;
  /// Mesh coordinates of the device at position `pos` in devices().
  std::vector<int> coords(int pos) const;

  /// "Mesh('x': 2, 'y': 4)"; non-Auto axis types are listed after the sizes.
  std::string str() const;

  bool operator==(const Mesh& other) const;
  std::size_t hash() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

/// A mesh over all devices (ts::devices()), whose count must equal the
/// product of `shape` (ShardingError otherwise). Pass `devices` to use others.
Mesh make_mesh(const std::vector<int>& shape, const std::vector<std::string>& axis_names,
               const std::vector<AxisType>& axis_types = {}, const std::vector<Device>& devices = {});

}  // namespace tessera

template <>
struct std::hash<tessera::Mesh> {
  std::size_t operator()(const tessera::Mesh& m) const noexcept { return m.hash(); }
};
