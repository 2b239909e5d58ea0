// Devices, meshes, partition specs and named shardings (jax.sharding).
#include <nanobind/operators.h>

#include "common.hpp"

namespace tessera_py {
namespace {

using namespace nb::literals;

// One PartitionSpec entry from Python: None, "x", or a tuple/list of names.
ts::PartitionSpec::Entry to_entry(nb::handle h) {
  if (h.is_none()) return ts::none;
  if (nb::isinstance<nb::str>(h)) return ts::PartitionSpec::Entry(nb::cast<std::string>(h));
  if (nb::isinstance<nb::tuple>(h) || nb::isinstance<nb::list>(h)) {
    std::vector<std::string> axes;
    for (nb::handle a : h) {
      if (!nb::isinstance<nb::str>(a))
        throw nb::type_error(("PartitionSpec: a tuple entry holds mesh axis names (str), got " +
                              nb::cast<std::string>(nb::str(a.type()))).c_str());
      axes.push_back(nb::cast<std::string>(a));
    }
    return ts::PartitionSpec::Entry(std::move(axes));
  }
  throw nb::type_error(("PartitionSpec: an entry is None, a mesh axis name or a tuple of names, got " +
                        nb::cast<std::string>(nb::repr(h)))
                           .c_str());
}

nb::object entry_to_py(const ts::PartitionSpec::Entry& e, bool grouped) {
  if (e.is_none()) return nb::none();
  if (e.axes().size() == 1 && !grouped) return nb::str(e.axes()[0].c_str());
  nb::list l;
  for (const auto& a : e.axes()) l.append(nb::str(a.c_str()));
  return nb::tuple(l);
}

std::vector<std::string> to_names(nb::handle h) {
  if (nb::isinstance<nb::str>(h)) return {nb::cast<std::string>(h)};
  return nb::cast<std::vector<std::string>>(h);
}

std::vector<ts::AxisType> to_axis_types(nb::handle h, std::size_t n) {
  if (h.is_none()) return {};
  if (nb::isinstance<ts::AxisType>(h)) return std::vector<ts::AxisType>(n, nb::cast<ts::AxisType>(h));
  return nb::cast<std::vector<ts::AxisType>>(h);
}

nb::object mesh_devices_array(const ts::Mesh& mesh) {
  nb::module_ np = nb::module_::import_("numpy");
  nb::list flat;
  for (const auto& d : mesh.devices()) flat.append(nb::cast(d));
  nb::object arr = np.attr("empty")(nb::int_(mesh.size()), "dtype"_a = np.attr("object_"));
  for (int i = 0; i < mesh.size(); ++i) arr[nb::int_(i)] = flat[i];
  return arr.attr("reshape")(nb::cast(mesh.shape()));
}

nb::tuple slices_to_py(const std::vector<ts::Slice>& index) {
  nb::list l;
  for (const auto& s : index) l.append(nb::slice(nb::int_(s.start), nb::int_(s.stop), nb::none()));
  return nb::tuple(l);
}

}  // namespace

nb::tuple index_to_py(const std::vector<ts::Slice>& index) { return slices_to_py(index); }

void init_sharding(nb::module_& m) {
  using namespace nb::literals;

  nb::class_<ts::Device>(m, "Device", "A device: where a shard lives and per-device code runs.")
      .def_prop_ro("id", &ts::Device::id)
      // JAX's names: "cpu", and "gpu" for a CUDA device.
      .def_prop_ro("platform", [](const ts::Device& d) { return d.kind() == "cuda" ? "gpu" : "cpu"; })
      .def_prop_ro("device_kind", &ts::Device::kind)
      .def_prop_ro("process_index", &ts::Device::process_index)
      .def("__repr__", &ts::Device::str)
      .def("__eq__", [](const ts::Device& a, nb::handle b) {
        return nb::isinstance<ts::Device>(b) && a == nb::cast<ts::Device>(b);
      })
      .def("__hash__", [](const ts::Device& d) { return std::hash<ts::Device>()(d); });

  m.def("devices", [](std::optional<std::string> backend) {
    // The C++ library says why a platform has no devices ("cuda": no driver,
    // no GPU, a build without CUDA, or a process already on the CPU devices).
    return backend ? ts::devices(*backend) : ts::devices();
  }, "backend"_a = nb::none(), "All devices of every process, ordered by id; of one platform with backend=.");
  m.def("local_devices", [] { return ts::local_devices(); }, "This process's devices, ordered by id.");
  m.def("device_count", &ts::device_count);
  m.def("local_device_count", &ts::local_device_count);
  m.def("process_index", &ts::process_index);
  m.def("process_count", &ts::process_count);

  nb::module_ config = m.def_submodule("config", "Runtime configuration.");
  config.def("set_num_cpu_devices", &ts::config::set_num_cpu_devices, "n"_a,
             "Sets the number of virtual CPU devices; only before the runtime starts (the first call that needs "
             "devices). TESSERA_NUM_CPU_DEVICES in the environment does the same.");
  config.def("set_collective_timeout", &ts::config::set_collective_timeout, "seconds"_a);
  config.def("collective_timeout", &ts::config::collective_timeout);

  nb::enum_<ts::AxisType>(m, "AxisType", "How ops treat a mesh axis.")
      .value("Auto", ts::AxisType::Auto)
      .value("Explicit", ts::AxisType::Explicit)
      .value("Manual", ts::AxisType::Manual);

  nb::class_<ts::Mesh>(m, "Mesh", "An n-d grid of devices with named axes.")
      .def("__init__", [](ts::Mesh* self, nb::handle devices, nb::handle axis_names, nb::handle axis_types) {
        nb::module_ np = nb::module_::import_("numpy");
        nb::object arr = np.attr("asarray")(devices, "dtype"_a = np.attr("object_"));
        std::vector<int> shape = nb::cast<std::vector<int>>(arr.attr("shape"));
        std::vector<ts::Device> flat;
        for (nb::handle d : arr.attr("ravel")()) {
          if (!nb::isinstance<ts::Device>(d))
            throw nb::type_error(("Mesh: devices holds tessera Devices, got " +
                                  nb::cast<std::string>(nb::repr(d))).c_str());
          flat.push_back(nb::cast<ts::Device>(d));
        }
        auto names = to_names(axis_names);
        new (self) ts::Mesh(std::move(flat), std::move(shape), names, to_axis_types(axis_types, names.size()));
      }, "devices"_a, "axis_names"_a, "axis_types"_a = nb::none(),
      "A mesh over `devices` (an array whose shape is the mesh's) with one name per axis.")
      .def_prop_ro("devices", &mesh_devices_array, "The devices as a NumPy object array of the mesh's shape.")
      .def_prop_ro("axis_names", [](const ts::Mesh& mesh) {
        nb::list l;
        for (const auto& n : mesh.axis_names()) l.append(nb::str(n.c_str()));
        return nb::tuple(l);
      })
      .def_prop_ro("axis_sizes", [](const ts::Mesh& mesh) { return nb::tuple(nb::cast(mesh.shape())); })
      .def_prop_ro("axis_types", [](const ts::Mesh& mesh) { return nb::tuple(nb::cast(mesh.axis_types())); })
      .def_prop_ro("shape", [](const ts::Mesh& mesh) {
        nb::dict d;  // insertion-ordered, as JAX's OrderedDict
        for (int i = 0; i < mesh.ndim(); ++i) d[mesh.axis_names()[i].c_str()] = mesh.shape()[i];
        return d;
      }, "Axis name -> size, in axis order.")
      .def_prop_ro("size", &ts::Mesh::size)
      .def_prop_ro("ndim", &ts::Mesh::ndim)
      .def("__repr__", &ts::Mesh::str)
      .def("__eq__", [](const ts::Mesh& a, nb::handle b) {
        return nb::isinstance<ts::Mesh>(b) && a == nb::cast<ts::Mesh>(b);
      })
      .def("__hash__", &ts::Mesh::hash);

  m.def("make_mesh", [](const std::vector<int>& axis_shapes, nb::handle axis_names, nb::handle devices,
                        nb::handle axis_types) {
    auto names = to_names(axis_names);
    std::vector<ts::Device> devs;
    if (!devices.is_none()) devs = nb::cast<std::vector<ts::Device>>(devices);
    return ts::make_mesh(axis_shapes, names, to_axis_types(axis_types, names.size()), devs);
  }, "axis_shapes"_a, "axis_names"_a, nb::kw_only(), "devices"_a = nb::none(), "axis_types"_a = nb::none(),
  "A mesh of the given shape over all devices (or over `devices`), row-major.");

  nb::class_<ts::PartitionSpec>(m, "PartitionSpec",
                                "How each array dimension maps onto mesh axes: P('x', None), P(('x', 'y')).")
      .def("__init__", [](ts::PartitionSpec* self, nb::args entries, nb::handle unreduced) {
        std::vector<ts::PartitionSpec::Entry> es;
        for (nb::handle h : entries) es.push_back(to_entry(h));
        std::vector<std::string> un;
        if (!unreduced.is_none()) un = to_names(unreduced);
        new (self) ts::PartitionSpec(std::move(es), std::move(un));
      }, "entries"_a, nb::kw_only(), "unreduced"_a = nb::none())
      .def("__len__", &ts::PartitionSpec::size)
      .def("__getitem__", [](const ts::PartitionSpec& p, int i) {
        const int n = p.size();
        if (i < 0) i += n;
        if (i < 0 || i >= n) throw nb::index_error("PartitionSpec index out of range");
        // A grouped entry prints as a tuple; str() tells which form it has.
        const auto& e = p.entries()[i];
        return entry_to_py(e, !e.is_none() && e.str().front() == '(');
      })
      .def("__iter__", [](nb::handle self) {
        nb::list l;
        const auto& p = nb::cast<const ts::PartitionSpec&>(self);
        for (int i = 0; i < p.size(); ++i) l.append(self[nb::int_(i)]);
        return nb::iter(l);
      })
      .def_prop_ro("unreduced", [](const ts::PartitionSpec& p) { return nb::tuple(nb::cast(p.unreduced())); })
      .def("__repr__", &ts::PartitionSpec::str)
      .def("__eq__", [](const ts::PartitionSpec& a, nb::handle b) {
        return nb::isinstance<ts::PartitionSpec>(b) && a == nb::cast<ts::PartitionSpec>(b);
      })
      .def("__hash__", &ts::PartitionSpec::hash);

  nb::class_<ts::NamedSharding>(m, "NamedSharding", "A mesh plus a partition spec.")
      .def(nb::init<ts::Mesh, ts::PartitionSpec>(), "mesh"_a, "spec"_a)
      .def_prop_ro("mesh", &ts::NamedSharding::mesh)
      .def_prop_ro("spec", &ts::NamedSharding::spec)
      .def_prop_ro("is_fully_replicated", &ts::NamedSharding::is_fully_replicated)
      .def_prop_ro("num_devices", [](const ts::NamedSharding& s) { return s.mesh().size(); })
      .def_prop_ro("device_set", [](const ts::NamedSharding& s) {
        nb::set out;
        for (const auto& d : s.mesh().devices()) out.add(nb::cast(d));
        return out;
      })
      .def("shard_shape", [](const ts::NamedSharding& s, nb::handle global_shape) {
        return nb::tuple(nb::cast(s.shard_shape(to_shape(global_shape), 0)));
      }, "global_shape"_a, "The shape of the first device's shard (the largest: uneven blocks differ by one).")
      .def("devices_indices_map", [](const ts::NamedSharding& s, nb::handle global_shape) {
        const ts::Shape shape = to_shape(global_shape);
        nb::dict out;
        for (int pos = 0; pos < s.mesh().size(); ++pos)
          out[nb::cast(s.mesh().devices()[pos])] = slices_to_py(s.shard_index(shape, pos));
        return out;
      }, "global_shape"_a, "Device -> the global index slices it holds.")
      .def("__repr__", &ts::NamedSharding::str)
      .def("__eq__", [](const ts::NamedSharding& a, nb::handle b) {
        return nb::isinstance<ts::NamedSharding>(b) && a == nb::cast<ts::NamedSharding>(b);
      })
      .def("__hash__", &ts::NamedSharding::hash);
}

}  // namespace tessera_py
