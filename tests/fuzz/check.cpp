// Running programs and comparing their outcomes.
#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <sstream>
#include <stdexcept>
#include <typeinfo>

#include "fuzz/program.hpp"
#include "tessera/distributed.hpp"
#include "test_util.hpp"

namespace tessera::fuzz {

double unit_roundoff(DType t) {
  switch (t) {
    case DType::f32: return 0x1p-24;
    case DType::f64: return 0x1p-53;
    default: return 0.0;
  }
}

int significand_bits(DType t) {
  switch (t) {
    case DType::f32: return 24;
    case DType::f64: return 53;
    default: return 62;
  }
}

std::string spec_text(const PartitionSpec& s) {
  std::string t = s.str();
  if (t.rfind("PartitionSpec", 0) == 0) t.replace(0, 13, "P");
  return t;
}

namespace {
// FNV-1a, to compare programs and outcomes across processes in a few bytes.
struct Hash {
  std::uint64_t h = 0xcbf29ce484222325ull;
  void bytes(const void* p, std::size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 0x100000001b3ull;
  }
  void text(const std::string& t) {
    bytes(t.data(), t.size());
    bytes("", 1);  // a separator, so that "ab","c" and "a","bc" differ
  }
  template <class T>
  void pod(const T& v) { bytes(&v, sizeof v); }
};

// Every process's `mine`, in process order (a collective).
std::vector<std::uint64_t> allgather_words(const std::vector<std::uint64_t>& mine) {
  return process_allgather(std::span<const std::uint64_t>(mine.data(), mine.size()));
}

std::string outcome_text(const Outcome& o) {
  if (o.skipped) return "skipped";
  if (o.value) return typeof(*o.value);
  return (o.tessera_error ? "raised " : "raised non-tessera ") + o.error_type + ": " + o.message;
}

// What kind of outcome a step had: what every process must agree on.
std::uint64_t outcome_hash(const Outcome& o) {
  Hash h;
  h.pod(o.skipped);
  h.pod(o.tessera_error);
  h.text(o.error_type);
  h.text(o.value ? typeof(*o.value) : "");
  return h.h;
}

std::string type_name(const std::type_info& t) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(t.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && d ? d.get() : t.name();
}
}  // namespace

Outcome run_step(const StepFn& fn, const Mesh& mesh, const std::vector<Array>& args) {
  Outcome o;
  try {
    Array a = fn(mesh, args);
    a.block_until_ready();
    o.value = std::move(a);
  } catch (const Error& e) {
    o.error_type = type_name(typeid(e));
    o.message = e.what();
    o.tessera_error = true;
  } catch (const std::exception& e) {
    o.error_type = type_name(typeid(e));
    o.message = e.what();
  } catch (...) {
    o.error_type = "unknown exception";
  }
  return o;
}

std::vector<Outcome> run_program(const Program& p, const Mesh& mesh, bool trace) {
  std::vector<Outcome> out(p.steps.size());
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    const Step& s = p.steps[i];
    std::vector<Array> args;
    bool missing = false;
    for (int a : s.args) {
      if (!out[a].value) missing = true;
      else args.push_back(*out[a].value);
    }
    if (missing) {
      out[i].skipped = true;
      continue;
    }
    if (trace) {
      std::fprintf(stderr, "  [sharded] v%zu = %s\n", i, s.text.c_str());
      std::fflush(stderr);
    }
    out[i] = run_step(s.fn, mesh, args);
    // A step that ended otherwise on another process (raised there, say)
    // would leave the processes making the next steps' collectives apart:
    // every process stops here, and agree_outcomes names the step.
    if (process_count() > 1) {
      const std::uint64_t mine = outcome_hash(out[i]);
      std::vector<std::uint64_t> all;
      try {
        all = allgather_words({mine});
      } catch (const std::exception& e) {
        // Another process is still in this step's collectives (or a later
        // one): name the step, since the processes cannot go on together.
        throw std::runtime_error("after v" + std::to_string(i) + " (here " + outcome_text(out[i]) +
                                 "), agreeing on the outcome raised " + e.what());
      }
      if (std::any_of(all.begin(), all.end(), [&](std::uint64_t v) { return v != mine; })) {
        for (std::size_t j = i + 1; j < out.size(); ++j) out[j].skipped = true;
        break;
      }
    }
  }
  return out;
}

