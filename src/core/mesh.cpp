#include "tessera/mesh.hpp"

#include <set>

#include "tessera/error.hpp"

namespace tessera {

struct Mesh::Impl {
  std::vector<Device> devices;
  std::vector<int> shape;
  std::vector<std::string> names;
  std::vector<AxisType> types;
  std::vector<int> position_of;  // device id -> position, -1 if absent
};

namespace {
std::string join_ints(const std::vector<int>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() == 1) s += ",";
  return s + ")";
}
}  // namespace

std::string axis_type_name(AxisType t) {
  switch (t) {
    case AxisType::Auto: return "Auto";
    case AxisType::Explicit: return "Explicit";
    case AxisType::Manual: return "Manual";
  }
  return "?";
}

Mesh::Mesh(std::vector<Device> devices, std::vector<int> shape, std::vector<std::string> axis_names,
           std::vector<AxisType> axis_types) {
  if (shape.size() != axis_names.size())
    throw ShardingError("[Mesh] expected one name per axis: shape " + join_ints(shape) + " has " +
                        std::to_string(shape.size()) + " axes but " + std::to_string(axis_names.size()) +
                        " names were given");
  if (axis_types.empty()) axis_types.assign(shape.size(), AxisType::Auto);
  if (axis_types.size() != shape.size())
    throw ShardingError("[Mesh] expected one axis type per axis: shape " + join_ints(shape) + " has " +
                        std::to_string(shape.size()) + " axes but " + std::to_string(axis_types.size()) +
                        " axis types were given");
  std::set<std::string> seen;
  for (const auto& n : axis_names) {
    if (n.empty()) throw ShardingError("[Mesh] axis names must be non-empty");
    if (!seen.insert(n).second) throw ShardingError("[Mesh] axis name '" + n + "' is used twice");
  }
  long long prod = 1;
  for (int s : shape) {
    if (s < 1) throw ShardingError("[Mesh] axis sizes must be >= 1, got shape " + join_ints(shape));
    prod *= s;
  }
  if (prod != static_cast<long long>(devices.size()))
    throw ShardingError("[Mesh] the product of the mesh shape " + join_ints(shape) + " is " + std::to_string(prod) +
                        " but " + std::to_string(devices.size()) + " devices were given");
  int max_id = 0;
  for (const auto& d : devices) {
    if (d.id() < 0 || d.id() >= device_count())
      throw ShardingError("[Mesh] no device with id " + std::to_string(d.id()) + " (there are " +
                          std::to_string(device_count()) + ")");
    max_id = std::max(max_id, d.id());
  }
  auto impl = std::make_shared<Impl>();
  impl->position_of.assign(max_id + 1, -1);
  for (size_t i = 0; i < devices.size(); ++i) {
    int& p = impl->position_of[devices[i].id()];
    if (p != -1) throw ShardingError("[Mesh] device " + std::to_string(devices[i].id()) + " appears twice");
    p = static_cast<int>(i);
  }
  impl->devices = std::move(devices);
  impl->shape = std::move(shape);
  impl->names = std::move(axis_names);
  impl->types = std::move(axis_types);
  impl_ = std::move(impl);
}

const std::vector<Device>& Mesh::devices() const { return impl_->devices; }
const std::vector<int>& Mesh::shape() const { return impl_->shape; }
const std::vector<std::string>& Mesh::axis_names() const { return impl_->names; }
const std::vector<AxisType>& Mesh::axis_types() const { return impl_->types; }
int Mesh::size() const { return static_cast<int>(impl_->devices.size()); }
int Mesh::ndim() const { return static_cast<int>(impl_->shape.size()); }

int Mesh::axis_index(const std::string& name) const {
  for (size_t i = 0; i < impl_->names.size(); ++i)
    if (impl_->names[i] == name) return static_cast<int>(i);
  return -1;
}

int Mesh::axis_size(const std::string& name) const {
  int i = axis_index(name);
  if (i < 0) throw ShardingError("[Mesh] no axis named '" + name + "' in " + str());
  return impl_->shape[i];
}

int Mesh::device_position(const Device& d) const {
  if (d.id() < 0 || d.id() >= static_cast<int>(impl_->position_of.size())) return -1;
  return impl_->position_of[d.id()];
}

std::vector<int> Mesh::coords(int pos) const {
  std::vector<int> c(impl_->shape.size());
  for (int i = static_cast<int>(c.size()) - 1; i >= 0; --i) {
    c[i] = pos % impl_->shape[i];
    pos /= impl_->shape[i];
  }
  return c;
}

std::string Mesh::str() const {
  std::string s = "Mesh(";
  bool all_auto = true;
  for (size_t i = 0; i < impl_->names.size(); ++i) {
    s += (i ? ", '" : "'") + impl_->names[i] + "': " + std::to_string(impl_->shape[i]);
    all_auto = all_auto && impl_->types[i] == AxisType::Auto;
  }
  if (!all_auto) {
    s += ", axis_types=(";
    for (size_t i = 0; i < impl_->types.size(); ++i) s += (i ? ", " : "") + axis_type_name(impl_->types[i]);
    s += impl_->types.size() == 1 ? ",)" : ")";
  }
  return s + ")";
}

bool Mesh::operator==(const Mesh& o) const {
  if (impl_ == o.impl_) return true;
  return impl_->devices == o.impl_->devices && impl_->shape == o.impl_->shape && impl_->names == o.impl_->names &&
         impl_->types == o.impl_->types;
}

std::size_t Mesh::hash() const {
  std::size_t h = 0;
  auto mix = [&h](std::size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (const auto& d : impl_->devices) mix(std::hash<int>()(d.id()));
  for (int s : impl_->shape) mix(std::hash<int>()(s));
  for (const auto& n : impl_->names) mix(std::hash<std::string>()(n));
  for (auto t : impl_->types) mix(static_cast<std::size_t>(t));
  return h;
}

Mesh make_mesh(const std::vector<int>& shape, const std::vector<std::string>& axis_names,
               const std::vector<AxisType>& axis_types, const std::vector<Device>& devs) {
  std::vector<Device> use = devs.empty() ? devices() : devs;
  long long prod = 1;
  for (int s : shape) prod *= s;
  if (prod != static_cast<long long>(use.size()))
    throw ShardingError("[make_mesh] the product of the mesh shape is " + std::to_string(prod) + " but there are " +
                        std::to_string(use.size()) + " devices; pass devices= to use a subset");
  return Mesh(std::move(use), shape, axis_names, axis_types);
}

}  // namespace tessera
