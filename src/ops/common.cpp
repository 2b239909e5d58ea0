#include "ops/common.hpp"

#include "primitives/elementwise.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <exception>
#include <utility>

#include "comm/communicator.hpp"
#include "comm/member.hpp"
#include "comm/process.hpp"
#include "runtime/runtime.hpp"
#include "runtime/timeline.hpp"
#include "sharding/check.hpp"

namespace tessera::detail {

std::string msg(const char* op, const std::string& text) { return std::string("[") + op + "] " + text; }

void check_operand(const Array& a, const char* op, const char* name) {
  if (!a.valid()) throw Error(msg(op, std::string(name) + " is an empty (default-constructed) array"));
}

namespace {
thread_local int t_call_depth = 0;
thread_local std::source_location t_site;
thread_local bool t_has_site = false;
thread_local int t_uncaught = 0;
}  // namespace

CallSite::CallSite(const std::source_location& loc) noexcept {
  if (t_call_depth++ == 0) {
    t_site = loc;
    t_has_site = loc.line() != 0;
    t_uncaught = std::uncaught_exceptions();
  }
}

CallSite::~CallSite() {
  // Unwinding out of the outermost call keeps the site for the catcher.
  if (--t_call_depth == 0 && std::uncaught_exceptions() == t_uncaught) t_has_site = false;
}

std::optional<std::source_location> take_error_site() {
  if (!t_has_site) return std::nullopt;
  t_has_site = false;
  return t_site;
}

void clear_error_site() { t_has_site = false; }

void note_error_site(const std::source_location& loc) {
  if (t_has_site || loc.line() == 0) return;
  t_site = loc;
  t_has_site = true;
}

void check_valid(const Array& a, const char* op, const char* name) {
  check_operand(a, op, name);
  if (a.impl()->trace)
    throw Error(msg(op, "cannot be traced by jit yet (" + std::string(name) + " is a traced value " + describe(a) +
                            "); call it outside the jitted function"));
}

int normalize_axis(int axis, int rank, const char* op) {
  if (axis < -rank || axis >= rank)
    throw ShapeError(msg(op, "axis " + std::to_string(axis) + " is out of range for an array of rank " +
                                 std::to_string(rank)));
  return axis < 0 ? axis + rank : axis;
}

std::vector<int> normalize_axes(const Axes& axes, int rank, const char* op) {
  std::vector<int> out;
  if (axes.all()) {
    for (int d = 0; d < rank; ++d) out.push_back(d);
    return out;
  }
  for (int a : axes.axes()) out.push_back(normalize_axis(a, rank, op));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end())
    throw ShapeError(msg(op, "axis " + std::to_string(*std::adjacent_find(out.begin(), out.end())) +
                                 " is given more than once"));
  return out;
}

void check_same_mesh(const std::vector<const Array*>& arrays, const char* op) {
  for (size_t i = 1; i < arrays.size(); ++i)
    if (!(arrays[i]->sharding().mesh() == arrays[0]->sharding().mesh()))
      throw ShardingError(msg(op, "operands are on different meshes: " + arrays[0]->sharding().mesh().str() +
                                      " and " + arrays[i]->sharding().mesh().str() +
                                      "; move one with device_put first"));
}

std::string describe(const Array& a) { return typeof(a); }

bool is_float(DType t) { return t == DType::f32 || t == DType::f64; }
bool is_integer(DType t) { return t != DType::bool_ && !is_float(t); }
bool is_unsigned(DType t) { return t == DType::u8 || t == DType::u32 || t == DType::u64; }

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::bool_) return b;
  if (b == DType::bool_) return a;
  // Floats: the wider one; an integer joins a float at that float.
  if (is_float(a) || is_float(b)) {
    if (is_float(a) && is_float(b)) return itemsize(a) >= itemsize(b) ? a : b;
    return is_float(a) ? a : b;
  }
  // Same signedness: the wider one.
  if (is_unsigned(a) == is_unsigned(b)) return itemsize(a) >= itemsize(b) ? a : b;
  // Mixed: the signed type that holds both, i.e. the wider of the signed
  // operand and twice the unsigned one's width (JAX's u8 -> i16 -> our i32,
  // u32 -> i64); past 64 bits (u64) the lattice goes to floats.
  const DType u = is_unsigned(a) ? a : b, s = is_unsigned(a) ? b : a;
  if (u == DType::u64) return DType::f64;
  const std::size_t need = std::max(itemsize(s), 2 * itemsize(u));
  return need <= 4 ? DType::i32 : DType::i64;
}

