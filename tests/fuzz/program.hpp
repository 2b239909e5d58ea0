// Random sharded programs for differential testing.
//
// A program is a list of steps; each step applies one public op to earlier
// steps' values with parameters fixed at generation time, so the same program
// can run on any mesh whose axis names match. The generator builds a program
// while running it on the reference mesh (one device, every axis of size 1):
// the reference results give the shapes, dtypes and magnitudes the next steps
// are chosen from, and are what the sharded runs are compared with.
//
// A value's `err` is the largest difference from the reference a correct
// implementation may show. It is 0 (values must be equal) for everything whose
// arithmetic does not depend on the layout: elementwise ops, shape ops,
// gathers, random numbers, and sums whose terms lie on a grid coarse enough
// that every partial sum is exact. Other float sums (reductions, matmul,
// scans, scatter-adds, psum) get a bound from their length and magnitudes,
// and ops that would turn a small difference into a large one (comparisons,
// rounding, casts to integers, ...) never read a value with err > 0.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/tessera.hpp"

namespace tessera::fuzz {

/// The element types programs draw from. A new dtype joins here; host data
/// for it comes from host_values() in generate.cpp.
inline const std::vector<DType>& fuzz_dtypes() {
  static const std::vector<DType> kDTypes = {DType::bool_, DType::u8,  DType::i8,  DType::u32, DType::i32,
                                             DType::u64,   DType::i64, DType::f32, DType::f64};
  return kDTypes;
}
inline bool is_float(DType t) { return t == DType::f32 || t == DType::f64; }
/// Unit roundoff of a float dtype; 0 for exact (integer and bool) dtypes.
double unit_roundoff(DType t);
/// Bits of significand, for deciding when integer-valued float sums are exact.
int significand_bits(DType t);

/// What happened when a step ran on one mesh.
struct Outcome {
  std::optional<Array> value;
  std::string error_type;  // the exception's dynamic type, when one was raised
  std::string message;
  bool tessera_error = false;  // raised a tessera::Error (an allowed outcome)
  bool skipped = false;        // an argument was missing (an earlier step failed)
};

using StepFn = std::function<Array(const Mesh& mesh, const std::vector<Array>& args)>;

struct Step {
  std::string op;          // coverage key
  std::string text;        // listing line: "sum(v1, axes={0}, keepdims=1)"
  std::vector<int> args;   // ids of earlier steps
  StepFn fn;
  Outcome ref;             // the reference run's outcome
  std::string ref_problem; // what was wrong with the reference run, if anything
  bool must_raise = false; // an invalid step: every run must raise a tessera::Error
  // When the reference produced a value:
  double err = 0;          // allowed absolute difference from the reference
  double maxabs = 0;       // largest finite |element|
  double minabs = 0;       // smallest nonzero finite |element| (0: none)
  int grid = -1;           // every finite element is a multiple of 2^-grid (-1: none <= 10)
  bool finite = true;      // no NaN or infinity
  bool ok() const { return ref.value.has_value(); }
};

struct Program {
  Program(Mesh m, Mesh ref) : mesh(std::move(m)), ref_mesh(std::move(ref)) {}
  std::uint64_t seed = 0;
  Mesh mesh;      // the sharded mesh
  Mesh ref_mesh;  // one device, same axis names and types
  std::vector<Step> steps;
  /// Readable listing; with `sharded`, each line also shows the sharded type
  /// and outcome. `mark` flags one step.
  std::string listing(const std::vector<Outcome>* sharded = nullptr, int mark = -1) const;
};

/// Runs `fn` and records its outcome (value, tessera::Error or other exception).
Outcome run_step(const StepFn& fn, const Mesh& mesh, const std::vector<Array>& args);

/// Builds a program for `seed` on `mesh`, running it on `ref_mesh` as it
/// goes. With `trace`, each step is printed before it runs.
Program generate(std::uint64_t seed, const Mesh& mesh, const Mesh& ref_mesh, bool trace = false);

/// Runs every step of `p` on `mesh`. With several processes, a collective
/// after each step: at the first step whose outcome differs between
/// processes, every process marks the rest skipped and stops.
std::vector<Outcome> run_program(const Program& p, const Mesh& mesh, bool trace = false);

// With several processes (mpirun) every process generates and runs each
// program: the reference on a device of its own, the sharded runs together.
// The functions below that gather are collectives then: every process calls
// them in the same order, and those that compare only read what every
// process holds alike, so that all reach the same verdict (except for the
// shards, which each process checks for its own devices).

/// "" when every process built the same program with the same reference
/// values (always with one process). A collective.
std::string agree_program(const Program& p);
/// "" when every process's run gave the same kind of outcome at each step
/// (value and its type, or the error type), so that they gather the same
/// values; else why not, with `step` the first step that differs. A
/// collective (with one process: "").
std::string agree_outcomes(const std::vector<Outcome>& run, int& step);

/// The global value of a step's result, row-major in its own dtype: none
/// where the step gave no value, or where reading it raised (`error`).
struct Gathered {
  std::optional<std::vector<unsigned char>> bytes;
  std::string error;
};
using Values = std::vector<Gathered>;
/// Every step's value. With several processes, a collective
/// (process_allgather, one per value) after agree_outcomes said "".
Values gather_values(const std::vector<Outcome>& run);

/// First disagreement between the reference and a sharded run, as text
/// ("" when they agree); `step` receives the step's index. `values` are the
/// run's (gather_values).
std::string compare_with_reference(const Program& p, const std::vector<Outcome>& run, const Values& values, int& step);
/// First difference between two runs on the same mesh (bitwise, layouts included).
std::string compare_runs(const Program& p, const std::vector<Outcome>& a, const Values& av, const std::vector<Outcome>& b,
                         const Values& bv, int& step);

/// Short text of a spec: "P('x', None)".
std::string spec_text(const PartitionSpec& s);

/// The bytes of an array this process holds whole, row-major in its dtype.
std::vector<unsigned char> host_bytes(const Array& a);
/// The first `n` elements of `bytes` (in dtype `t`) as doubles.
std::vector<double> as_doubles(const std::vector<unsigned char>& bytes, DType t, std::int64_t n);
/// "[i,j,k]": the index of row-major element `flat` of `shape`.
std::string index_text(const Shape& shape, std::int64_t flat);
/// "" when every shard this process holds is its block of `host` (the
/// array's global bytes); else which shard differs.
std::string check_shards(const Array& a, const std::vector<unsigned char>& host);

/// How often each transformation was checked (transforms.cpp).
struct TransformStats {
  long jit = 0, vmap = 0, chunked = 0, jvp = 0, vjp = 0;
  long vmap_skipped = 0, vjp_skipped = 0, fd_skipped_programs = 0, ad_unsupported = 0, vmap_unsupported = 0;
  long fd_checked = 0, fd_skipped = 0;  // elements compared with central differences, and not
};

/// Runs the program's steps that gave a value in `eager` (the eager run on
/// p.mesh, whose values are `ev`) under jit, vmap, chunked vmap, jvp and
/// vjp, and compares (see transforms.cpp). "" when all agree; else why not,
/// with `which` the transformation and `step` the step (-1: none).
/// `only`: a comma-separated selection of "jit", "vmap" (with chunks) and
/// "autodiff" (jvp, central differences, vjp); empty: all. One process only.
std::string check_transforms(const Program& p, const std::vector<Outcome>& eager, const Values& ev, int& step,
                             std::string& which, TransformStats& stats, const std::string& only = "");

}  // namespace tessera::fuzz
