"""jax.ops's functions (those bound so far): ``segment_sum``."""

from tessera._core import ops as _ops


def segment_sum(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                bucket_size=None, mode=None):
    """Sums the rows of ``data`` by segment: ``out[s]`` is the sum of ``data[i]``
    with ``segment_ids[i] == s``, for ``s`` in ``[0, num_segments)``; ids out
    of range are dropped (JAX's default mode). ``num_segments`` is required
    (it sets the output's shape); the hints ``indices_are_sorted``,
    ``unique_indices`` and ``bucket_size`` are accepted and ignored."""
    if mode is not None and str(mode).lower().split(".")[-1] not in ("drop", "fill_or_drop"):
        raise NotImplementedError(f"[segment_sum] mode={mode!r} is not supported; ids out of range are dropped")
    return _ops.segment_sum(data, segment_ids, num_segments)


__all__ = ["segment_sum"]