DType promote_scalar(DType a, const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Bool: return a;
    case Scalar::Kind::Int: return a == DType::bool_ ? DType::i32 : a;
    case Scalar::Kind::Float: return is_float(a) ? a : DType::f32;
  }
  return a;
}

bool scalar_fits(const Scalar& s, DType t) {
  if (s.kind() != Scalar::Kind::Int || !is_integer(t)) return true;
  if (s.above_i64()) return t == DType::u64;
  return dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return std::in_range<T>(s.as_int());
    else return true;
  });
}

std::string scalar_str(const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Bool: return s.as_int() ? "true" : "false";
    case Scalar::Kind::Int:
      return s.above_i64() ? std::to_string(static_cast<unsigned long long>(s.as_int())) : std::to_string(s.as_int());
    case Scalar::Kind::Float: return number_str(s.as_double());
  }
  return "?";
}

void check_scalar_fits(const Scalar& s, DType t, const char* op) {
  if (!scalar_fits(s, t))
    throw DTypeError(msg(op, "scalar " + scalar_str(s) + " does not fit in " + dtype_name(t)));
}

DType sum_dtype(DType t) {
  switch (t) {
    case DType::bool_: case DType::i8: return DType::i32;
    case DType::u8: return DType::u32;
    default: return t;
  }
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    std::int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    std::int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      throw ShapeError(msg(op, "shapes " + shape_str(a) + " and " + shape_str(b) + " cannot be broadcast together"));
    out[i] = da == 1 ? db : da;
  }
  // (2^40, 1) with (1, 2^40): both fit, the broadcast does not.
  checked_numel(out, op);
  return out;
}

bool has_explicit_axes(const NamedSharding& s) {
  const Mesh& m = s.mesh();
  for (const auto& e : s.spec().entries())
    for (const auto& a : e.axes())
      if (m.axis_types()[m.axis_index(a)] == AxisType::Explicit) return true;
  return false;
}

bool mesh_is_explicit(const Mesh& mesh) {
  for (auto t : mesh.axis_types())
    if (t == AxisType::Explicit) return true;
  return false;
}

NamedSharding resolve_spec(const Mesh& mesh, const PartitionSpec& spec, int rank, const char* op) {
  check_spec(mesh, spec, op);
  NamedSharding s(mesh, spec);
  s.check_rank(rank, op);
  return s;
}

std::vector<std::vector<std::string>> spec_axes(const NamedSharding& s, int rank) {
  std::vector<std::vector<std::string>> out(rank);
  for (int d = 0; d < rank; ++d) out[d] = s.spec()[d].axes();
  return out;
}

PartitionSpec::Entry entry_of(const std::vector<std::string>& axes) {
  if (axes.empty()) return PartitionSpec::Entry(none);
  if (axes.size() == 1) return PartitionSpec::Entry(axes[0]);
  return PartitionSpec::Entry(axes);
}

PartitionSpec make_spec(const std::vector<std::vector<std::string>>& dims) {
  std::vector<PartitionSpec::Entry> entries;
  size_t last = 0;
  for (size_t d = 0; d < dims.size(); ++d)
    if (!dims[d].empty()) last = d + 1;
  for (size_t d = 0; d < last; ++d) entries.push_back(entry_of(dims[d]));
  return PartitionSpec(entries);
}

Array wrap(const Shape& shape, DType dtype, const NamedSharding& sharding, std::vector<Buffer> buffers) {
  auto impl = std::make_shared<ArrayImpl>(shape, dtype, sharding);
  impl->buffers = std::move(buffers);
  return Array(std::move(impl));
}