// The bytes of an array this process holds whole (a reference value, a shard).
std::vector<unsigned char> host_bytes(const Array& a) {
  std::vector<unsigned char> b(static_cast<std::size_t>(a.size()) * itemsize(a.dtype()));
  a.copy_to_host(b.data(), a.dtype());
  return b;
}

std::vector<double> as_doubles(const std::vector<unsigned char>& bytes, DType t, std::int64_t n) {
  std::vector<double> out(static_cast<std::size_t>(n));
  detail::convert(bytes.data(), t, out.data(), DType::f64, n);
  return out;
}

std::string index_text(const Shape& shape, std::int64_t flat) {
  std::vector<std::int64_t> idx(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] > 0) {
      idx[d] = flat % shape[d];
      flat /= shape[d];
    }
  }
  std::string t = "[";
  for (std::size_t d = 0; d < idx.size(); ++d) {
    if (d) t += ',';
    t += std::to_string(idx[d]);
  }
  return t + "]";
}

namespace {

template <class U>
std::vector<unsigned char> block_bytes(const std::vector<unsigned char>& host, const Shape& shape,
                                       const std::vector<Slice>& box) {
  std::vector<U> typed(host.size() / sizeof(U));
  if (!host.empty()) std::memcpy(typed.data(), host.data(), host.size());
  std::vector<U> sub = testing::sub_block(typed, shape, box);
  std::vector<unsigned char> out(sub.size() * sizeof(U));
  if (!out.empty()) std::memcpy(out.data(), sub.data(), out.size());
  return out;
}

// `gb`: the global value of `got` (gather_values).
std::string compare_values(const Step& s, const Array& got, const std::vector<unsigned char>& gb) {
  const Array& want = *s.ref.value;
  if (got.shape() != want.shape() || got.dtype() != want.dtype())
    return "result " + dtype_name(got.dtype()) + shape_str(got.shape()) + ", reference " + dtype_name(want.dtype()) +
           shape_str(want.shape());
  const std::int64_t n = want.size();
  const auto wb = host_bytes(want);
  if (std::string e = check_shards(got, gb); !e.empty()) return e;
  if (!is_float(want.dtype())) {
    if (gb == wb) return "";
    const auto gd = as_doubles(gb, got.dtype(), n), wd = as_doubles(wb, want.dtype(), n);
    for (std::int64_t i = 0; i < n; ++i)
      if (std::memcmp(gb.data() + i * itemsize(got.dtype()), wb.data() + i * itemsize(got.dtype()),
                      itemsize(got.dtype())) != 0) {
        std::ostringstream os;
        os << "element " << index_text(want.shape(), i) << ": sharded " << gd[i] << ", reference " << wd[i];
        return os.str();
      }
    return "";
  }
  const auto gd = as_doubles(gb, got.dtype(), n), wd = as_doubles(wb, want.dtype(), n);
  const double u = unit_roundoff(want.dtype());
  const double tiny = want.dtype() == DType::f32 ? std::numeric_limits<float>::denorm_min()
                                                 : std::numeric_limits<double>::denorm_min();
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = gd[i], w = wd[i];
    bool same;
    if (std::isnan(w) || std::isnan(g)) same = std::isnan(w) && std::isnan(g);
    else if (std::isinf(w) || std::isinf(g)) same = g == w;
    else if (s.err == 0) same = g == w;
    // Among subnormals rounding is absolute, not relative: allow a few of the smallest steps.
    else same = std::abs(g - w) <= s.err + 4 * u * std::max(std::abs(g), std::abs(w)) + 16 * tiny;
    if (!same) {
      std::ostringstream os;
      os.precision(17);
      os << "element " << index_text(want.shape(), i) << ": sharded " << g << ", reference " << w;
      if (s.err > 0) os << " (allowed difference " << s.err << ")";
      return os.str();
    }
  }
  return "";
}

}  // namespace

