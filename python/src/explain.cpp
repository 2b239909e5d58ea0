// Visible communication (explain, plan_reshard) and the process group
// (tessera.distributed).
#include "common.hpp"

namespace tessera_py {
namespace {

using namespace nb::literals;

std::string explanation_repr(const ts::Explanation& e) {
  return "Explanation(" + std::to_string(e.records.size()) + (e.records.size() == 1 ? " record, " : " records, ") +
         ts::format_bytes(e.bytes_moved()) + " moved)";
}

}  // namespace

void init_explain(nb::module_& m) {
  nb::class_<ts::CommRecord>(m, "CommRecord", "The communication of one op (or one collective kind of a shard_map).")
      .def_ro("op", &ts::CommRecord::op)
      .def_ro("kind", &ts::CommRecord::kind)
      .def_ro("pieces", &ts::CommRecord::pieces)
      .def_ro("bytes_received", &ts::CommRecord::bytes_received, "Per mesh position.")
      .def_ro("bytes_local", &ts::CommRecord::bytes_local, "Per mesh position.")
      .def_prop_ro("bytes_moved", &ts::CommRecord::bytes_moved, "Bytes that crossed between devices.")
      .def("__str__", &ts::CommRecord::str)
      .def("__repr__", [](const ts::CommRecord& r) { return "CommRecord(" + r.str() + ")"; });

  nb::class_<ts::Explanation>(m, "Explanation", "What the ops run inside explain() moved between devices.")
      .def_ro("records", &ts::Explanation::records)
      .def_prop_ro("bytes_moved", &ts::Explanation::bytes_moved)
      .def("__len__", [](const ts::Explanation& e) { return e.records.size(); })
      .def("__str__", &ts::Explanation::str)
      .def("__repr__", &explanation_repr);

  // The function runs on this thread: the scope records the ops it runs here
  // (a shard_map's collectives are recorded here too, when the call returns).
  m.def("explain", [](nb::callable f, nb::args args, nb::kwargs kwargs) {
    ts::detail::ExplainScope scope;
    f(*args, **kwargs);
    return scope.take();
  }, "f"_a, "args"_a, "kwargs"_a,
  "Runs f(*args, **kwargs) and returns what the ops inside it moved between devices (an Explanation).");

  nb::class_<ts::TransferPiece>(m, "TransferPiece", "A box of the global array copied from one mesh position to another.")
      .def_ro("src", &ts::TransferPiece::src)
      .def_ro("dst", &ts::TransferPiece::dst)
      .def_prop_ro("box", [](const ts::TransferPiece& p) { return index_to_py(p.box); })
      .def_ro("bytes", &ts::TransferPiece::bytes)
      .def("__repr__", [](const ts::TransferPiece& p) {
        return "TransferPiece(src=" + std::to_string(p.src) + ", dst=" + std::to_string(p.dst) +
               ", bytes=" + std::to_string(p.bytes) + ")";
      });

  nb::class_<ts::ReshardPlan>(m, "ReshardPlan", "How reshard would move an array, found without touching data.")
      .def_ro("kind", &ts::ReshardPlan::kind)
      .def_ro("source", &ts::ReshardPlan::source)
      .def_ro("target", &ts::ReshardPlan::target)
      .def_ro("pieces", &ts::ReshardPlan::pieces)
      .def_ro("bytes_received", &ts::ReshardPlan::bytes_received)
      .def_ro("bytes_sent", &ts::ReshardPlan::bytes_sent)
      .def_ro("bytes_local", &ts::ReshardPlan::bytes_local)
      .def_prop_ro("bytes_moved", &ts::ReshardPlan::bytes_moved)
      .def_prop_ro("remote_pieces", &ts::ReshardPlan::remote_pieces)
      .def("__str__", &ts::ReshardPlan::str)
      .def("__repr__", [](const ts::ReshardPlan& p) { return "ReshardPlan(" + p.str() + ")"; });

  m.def("plan_reshard", [](const ts::Array& x, const ts::NamedSharding& target) {
    return ts::plan_reshard(x, target);
  }, "x"_a, "sharding"_a, "The plan that reshard(x, sharding) would run (same mesh).");

  m.def("format_bytes", &ts::format_bytes, "nbytes"_a, "\"280 B\", \"1.5 GiB\".");

  nb::module_ d = m.def_submodule("distributed", "The process group: one process, or several launched by mpirun.");
  d.def("initialize", [] {
    // With several processes it waits for the others.
    nb::gil_scoped_release release;
    ts::distributed::initialize();
  }, "Joins the processes launched together by mpirun and starts the runtime; without mpirun, one process. "
     "Calling it again does nothing.");
  d.def("is_initialized", &ts::distributed::is_initialized);
  d.def("backend", [] { return std::string(ts::distributed::backend()); },
        "\"mpi\" when the processes communicate over MPI, \"none\" for one process.");
}

}  // namespace tessera_py