Array reshard_for(const Array& a, const NamedSharding& s, const char* op) {
  if (a.sharding() == s) return a;
  std::vector<std::vector<Slice>> boxes(s.mesh().size());
  for (int t = 0; t < s.mesh().size(); ++t) boxes[t] = s.shard_index(a.shape(), t);
  return wrap(a.shape(), a.dtype(), s, gather_boxes(a, boxes, op));
}

Array cast(const Array& a, DType dtype) {
  if (a.dtype() == dtype) return a;
  return bind1(make_convert(a.dtype(), dtype), {a});
}

std::vector<Buffer> gather_boxes(const Array& a, const std::vector<std::vector<Slice>>& boxes, const char* op) {
  TimelineScope scope("reshard", "reshard");
  ReshardPlan plan = plan_boxes(a.shape(), a.dtype(), a.sharding(), boxes);
  if (scope) {
    scope.arg("op", op);
    scope.arg("kind", plan.kind);
    scope.arg("bytes", plan.bytes_moved());
    scope.arg("type", typeof(a));  // dtype, shape and source layout
  }
  const int n = a.sharding().mesh().size();
  record_comm(plan_record(plan, op));
  std::vector<Buffer> out(n);
  const auto& src = a.impl()->buffers;
  if (MemberContext* m = current_member()) {
    // One member's share (comm/member.hpp); views as below, by the group.
    if (!(a.sharding().mesh() == m->mesh()))
      throw Error(msg(op, "internal: a device's share of a program moves " + describe(a) + ", which is not on " +
                              m->mesh().str()));
    out[m->pos()] = m->whole(op).exchange(plan, m->pos(), src[m->pos()]);
    return out;
  }
  // A position whose whole box is one contiguous part of its own block (rows
  // of a replicated matrix) takes a view of it instead of a copy.
  std::vector<char> viewed(n, 0);
  bool any_view = false;
  for (const auto& p : plan.pieces)
    if (p.src == p.dst && p.box == boxes[p.dst]) {
      out[p.dst] = contiguous_view(src[p.src], a.sharding().shard_index(a.shape(), p.src), p.box, itemsize(a.dtype()));
      viewed[p.dst] = out[p.dst].data() != nullptr;
      any_view = any_view || viewed[p.dst];
    }
  // The pieces still to copy: the plan itself unless some became views.
  std::optional<ReshardPlan> trimmed;
  if (any_view) {
    trimmed = plan;
    std::erase_if(trimmed->pieces, [&](const TransferPiece& p) { return viewed[p.dst] != 0; });
  }
  const ReshardPlan& rest = trimmed ? *trimmed : plan;
  std::vector<int> piece_begin(n + 1, 0);
  for (const auto& p : rest.pieces) ++piece_begin[p.dst + 1];
  for (int t = 0; t < n; ++t) piece_begin[t + 1] += piece_begin[t];
  for (int t = 0; t < n; ++t)
    if (!viewed[t] && piece_begin[t] == piece_begin[t + 1] && !box_empty(boxes[t])) out[t] = src[t];
  if (!rest.pieces.empty()) communicator_for(a.sharding().mesh()).exchange(rest, piece_begin, src, out);
  return out;
}

void record_none(const Mesh& mesh, const char* op) {
  const auto n = static_cast<size_t>(mesh.size());
  record_comm(CommRecord{op, "none", 0, std::vector<std::int64_t>(n, 0), std::vector<std::int64_t>(n, 0)});
}

CommRecord plan_record(const ReshardPlan& plan, const char* op) {
  CommRecord rec;
  rec.op = op;
  rec.kind = plan.kind;
  rec.pieces = plan.remote_pieces();
  rec.bytes_received = plan.bytes_received;
  rec.bytes_local = plan.bytes_local;
  return rec;
}