// Every device's shard holds exactly its block of the gathered array: a
// kernel that wrote only one replica, or the wrong block, shows here even
// when the gathered array is right.
std::string check_shards(const Array& a, const std::vector<unsigned char>& host) {
  for (const Shard& sh : a.addressable_shards()) {
    std::vector<unsigned char> want;
    switch (itemsize(a.dtype())) {
      case 1:
        want = block_bytes<std::uint8_t>(host, a.shape(), sh.index);
        break;
      case 2:
        want = block_bytes<std::uint16_t>(host, a.shape(), sh.index);
        break;
      case 4:
        want = block_bytes<std::uint32_t>(host, a.shape(), sh.index);
        break;
      default:
        want = block_bytes<std::uint64_t>(host, a.shape(), sh.index);
        break;
    }
    Shape want_shape;
    for (const Slice& s : sh.index) want_shape.push_back(s.size());
    if (sh.data.shape() != want_shape)
      return "shard on " + sh.device.str() + " has shape " + shape_str(sh.data.shape()) + ", its index says " +
             shape_str(want_shape);
    if (host_bytes(sh.data) != want)
      return "shard on " + sh.device.str() + " (replica " + std::to_string(sh.replica_id) +
             ") differs from its block of the gathered array";
  }
  return "";
}

std::string agree_program(const Program& p) {
  if (process_count() == 1) return "";
  // What the generator chose and what the reference gave. Error messages
  // stay out: they may name the reference device, which differs.
  Hash h;
  h.text(p.mesh.str());
  for (const Step& s : p.steps) {
    h.text(s.text);
    h.pod(s.must_raise);
    h.pod(s.err);
    h.text(s.ref.error_type);
    h.text(s.ref_problem.empty() ? "" : "problem");
    if (s.ok()) {
      h.text(dtype_name(s.ref.value->dtype()) + shape_str(s.ref.value->shape()));
      const auto b = host_bytes(*s.ref.value);
      h.bytes(b.data(), b.size());
    }
  }
  const auto all = allgather_words({h.h});
  for (std::size_t q = 0; q < all.size(); ++q)
    if (all[q] != h.h)
      return "process " + std::to_string(q) + " generated another program, or its reference run gave other values";
  return "";
}

std::string agree_outcomes(const std::vector<Outcome>& run, int& step) {
  step = -1;
  if (process_count() == 1) return "";
  std::vector<std::uint64_t> mine;
  for (const Outcome& o : run) mine.push_back(outcome_hash(o));
  const auto all = allgather_words(mine);
  const std::size_t n = mine.size();
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t q = 0; q * n < all.size(); ++q)
      if (all[q * n + i] != mine[i]) {
        step = static_cast<int>(i);
        return "processes disagree: here " + outcome_text(run[i]) + ", process " + std::to_string(q) +
               " had another outcome";
      }
  return "";
}

Values gather_values(const std::vector<Outcome>& run) {
  Values v(run.size());
  for (std::size_t i = 0; i < run.size(); ++i) {
    if (!run[i].value) continue;
    const Array& a = *run[i].value;
    if (process_count() == 1) {
      v[i].bytes = host_bytes(a);
      continue;
    }
    // process_allgather<T> with T the array's own dtype, for any dtype. A
    // gather that raises on some processes after all took part leaves them
    // in step: record it and go on with the next values, which every
    // process gathers alike.
    std::vector<unsigned char> b(static_cast<std::size_t>(a.size()) * itemsize(a.dtype()));
    try {
      detail::process_allgather_raw(a, b.data(), a.dtype());
      v[i].bytes = std::move(b);
    } catch (const Error& e) {
      v[i].error = e.what();
    }
  }
  return v;
}

