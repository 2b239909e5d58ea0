"""jax.distributed: several processes, one program.

Launched by ``mpirun``, every process runs the same program on its own CPU
devices (``TESSERA_NUM_CPU_DEVICES`` per process); ``tessera.devices()``
lists every process's devices and a mesh may span them all. The processes
find each other through MPI, so ``initialize`` needs no coordinator: it joins
the processes launched together (or, without mpirun, starts one process) and
starts the runtime. The first call that needs devices does the same, so
calling it is optional; calling it again does nothing.
"""

from tessera._core import distributed as _d
from tessera._core import process_count, process_index

__all__ = ["backend", "initialize", "is_initialized", "process_count", "process_index"]


def initialize(coordinator_address=None, num_processes=None, process_id=None, local_device_ids=None, **kwargs):
    """Joins the processes started by mpirun. JAX's arguments are accepted:
    ``coordinator_address`` and the other keyword arguments are not needed
    (MPI connects the processes) and are ignored; ``num_processes`` and
    ``process_id``, when given, must agree with what MPI reports (ValueError
    otherwise); ``local_device_ids`` is not supported (set
    TESSERA_NUM_CPU_DEVICES per process instead)."""
    if local_device_ids is not None:
        raise NotImplementedError(
            "distributed.initialize: local_device_ids is not supported; set TESSERA_NUM_CPU_DEVICES per process")
    _d.initialize()
    if num_processes is not None and num_processes != process_count():
        raise ValueError(f"distributed.initialize: num_processes={num_processes} but mpirun started "
                         f"{process_count()} processes")
    if process_id is not None and process_id != process_index():
        raise ValueError(f"distributed.initialize: process_id={process_id} but this is process {process_index()}")


def is_initialized():
    """True once the runtime (and the process group) has started."""
    return _d.is_initialized()


def backend():
    """'mpi' when the processes communicate over MPI, 'none' for one process."""
    return _d.backend()
