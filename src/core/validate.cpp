#include "core/validate.hpp"

#include <algorithm>
#include <charconv>
#include <exception>

#include "tessera/error.hpp"

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

void check_same_mesh(const Mesh& a, const Mesh& b, const char* op) {
  if (!(a == b))
    throw ShardingError(msg(op, "operands are on different meshes: " + a.str() + " and " + b.str() +
                                    "; move one with device_put first"));
}

std::string describe(const Array& a) { return typeof_varying(a, {}); }

std::string number_str(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

}  // namespace tessera::detail