std::string compare_with_reference(const Program& p, const std::vector<Outcome>& run, const Values& values,
                                   int& step) {
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    step = static_cast<int>(i);
    const Step& s = p.steps[i];
    const Outcome& o = run[i];
    if (!s.ok() && !s.ref.tessera_error) return "reference run raised a non-tessera exception: " + outcome_text(s.ref);
    if (!s.ref_problem.empty()) return s.ref_problem;
    if (s.must_raise && s.ok()) return "the step is invalid, but the reference run raised no error";
    if (o.skipped) continue;  // an earlier step already disagreed
    if (!o.value && !o.tessera_error) return "sharded run raised a non-tessera exception: " + outcome_text(o);
    if (!s.ok()) {
      if (o.value) return "reference raised " + s.ref.error_type + " (" + s.ref.message + "), sharded run did not";
      if (o.error_type != s.ref.error_type)
        return "different errors: reference " + outcome_text(s.ref) + "; sharded " + outcome_text(o);
      continue;
    }
    if (!o.value) return "sharded run " + outcome_text(o) + "; reference gave " + typeof(*s.ref.value);
    if (!(o.value->sharding().mesh() == p.mesh))
      return "result lives on " + o.value->sharding().mesh().str() + ", not the program's mesh";
    if (!values[i].bytes) return "reading the sharded result (process_allgather) raised " + values[i].error;
    if (std::string e = compare_values(s, *o.value, *values[i].bytes); !e.empty()) return e;
    // With every axis Explicit the layout follows from the operands' types
    // (names, not sizes), so the one-device run has the same spec.
    const auto& types = p.mesh.axis_types();
    if (std::all_of(types.begin(), types.end(), [](AxisType t) { return t == AxisType::Explicit; }) &&
        !(o.value->sharding().spec() == s.ref.value->sharding().spec()))
      return "Explicit mesh, but the layout depends on the mesh: sharded " + spec_text(o.value->sharding().spec()) +
             ", one device " + spec_text(s.ref.value->sharding().spec());
  }
  step = -1;
  return "";
}

std::string compare_runs(const Program& p, const std::vector<Outcome>& a, const Values& av, const std::vector<Outcome>& b,
                         const Values& bv, int& step) {
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    step = static_cast<int>(i);
    if (a[i].skipped || b[i].skipped) {
      if (a[i].skipped != b[i].skipped) return "one run skipped the step, the other did not";
      continue;
    }
    if (a[i].value.has_value() != b[i].value.has_value() || a[i].error_type != b[i].error_type)
      return "not deterministic: first run " + outcome_text(a[i]) + "; second run " + outcome_text(b[i]);
    if (!a[i].value) continue;
    if (typeof(*a[i].value) != typeof(*b[i].value))
      return "not deterministic: layouts " + typeof(*a[i].value) + " vs " + typeof(*b[i].value);
    for (const Values* v : {&av, &bv})
      if (!(*v)[i].bytes) return "reading the sharded result (process_allgather) raised " + (*v)[i].error;
    if (*av[i].bytes != *bv[i].bytes) return "not deterministic: the two runs differ bitwise";
  }
  step = -1;
  return "";
}

std::string Program::listing(const std::vector<Outcome>* sharded, int mark) const {
  std::ostringstream os;
  os << "program for seed " << seed << " on " << mesh.str() << ", devices [";
  for (std::size_t i = 0; i < mesh.devices().size(); ++i) os << (i ? "," : "") << mesh.devices()[i].id();
  os << "]\n";
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    os << (static_cast<int>(i) == mark ? "> " : "  ") << "v" << i << " = " << s.text;
    os << "   # ref: " << (s.ok() ? dtype_name(s.ref.value->dtype()) + shape_str(s.ref.value->shape())
                                  : outcome_text(s.ref));
    if (s.err > 0) os << " (tol " << s.err << ")";
    if (sharded) os << " | sharded: " << outcome_text((*sharded)[i]);
    os << "\n";
  }
  return os.str();
}

}  // namespace tessera::fuzz
