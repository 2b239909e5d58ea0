// The extension module tessera._core; the package tessera (python/tessera/)
// re-exports it under JAX's module names.
#include "common.hpp"

#ifdef TESSERA_PY_IFU
namespace tessera_py {
void init_ifu(nb::module_& m);  // ifu/bindings.cpp
}
#endif

NB_MODULE(_core, m) {
  m.doc() = "Tessera's C++ core: sharded arrays, meshes, ops and transformations.";
  m.attr("__version__") = "0.1.0";
  tessera_py::init_errors(m);
  tessera_py::init_sharding(m);
  tessera_py::init_array(m);
  tessera_py::init_ops(m);
  tessera_py::init_transforms(m);
  tessera_py::init_shard_map(m);
  tessera_py::init_random(m);
  tessera_py::init_explain(m);
  tessera_py::init_ops_more(m);
#ifdef TESSERA_PY_IFU
  tessera_py::init_ifu(m);
#endif
}
