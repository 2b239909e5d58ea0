"""tessera.explain, plan_reshard and tessera.distributed (one process)."""

import numpy as np
import pytest

import tessera as ts
import tessera.numpy as tnp
from tessera import lax
from tessera.sharding import NamedSharding

P = ts.P


def mesh24():
    return ts.make_mesh((2, 4), ("x", "y"))


def test_explain_a_reshard():
    m = mesh24()
    a = ts.device_put(np.ones((8, 8), np.float32), NamedSharding(m, P("x", "y")))
    ex = ts.explain(ts.reshard, a, NamedSharding(m, P()))
    assert isinstance(ex, ts.Explanation)
    assert len(ex) == len(ex.records) == 1
    r = ex.records[0]
    assert isinstance(r, ts.CommRecord)
    assert r.op == "reshard" and r.kind == "all-gather"
    assert len(r.bytes_received) == len(r.bytes_local) == 8
    # Every device receives the 7 blocks (of 4x2 floats) it lacks.
    assert r.bytes_received == [7 * 32] * 8
    assert r.bytes_moved == ex.bytes_moved == 8 * 7 * 32
    assert str(ex).startswith("reshard all-gather")
    assert repr(ex) == f"Explanation(1 record, {ts.format_bytes(8 * 7 * 32)} moved)"
    assert repr(r).startswith("CommRecord(reshard all-gather")


def test_explain_nothing_moved():
    a = ts.device_put(np.ones(4, np.float32), NamedSharding(mesh24(), P("x")))
    ex = ts.explain(lambda: 2.0 * tnp.sin(a) + 1.0)
    assert ex.records == [] and ex.bytes_moved == 0
    assert repr(ex) == "Explanation(0 records, 0 B moved)"


def test_explain_a_reduction_and_kwargs():
    m = mesh24()
    a = ts.device_put(np.ones((8, 8), np.float32), NamedSharding(m, P("x", "y")))
    ex = ts.explain(tnp.sum, a, axis=0)
    assert ex.bytes_moved > 0
    assert all(isinstance(r.kind, str) for r in ex.records)


def test_explain_shard_map_collectives():
    m = ts.make_mesh((8,), ("x",))
    a = ts.device_put(np.arange(16, dtype=np.float32), NamedSharding(m, P("x")))

    def body(v):
        return lax.all_gather(lax.psum(v, "x"), "x", tiled=True)

    f = ts.shard_map(body, mesh=m, in_specs=P("x"), out_specs=P(), check_vma=False)
    ex = ts.explain(f, a)
    kinds = {r.kind: r for r in ex.records}
    assert set(kinds) == {"psum", "all_gather"}
    assert all(r.op == "shard_map" for r in ex.records)
    # psum of 2 floats over 8 devices: 2 (n - 1) / n of 8 bytes per device.
    assert kinds["psum"].bytes_received == [14] * 8
    assert kinds["psum"].pieces == 8
    assert "shard_map psum" in str(ex)


def test_explain_propagates_exceptions():
    with pytest.raises(ZeroDivisionError):
        ts.explain(lambda: 1 / 0)


def test_plan_reshard():
    m = mesh24()
    a = ts.device_put(np.ones((8, 8), np.float32), NamedSharding(m, P("x", "y")))
    plan = ts.plan_reshard(a, NamedSharding(m, P("y", "x")))
    assert plan.kind in ("all-to-all", "permute", "point-to-point")
    assert plan.bytes_moved == sum(plan.bytes_received) == sum(plan.bytes_sent)
    assert plan.remote_pieces == sum(1 for p in plan.pieces if p.src != p.dst)
    assert plan.source == a.sharding and plan.target == NamedSharding(m, P("y", "x"))
    p = plan.pieces[0]
    assert isinstance(p.box, tuple) and all(isinstance(s, slice) for s in p.box)
    assert str(plan).startswith("reshard ")
    same = ts.plan_reshard(a, a.sharding)
    assert same.kind == "none" and same.bytes_moved == 0


def test_format_bytes():
    assert ts.format_bytes(280) == "280 B"
    assert ts.format_bytes(3 * 2**29) == "1.5 GiB"


def test_distributed_single_process():
    ts.distributed.initialize()
    ts.distributed.initialize()  # again: nothing
    assert ts.distributed.is_initialized()
    assert ts.distributed.process_count() == 1 and ts.distributed.process_index() == 0
    assert ts.distributed.backend() == "none"
    ts.distributed.initialize(coordinator_address="localhost:1234", num_processes=1, process_id=0)
    with pytest.raises(ValueError, match="num_processes=2"):
        ts.distributed.initialize(num_processes=2)
    with pytest.raises(ValueError, match="process_id=1"):
        ts.distributed.initialize(process_id=1)
    with pytest.raises(NotImplementedError, match="local_device_ids"):
        ts.distributed.initialize(local_device_ids=[0])
