// More of jax.numpy, jax.nn, jax.lax and jax.ops over the C++ ops: pad,
// convolve, gradient, interp, median, searchsorted (tessera.numpy), sigmoid
// (tessera.nn), rsqrt and with_sharding_constraint (tessera.lax),
// segment_sum (tessera.ops). Keyword names and defaults are JAX's; options
// the C++ ops do not have raise NotImplementedError.
#include <cstdint>
#include <limits>

#include "common.hpp"

namespace tessera_py {
namespace {

using namespace nb::literals;
constexpr std::source_location kNoLoc{};

ts::Array arr(nb::handle h, const char* op) { return to_array(h, nullptr, op); }

[[noreturn]] void not_implemented(const std::string& what) {
  PyErr_SetString(PyExc_NotImplementedError, what.c_str());
  throw nb::python_error();
}

std::string repr_of(nb::handle h) { return nb::cast<std::string>(nb::repr(h)); }

// Python and NumPy integers (NumPy arrays have __index__ too, but are sequences).
bool is_int_like(nb::handle h) {
  return PyLong_Check(h.ptr()) || (PyIndex_Check(h.ptr()) && !PySequence_Check(h.ptr()));
}
bool is_number(nb::handle h) {
  return PyFloat_Check(h.ptr()) || PyLong_Check(h.ptr()) || (PyNumber_Check(h.ptr()) && !PySequence_Check(h.ptr()));
}

// The operands as Arrays; NumPy ones go replicated onto the mesh of the
// first Array among them (as for binary ops), wherever it comes.
std::vector<ts::Array> operands(std::initializer_list<nb::handle> hs, const char* op) {
  const ts::Array* like = nullptr;
  ts::Array first;
  for (nb::handle h : hs)
    if (nb::isinstance<ts::Array>(h)) {
      first = nb::cast<ts::Array>(h);
      like = &first;
      break;
    }
  std::vector<ts::Array> out;
  for (nb::handle h : hs) out.push_back(to_array(h, like, op));
  return out;
}
std::int64_t as_int(nb::handle h) { return nb::cast<std::int64_t>(nb::int_(h)); }

// np.pad's pad_width: n, (n,), (before, after), or one such entry per dim.
std::vector<std::pair<std::int64_t, std::int64_t>> pad_widths(nb::handle w) {
  auto pair_of = [](nb::handle e) -> std::pair<std::int64_t, std::int64_t> {
    if (is_int_like(e)) return {as_int(e), as_int(e)};
    nb::sequence s = nb::borrow<nb::sequence>(e);
    const size_t n = nb::len(s);
    if (n == 1) return {as_int(s[0]), as_int(s[0])};
    if (n == 2) return {as_int(s[0]), as_int(s[1])};
    throw nb::value_error(("[pad] each pad_width entry must be an int or an (before, after) pair, got " + repr_of(e))
                              .c_str());
  };
  if (nb::isinstance<ts::Array>(w))
    throw nb::type_error("[pad] pad_width must be an int or a sequence of ints or pairs, not an Array");
  if (is_int_like(w)) return {pair_of(w)};
  if (!PySequence_Check(w.ptr()))
    throw nb::type_error(("[pad] pad_width must be an int or a sequence of ints or pairs, got " + repr_of(w)).c_str());
  nb::sequence s = nb::borrow<nb::sequence>(w);
  bool flat = true;
  for (nb::handle e : s) flat = flat && is_int_like(e);
  if (flat) return {pair_of(w)};  // (n,) or (before, after): every dim
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (nb::handle e : s) out.push_back(pair_of(e));
  return out;
}

ts::Side side_of(const std::string& side) {
  if (side == "left") return ts::Side::left;
  if (side == "right") return ts::Side::right;
  throw nb::value_error(("[searchsorted] side must be 'left' or 'right', got '" + side + "'").c_str());
}

}  // namespace

void init_ops_more(nb::module_& m) {
  nb::module_ np = nb::borrow<nb::module_>(m.attr("numpy_ops"));

  np.def("pad", [](nb::handle array, nb::handle pad_width, const std::string& mode, nb::handle constant_values) {
    if (mode != "constant")
      not_implemented("[pad] mode='" + mode + "' is not supported; only mode='constant' is");
    std::optional<ts::Scalar> value = as_scalar(constant_values);
    if (!value)
      not_implemented("[pad] constant_values must be a Python bool, int or float (one value for every side), got " +
                      repr_of(constant_values));
    return ts::pad(arr(array, "pad"), pad_widths(pad_width), *value, kNoLoc);
  }, "array"_a, "pad_width"_a, "mode"_a = "constant", "constant_values"_a = 0,
  "jnp.pad with mode='constant' and one constant value.");

  np.def("convolve", [](nb::handle a, nb::handle v, const std::string& mode) {
    auto xs = operands({a, v}, "convolve");
    ts::Array x = xs[0], k = xs[1];
    if (x.ndim() != 1 || k.ndim() != 1)
      throw ts::ShapeError("[convolve] a and v must be 1-d (as jnp.convolve), got shapes " +
                           ts::shape_str(x.shape()) + " and " + ts::shape_str(k.shape()));
    if (x.size() == 0 || k.size() == 0)
      throw ts::ShapeError("[convolve] a and v must not be empty, got shapes " + ts::shape_str(x.shape()) + " and " +
                           ts::shape_str(k.shape()));
    if (k.size() > x.size()) std::swap(x, k);  // as NumPy: the longer one is convolved with the shorter
    const std::int64_t K = k.size();
    if (mode == "same") return ts::convolve(x, k, -1, kNoLoc);
    if (mode == "full") {  // 'same' of x padded to the full length
      const std::pair<std::int64_t, std::int64_t> widths{(K - 1) / 2, K - 1 - (K - 1) / 2};
      return ts::convolve(ts::pad(x, {widths}, 0, kNoLoc), k, -1, kNoLoc);
    }
    if (mode == "valid") {
      ts::Array same = ts::convolve(x, k, -1, kNoLoc);
      return ts::slice(same, {ts::SliceSpec{K / 2, K / 2 + x.size() - K + 1}}, kNoLoc);
    }
    throw nb::value_error(("[convolve] mode must be 'full', 'same' or 'valid', got '" + mode + "'").c_str());
  }, "a"_a, "v"_a, "mode"_a = "full", "jnp.convolve of two 1-d arrays (the kernel flipped).");

  np.def("gradient", [](nb::handle f, nb::args varargs, nb::handle axis, nb::handle edge_order) -> nb::object {
    if (!edge_order.is_none() && as_int(edge_order) != 1)
      not_implemented("[gradient] edge_order=" + repr_of(edge_order) + " is not supported; only edge_order=1 is");
    ts::Array a = arr(f, "gradient");
    std::vector<int> axes;
    if (axis.is_none()) {
      for (int d = 0; d < a.ndim(); ++d) axes.push_back(d);
      if (axes.empty()) throw ts::ShapeError("[gradient] f must be at least 1-d, got shape " + ts::shape_str(a.shape()));
    } else {
      axes = to_axes(axis).axes();
    }
    std::vector<double> spacing(axes.size(), 1.0);
    const size_t n = nb::len(varargs);
    if (n == 1 || n == axes.size()) {
      for (size_t i = 0; i < axes.size(); ++i) {
        nb::handle s = varargs[n == 1 ? 0 : i];
        if (!is_number(s))
          not_implemented("[gradient] spacings must be scalars (uniform spacing); coordinate arrays are not supported, "
                          "got " + repr_of(s));
        spacing[i] = nb::cast<double>(nb::float_(s));
      }
    } else if (n != 0) {
      throw nb::type_error(("[gradient] expected no spacing, one, or one per axis (" + std::to_string(axes.size()) +
                            "), got " + std::to_string(n)).c_str());
    }
    std::vector<ts::Array> out;
    for (size_t i = 0; i < axes.size(); ++i) out.push_back(ts::gradient(a, axes[i], spacing[i], kNoLoc));
    if (out.size() == 1) return nb::cast(out[0]);  // as NumPy: one axis, one array
    nb::list l;
    for (auto& g : out) l.append(nb::cast(g));
    return l;
  }, "f"_a, "varargs"_a, "axis"_a = nb::none(), "edge_order"_a = nb::none(),
  "jnp.gradient with uniform spacings (scalars) and edge_order=1: one Array for one axis, else a list.");

  np.def("interp", [](nb::handle x, nb::handle xp, nb::handle fp, nb::handle left, nb::handle right,
                      nb::handle period) {
    if (!left.is_none() || !right.is_none())
      not_implemented("[interp] left and right are not supported; values outside xp take fp's end values");
    if (!period.is_none()) not_implemented("[interp] period is not supported");
    auto xs = operands({x, xp, fp}, "interp");
    return ts::interp(xs[0], xs[1], xs[2], kNoLoc);
  }, "x"_a, "xp"_a, "fp"_a, "left"_a = nb::none(), "right"_a = nb::none(), "period"_a = nb::none(),
  "jnp.interp: xp increasing; values outside take fp's end values.");

  np.def("median", [](nb::handle a, nb::handle axis, nb::handle out, bool overwrite_input, bool keepdims) {
    (void)overwrite_input;  // arrays are immutable: nothing to overwrite
    if (!out.is_none()) not_implemented("[median] out is not supported (arrays are immutable)");
    ts::MedianOptions opt;
    opt.keepdims = keepdims;
    return ts::median(arr(a, "median"), to_axes(axis), opt, kNoLoc);
  }, "a"_a, "axis"_a = nb::none(), "out"_a = nb::none(), "overwrite_input"_a = false, "keepdims"_a = false);

  np.def("searchsorted", [](nb::handle a, nb::handle v, const std::string& side, nb::handle sorter,
                            nb::handle method) {
    (void)method;  // JAX's choice of algorithm; one here
    if (!sorter.is_none()) not_implemented("[searchsorted] sorter is not supported; pass a sorted sequence");
    auto xs = operands({a, v}, "searchsorted");
    const ts::Array& s = xs[0];
    const ts::DType dt =
        s.ndim() == 1 && s.shape()[0] > std::numeric_limits<std::int32_t>::max() ? ts::DType::i64 : ts::DType::i32;
    return ts::searchsorted(s, xs[1], side_of(side), dt, kNoLoc);
  }, "a"_a, "v"_a, "side"_a = "left", "sorter"_a = nb::none(), nb::kw_only(), "method"_a = "scan");

  nb::module_ nn = m.def_submodule("nn", "jax.nn's functions bound so far.");
  nn.def("sigmoid", [](nb::handle x) { return ts::sigmoid(arr(x, "sigmoid"), kNoLoc); }, "x"_a);

  nb::module_ lax = nb::borrow<nb::module_>(m.attr("lax"));
  lax.def("rsqrt", [](nb::handle x) { return ts::rsqrt(arr(x, "rsqrt"), kNoLoc); }, "x"_a);
  lax.def("with_sharding_constraint", [](const ts::Array& x, nb::handle sharding) {
    if (nb::isinstance<ts::NamedSharding>(sharding))
      return ts::with_sharding_constraint(x, nb::cast<ts::NamedSharding>(sharding), kNoLoc);
    if (nb::isinstance<ts::PartitionSpec>(sharding))
      return ts::with_sharding_constraint(x, nb::cast<ts::PartitionSpec>(sharding), kNoLoc);
    throw nb::type_error(("[with_sharding_constraint] shardings must be a NamedSharding or a PartitionSpec, got " +
                          repr_of(sharding)).c_str());
  }, "x"_a, "shardings"_a);

  nb::module_ ops = m.def_submodule("ops", "jax.ops's functions bound so far.");
  ops.def("segment_sum", [](nb::handle data, nb::handle segment_ids, nb::handle num_segments) {
    if (num_segments.is_none())
      not_implemented("[segment_sum] num_segments is required (it sets the output's shape)");
    auto xs = operands({data, segment_ids}, "segment_sum");
    return ts::segment_sum(xs[0], xs[1], as_int(num_segments), {}, kNoLoc);
  }, "data"_a, "segment_ids"_a, "num_segments"_a = nb::none());
}

}  // namespace tessera_py