CommRecord reduce_record(const Mesh& mesh, const std::vector<std::string>& axes, DType dtype,
                         const std::vector<std::vector<Slice>>& partial_boxes,
                         const std::vector<std::vector<Slice>>& out_boxes, const char* op) {
  const int n = mesh.size();
  const std::size_t isz = itemsize(dtype);
  CommRecord rec;
  rec.op = op;
  rec.kind = "all-reduce";
  rec.bytes_received.assign(n, 0);
  rec.bytes_local.assign(n, 0);
  bool scatter = false;
  for (int t = 0; t < n; ++t) {
    const auto obytes = num_elements(box_shape(out_boxes[t])) * static_cast<std::int64_t>(isz);
    const auto group = group_of(mesh, axes, t);
    rec.bytes_received[t] = obytes * static_cast<std::int64_t>(group.size() - 1);
    rec.bytes_local[t] = obytes;
    rec.pieces += static_cast<std::int64_t>(group.size() - 1);
    scatter = scatter || out_boxes[t] != partial_boxes[t];
  }
  if (scatter) rec.kind = "reduce-scatter";
  bool trivial = true;
  for (const auto& a : axes) trivial = trivial && mesh.axis_size(a) == 1;
  if (trivial) rec.kind = "none";
  return rec;
}

std::vector<Buffer> reduce_over(const Mesh& mesh, const std::vector<std::string>& axes, ReduceOp reduction, DType dtype,
                                const std::vector<Buffer>& partial,
                                const std::vector<std::vector<Slice>>& partial_boxes,
                                const std::vector<std::vector<Slice>>& out_boxes, const char* op) {
  record_comm(reduce_record(mesh, axes, dtype, partial_boxes, out_boxes, op));
  std::vector<Buffer> out(mesh.size());
  if (MemberContext* m = current_member()) {
    if (!(mesh == m->mesh()))
      throw Error(msg(op, "internal: a device's share of a program reduces over " + mesh.str() + ", not " +
                              m->mesh().str()));
    const int pos = m->pos();
    out[pos] = reduce_member(m->over(in_mesh_order(mesh, axes), op), partial[pos], partial_boxes[pos], out_boxes[pos],
                             dtype, reduction, mesh.devices()[pos].id());
    return out;
  }
  communicator_for(mesh).reduce(mesh, axes, reduction, dtype, partial, partial_boxes, out_boxes, out);
  return out;
}

std::string number_str(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

void for_each_device(const Mesh& mesh, const std::function<void(int)>& fn) { run_on_devices(mesh.devices(), fn); }

std::optional<std::int64_t> first_over_processes(const Mesh& mesh,
                                                 const std::vector<std::optional<std::int64_t>>& found,
                                                 const char* op) {
  auto first = [](const std::vector<std::optional<std::int64_t>>& f) -> std::optional<std::int64_t> {
    for (const auto& v : f)
      if (v) return v;
    return std::nullopt;
  };
  if (Runtime::get().process_count() == 1) return first(found);
  // (position, value) of this thread's first finding; position -1: none.
  std::int64_t mine[2] = {-1, 0};
  for (size_t t = 0; t < found.size(); ++t)
    if (found[t]) {
      mine[0] = static_cast<std::int64_t>(t);
      mine[1] = *found[t];
      break;
    }
  std::vector<std::optional<std::int64_t>> all(found.size());
  auto take_in = [&](const std::int64_t* pair) {
    if (pair[0] >= 0 && pair[0] < static_cast<std::int64_t>(all.size()) && !all[static_cast<size_t>(pair[0])])
      all[static_cast<size_t>(pair[0])] = pair[1];
  };
  if (MemberContext* m = current_member()) {
    // Every member of the program, on every process, gathers every member's.
    Buffer b(mesh.devices()[m->pos()].id(), sizeof mine);
    std::memcpy(b.data(), mine, sizeof mine);
    const Local got = m->whole(op).all_gather({b, {2}, DType::i64}, 0, true);
    const auto* v = static_cast<const std::int64_t*>(got.data.data());
    for (std::int64_t i = 0; i < num_elements(got.shape); i += 2) take_in(v + i);
  } else {
    for (const auto& part : allgather_processes(mine, sizeof mine, op))
      if (part.size() == sizeof mine) take_in(reinterpret_cast<const std::int64_t*>(part.data()));
  }
  return first(all);
}

}  // namespace tessera::detail
