// tessera.Array: properties, NumPy conversion, JAX's repr, indexing,
// operators; tessera.device_put.
#include "common.hpp"

namespace tessera_py {
namespace {

using namespace nb::literals;
constexpr std::source_location kNoLoc{};

// A device argument: a NamedSharding, a Device (a one-device mesh), or None.
std::optional<ts::NamedSharding> to_sharding(nb::handle h, const char* op) {
  if (h.is_none()) return std::nullopt;
  if (nb::isinstance<ts::NamedSharding>(h)) return nb::cast<ts::NamedSharding>(h);
  if (nb::isinstance<ts::Device>(h))
    return ts::NamedSharding(ts::Mesh(std::vector<ts::Device>{nb::cast<ts::Device>(h)}, {1}, {"x"}), ts::P());
  throw nb::type_error((std::string(op) + ": expected a NamedSharding or a Device, got " +
                        nb::cast<std::string>(nb::repr(h)))
                           .c_str());
}

std::string array_repr(const ts::Array& a) {
  nb::object value;
  try {
    value = to_numpy(a);
  } catch (const ts::Error&) {
    // A value traced by jit or a transformation: no data to show.
    return "Traced<" + ts::typeof(a) + ">";
  }
  // As JAX prints arrays: np.array2string with the Array( prefix.
  nb::module_ np = nb::module_::import_("numpy");
  const std::string prefix = "Array(";
  const std::string dtype_str = std::string("dtype=") + numpy_name(a.dtype()) + ")";
  const int line_width = nb::cast<int>(np.attr("get_printoptions")()["linewidth"]);
  std::string s;
  if (a.size() == 0) {
    s = "[], shape=" + nb::cast<std::string>(nb::repr(nb::tuple(nb::cast(a.shape()))));
  } else {
    s = nb::cast<std::string>(np.attr("array2string")(value, "prefix"_a = prefix, "suffix"_a = ",",
                                                      "separator"_a = ", ", "max_line_width"_a = line_width));
  }
  const std::size_t nl = s.rfind('\n');
  const std::size_t last_line_len = nl == std::string::npos ? s.size() + 1 : s.size() - nl + 1;
  std::string sep = " ";
  if (last_line_len + dtype_str.size() + 1 > static_cast<std::size_t>(line_width)) sep = std::string(prefix.size(), ' ');
  return prefix + s + "," + sep + dtype_str;
}

// x[key]: ints, slices, Ellipsis and None; one integer array index
// (a gather along that dim, through take) when it is the only non-slice.
ts::Array getitem(const ts::Array& x, nb::handle key) {
  std::vector<nb::handle> items;
  nb::tuple keep;
  if (nb::isinstance<nb::tuple>(key)) {
    keep = nb::borrow<nb::tuple>(key);
    for (nb::handle h : keep) items.push_back(h);
  } else {
    items.push_back(key);
  }
  // Count the dims the key consumes to place an Ellipsis.
  int consumed = 0, ellipsis = 0;
  for (nb::handle h : items) {
    if (h.is(Py_Ellipsis)) ++ellipsis;
    else if (!h.is_none()) ++consumed;
  }
  if (ellipsis > 1) throw nb::index_error("an index can only have a single ellipsis ('...')");
  if (consumed > x.ndim())
    throw nb::index_error(("too many indices for array: array is " + std::to_string(x.ndim()) +
                           "-dimensional, but " + std::to_string(consumed) + " were indexed")
                              .c_str());
  std::vector<ts::SliceSpec> specs;
  std::vector<int> squeeze;  // result dims to drop (integer indices)
  std::vector<int> insert;   // result dims to add (None), in result numbering
  int array_dim = -1;        // dim indexed by an integer array
  ts::Array array_index;
  int dim = 0, out_dim = 0;
  for (nb::handle h : items) {
    if (h.is(Py_Ellipsis)) {
      for (int k = 0; k < x.ndim() - consumed; ++k, ++dim, ++out_dim) specs.push_back({});
    } else if (h.is_none()) {
      insert.push_back(out_dim++);
    } else if (PySlice_Check(h.ptr())) {
      ts::SliceSpec sp;
      nb::handle start = h.attr("start"), stop = h.attr("stop"), step = h.attr("step");
      if (!start.is_none()) sp.start = nb::cast<std::int64_t>(start.attr("__index__")());
      if (!stop.is_none()) sp.stop = nb::cast<std::int64_t>(stop.attr("__index__")());
      if (!step.is_none()) sp.step = nb::cast<std::int64_t>(step.attr("__index__")());
      specs.push_back(sp);
      ++dim, ++out_dim;
    } else if ((PyLong_Check(h.ptr()) && !PyBool_Check(h.ptr())) ||
               nb::isinstance(h, nb::module_::import_("numpy").attr("integer"))) {
      std::int64_t i = nb::cast<std::int64_t>(h.attr("__index__")());
      const std::int64_t n = x.shape()[dim];
      if (i < -n || i >= n)
        throw nb::index_error(("index " + std::to_string(i) + " is out of bounds for axis " + std::to_string(dim) +
                               " with size " + std::to_string(n))
                                  .c_str());
      if (i < 0) i += n;
      specs.push_back({i, i + 1, 1});
      squeeze.push_back(out_dim);
      ++dim, ++out_dim;
    } else if (nb::isinstance<ts::Array>(h) || nb::hasattr(h, "__array__") || nb::isinstance<nb::list>(h)) {
      if (array_dim >= 0) throw nb::index_error("only one integer array index is supported so far");
      array_index = to_array(h, &x, "getitem");
      if (array_index.ndim() != 1 || array_index.dtype() == ts::DType::bool_ ||
          array_index.dtype() == ts::DType::f32 || array_index.dtype() == ts::DType::f64)
        throw nb::index_error(("array indices must be 1-d integer arrays so far, got " + ts::typeof(array_index)).c_str());
      array_dim = dim;
      specs.push_back({});
      ++dim, ++out_dim;
    } else {
      throw nb::index_error(("only integers, slices (`:`), ellipsis (`...`), None and 1-d integer arrays are valid "
                             "indices, got " + nb::cast<std::string>(nb::repr(h)))
                                .c_str());
    }
  }
  ts::Array out = ts::slice(x, specs, kNoLoc);
  if (array_dim >= 0) out = ts::take(out, array_index, array_dim, kNoLoc);
  // Drop integer-indexed dims (renumbered to ignore the None dims, added after).
  if (!squeeze.empty()) {
    std::vector<int> drop;
    for (int d : squeeze) {
      int before = 0;
      for (int ins : insert)
        if (ins < d) ++before;
      drop.push_back(d - before);
    }
    out = ts::squeeze(out, drop, kNoLoc);
  }
  for (int ins : insert) {
    int shift = 0;
    for (int d : squeeze)
      if (d < ins) ++shift;
    out = ts::expand_dims(out, ins - shift, kNoLoc);
  }
  return out;
}

ts::Array reduce(ts::Array (*f)(const ts::Array&, const ts::Axes&, const ts::ReduceOptions&, std::source_location),
                 const ts::Array& x, nb::handle axis, bool keepdims) {
  ts::ReduceOptions opt;
  opt.keepdims = keepdims;
  return f(x, to_axes(axis), opt, kNoLoc);
}

std::vector<int> perm_of(nb::args axes) {
  if (axes.size() == 0) return {};
  if (axes.size() == 1 && !axes[0].is_none() && nb::hasattr(axes[0], "__len__"))
    return nb::cast<std::vector<int>>(axes[0]);
  if (axes.size() == 1 && axes[0].is_none()) return {};
  return nb::cast<std::vector<int>>(axes);
}

ts::Shape shape_of(nb::args shape) {
  if (shape.size() == 1) return to_shape(shape[0]);
  return to_shape(shape);
}

nb::object item_of(const ts::Array& a) { return to_numpy(a).attr("item")(); }

ts::Array single_element(const ts::Array& a, const char* what) {
  if (a.size() != 1)
    throw nb::type_error((std::string("only size-1 arrays can be converted to ") + what + ", got shape " +
                          ts::shape_str(a.shape()))
                             .c_str());
  return a;
}

}  // namespace

void init_array(nb::module_& m) {
  nb::class_<ts::Shard>(m, "Shard", "One device's piece of an Array.")
      .def_ro("device", &ts::Shard::device)
      .def_prop_ro("index", [](const ts::Shard& s) { return index_to_py(s.index); },
                   "The global index slices held, one per dim.")
      .def_ro("replica_id", &ts::Shard::replica_id)
      .def_ro("data", &ts::Shard::data)
      .def("__repr__", [](const ts::Shard& s) {
        return "Shard(device=" + s.device.str() + ", index=" + nb::cast<std::string>(nb::repr(index_to_py(s.index))) +
               ", replica_id=" + std::to_string(s.replica_id) + ", data=" + array_repr(s.data) + ")";
      });

  auto binop = [](Bin op, bool reflected) {
    return [op, reflected](const ts::Array& self, nb::handle other) -> nb::object {
      if (!is_operand(other)) return nb::borrow(Py_NotImplemented);
      nb::object s = nb::cast(self);
      return nb::cast(reflected ? binary(op, other, s) : binary(op, s, other));
    };
  };
  auto bool_op = [](Bin op, const char* sym, bool reflected) {
    return [op, sym, reflected](const ts::Array& self, nb::handle other) -> nb::object {
      if (!is_operand(other)) return nb::borrow(Py_NotImplemented);
      ts::Array o = to_array(other, &self, sym);
      if (self.dtype() != ts::DType::bool_ || o.dtype() != ts::DType::bool_)
        throw nb::type_error((std::string("operator ") + sym +
                              " is bound for bool arrays only so far (bitwise integer ops are not), got " +
                              ts::typeof(self) + " and " + ts::typeof(o))
                                 .c_str());
      nb::object s = nb::cast(self), oo = nb::cast(o);
      return nb::cast(reflected ? binary(op, oo, s) : binary(op, s, oo));
    };
  };

  nb::class_<ts::Array> cls(m, "Array", "A global-view array sharded over a mesh of devices.");
  cls.def_prop_ro("shape", [](const ts::Array& a) { return nb::tuple(nb::cast(a.shape())); })
      .def_prop_ro("dtype", [](const ts::Array& a) { return numpy_dtype(a.dtype()); })
      .def_prop_ro("ndim", &ts::Array::ndim)
      .def_prop_ro("size", &ts::Array::size)
      .def_prop_ro("nbytes", &ts::Array::nbytes)
      .def_prop_ro("itemsize", [](const ts::Array& a) { return ts::itemsize(a.dtype()); })
      .def_prop_ro("sharding", &ts::Array::sharding)
      .def_prop_ro("is_fully_replicated", [](const ts::Array& a) { return a.sharding().is_fully_replicated(); })
      .def_prop_ro("addressable_shards", &ts::Array::addressable_shards)
      .def(
          "devices", [](nb::handle self) { return self.attr("sharding").attr("device_set"); },
          "The set of devices holding the array's shards (JAX's Array.devices()).")
      .def_prop_ro("T", [](const ts::Array& a) { return ts::transpose(a, {}, kNoLoc); })
      .def_prop_ro("typeof", [](const ts::Array& a) { return ts::typeof(a); },
                   "The type string with the sharding: 'f32[10@x,8@y]'.")
      .def("block_until_ready", [](nb::handle self) {
        nb::cast<const ts::Array&>(self).block_until_ready();
        return nb::borrow(self);
      })
      .def("__array__", [](const ts::Array& a, nb::handle dtype, nb::handle copy) {
        (void)copy;  // always a fresh host copy
        nb::object out = to_numpy(a);
        if (!dtype.is_none()) out = out.attr("astype")(dtype);
        return out;
      }, "dtype"_a = nb::none(), "copy"_a = nb::none())
      .def("to_numpy", &to_numpy, "The global array gathered to a new NumPy array.")
      .def("__dlpack__", [](const ts::Array& a, nb::kwargs kwargs) {
        // Through a host copy (CPU devices hold one buffer per shard, not
        // the global array).
        return to_numpy(a).attr("__dlpack__")(**kwargs);
      })
      .def("__dlpack_device__", [](const ts::Array&) { return nb::make_tuple(1, 0); })  // kDLCPU, device 0
      .def("__repr__", &array_repr)
      .def("__str__", [](const ts::Array& a) {
        try {
          return nb::cast<std::string>(nb::str(to_numpy(a)));
        } catch (const ts::Error&) {
          return "Traced<" + ts::typeof(a) + ">";
        }
      })
      .def("__len__", [](const ts::Array& a) {
        if (a.ndim() == 0) throw nb::type_error("len() of unsized object");
        return a.shape()[0];
      })
      .def("__iter__", [](const ts::Array& a) {
        if (a.ndim() == 0) throw nb::type_error("iteration over a 0-d array");
        nb::list rows;
        for (std::int64_t i = 0; i < a.shape()[0]; ++i) rows.append(nb::cast(getitem(a, nb::int_(i))));
        return nb::iter(rows);
      })
      .def("__getitem__", &getitem, nb::arg().none())
      .def("__bool__", [](const ts::Array& a) {
        const int truth = PyObject_IsTrue(item_of(single_element(a, "bool")).ptr());
        if (truth < 0) throw nb::python_error();
        return truth != 0;
      })
      .def("__float__", [](const ts::Array& a) { return nb::cast<double>(nb::float_(item_of(single_element(a, "float")))); })
      .def("__int__", [](const ts::Array& a) { return nb::int_(item_of(single_element(a, "int"))); })
      .def("__index__", [](const ts::Array& a) {
        if (a.dtype() == ts::DType::f32 || a.dtype() == ts::DType::f64 || a.dtype() == ts::DType::bool_ || a.ndim() != 0)
          throw nb::type_error("only integer scalar arrays can be converted to a scalar index");
        return nb::int_(item_of(a));
      })
      .def("item", [](const ts::Array& a) { return item_of(single_element(a, "a Python scalar")); })
      .def("tolist", [](const ts::Array& a) { return to_numpy(a).attr("tolist")(); })
      .def("astype", [](const ts::Array& a, nb::handle dtype) { return ts::astype(a, to_dtype(dtype, "astype"), kNoLoc); },
           "dtype"_a)
      .def("reshape", [](const ts::Array& a, nb::args shape) { return ts::reshape(a, shape_of(shape), {}, kNoLoc); })
      .def("transpose", [](const ts::Array& a, nb::args axes) { return ts::transpose(a, perm_of(axes), kNoLoc); })
      .def("flatten", [](const ts::Array& a) { return ts::reshape(a, {-1}, {}, kNoLoc); })
      .def("ravel", [](const ts::Array& a) { return ts::reshape(a, {-1}, {}, kNoLoc); })
      .def("squeeze", [](const ts::Array& a, nb::handle axis) {
        std::vector<int> axes;
        if (!axis.is_none()) axes = to_axes(axis).axes();
        return ts::squeeze(a, axes, kNoLoc);
      }, "axis"_a = nb::none())
      .def("sum", [](const ts::Array& a, nb::handle axis, bool keepdims) { return reduce(&ts::sum, a, axis, keepdims); },
           "axis"_a = nb::none(), "keepdims"_a = false)
      .def("mean", [](const ts::Array& a, nb::handle axis, bool keepdims) { return reduce(&ts::mean, a, axis, keepdims); },
           "axis"_a = nb::none(), "keepdims"_a = false)
      .def("max", [](const ts::Array& a, nb::handle axis, bool keepdims) { return reduce(&ts::max, a, axis, keepdims); },
           "axis"_a = nb::none(), "keepdims"_a = false)
      .def("min", [](const ts::Array& a, nb::handle axis, bool keepdims) { return reduce(&ts::min, a, axis, keepdims); },
           "axis"_a = nb::none(), "keepdims"_a = false)
      .def("prod", [](const ts::Array& a, nb::handle axis, bool keepdims) { return reduce(&ts::prod, a, axis, keepdims); },
           "axis"_a = nb::none(), "keepdims"_a = false)
      .def("__neg__", [](const ts::Array& a) { return ts::negative(a, kNoLoc); })
      .def("__pos__", [](const ts::Array& a) { return a; })
      .def("__abs__", [](const ts::Array& a) { return ts::abs(a, kNoLoc); })
      .def("__invert__", [](const ts::Array& a) {
        if (a.dtype() != ts::DType::bool_)
          throw nb::type_error(("operator ~ is bound for bool arrays only so far, got " + ts::typeof(a)).c_str());
        return ts::logical_not(a, kNoLoc);
      })
      .def("__add__", binop(Bin::add, false)).def("__radd__", binop(Bin::add, true))
      .def("__sub__", binop(Bin::subtract, false)).def("__rsub__", binop(Bin::subtract, true))
      .def("__mul__", binop(Bin::multiply, false)).def("__rmul__", binop(Bin::multiply, true))
      .def("__truediv__", binop(Bin::divide, false)).def("__rtruediv__", binop(Bin::divide, true))
      .def("__floordiv__", binop(Bin::floor_divide, false)).def("__rfloordiv__", binop(Bin::floor_divide, true))
      .def("__mod__", binop(Bin::remainder, false)).def("__rmod__", binop(Bin::remainder, true))
      .def("__pow__", binop(Bin::pow, false)).def("__rpow__", binop(Bin::pow, true))
      .def("__eq__", binop(Bin::equal, false)).def("__ne__", binop(Bin::not_equal, false))
      .def("__lt__", binop(Bin::less, false)).def("__le__", binop(Bin::less_equal, false))
      .def("__gt__", binop(Bin::greater, false)).def("__ge__", binop(Bin::greater_equal, false))
      .def("__and__", bool_op(Bin::logical_and, "&", false)).def("__rand__", bool_op(Bin::logical_and, "&", true))
      .def("__or__", bool_op(Bin::logical_or, "|", false)).def("__ror__", bool_op(Bin::logical_or, "|", true))
      .def("__xor__", bool_op(Bin::logical_xor, "^", false)).def("__rxor__", bool_op(Bin::logical_xor, "^", true))
      .def("__matmul__", [](const ts::Array& a, nb::handle b) -> nb::object {
        if (!is_operand(b) || as_scalar(b)) return nb::borrow(Py_NotImplemented);
        return nb::cast(ts::matmul(a, to_array(b, &a, "matmul"), {}, kNoLoc));
      })
      .def("__rmatmul__", [](const ts::Array& b, nb::handle a) -> nb::object {
        if (!is_operand(a) || as_scalar(a)) return nb::borrow(Py_NotImplemented);
        return nb::cast(ts::matmul(to_array(a, &b, "matmul"), b, {}, kNoLoc));
      });
  // Arrays compare elementwise, so they are unhashable (as NumPy's and JAX's).
  cls.attr("__hash__") = nb::none();
  // NumPy defers binary operators with an ndarray on the left to ours.
  cls.attr("__array_priority__") = 100;

  m.def("device_put", [](nb::handle x, nb::handle device, nb::handle dtype) -> ts::Array {
    auto sharding = to_sharding(device, "device_put");
    std::optional<ts::DType> dt;
    if (!dtype.is_none()) dt = to_dtype(dtype, "device_put");
    if (nb::isinstance<ts::Array>(x)) {
      ts::Array a = nb::cast<ts::Array>(x);
      if (dt && *dt != a.dtype()) a = ts::astype(a, *dt, kNoLoc);
      return sharding ? ts::device_put(a, *sharding) : a;
    }
    return from_host(x, sharding ? *sharding : default_sharding(), dt, "device_put");
  }, "x"_a, "device"_a = nb::none(), nb::kw_only(), "dtype"_a = nb::none(),
  "Places a host value (NumPy array, list, scalar) or moves an Array per `device` (a NamedSharding or a "
  "Device; default: device 0). Host values keep their NumPy dtype unless `dtype` is given.");
  m.def("reshard", [](const ts::Array& x, nb::handle spec) {
    if (nb::isinstance<ts::PartitionSpec>(spec)) return ts::reshard(x, nb::cast<ts::PartitionSpec>(spec));
    return ts::reshard(x, nb::cast<ts::NamedSharding>(spec));
  }, "x"_a, "out_shardings"_a, "Moves x to a new spec (or sharding) on its mesh.");
  m.def("typeof", [](const ts::Array& a) { return ts::typeof(a); }, "a"_a);
  m.def("visualize_array_sharding", [](const ts::Array& a) {
    nb::print(nb::str(ts::visualize_sharding_str(a.shape(), a.sharding()).c_str()), nb::str(""));
  }, "a"_a, "Prints the layout of a 1-d or 2-d array: the grid of blocks and who holds each.");
  m.def("visualize_sharding_str", [](const ts::Array& a) { return ts::visualize_sharding_str(a.shape(), a.sharding()); },
        "a"_a, "The text visualize_array_sharding prints.");
}

}  // namespace tessera_py
