"""Batch sizes that straddle an engine's batch buckets: the sizes an invariance matrix's ``batch`` axis runs.

An engine that runs a batch with one of several kernels or captured graphs, chosen by the batch's size (vLLM's
CUDA-graph capture sizes 1, 2, 4, 8, 16, ...; an attention backend that switches algorithm above a size),
declares the largest size of each bucket as ``BATCH_BUCKETS`` on its adapter
(:class:`~logitlab.engines.base.Engine`). A difference that only a change of bucket brings shows between b and
b+1, so the ``batch`` axis runs b-1, b and b+1 around every bucket b up to a cap, besides 1..``--max-batch``.
"""

from __future__ import annotations

from typing import Any, Sequence

from logitlab.errors import InputError, check_at_least

__all__ = ["MAX_BATCH_SIZE", "engine_buckets", "straddling_sizes", "check_buckets"]

#: The largest batch size a probe runs (InvarianceConfig's --batch and the matrix's --max-batch check it).
MAX_BATCH_SIZE = 256


def engine_buckets(engine_cls: Any) -> tuple[int, ...]:
    """The batch buckets an engine class declares (``BATCH_BUCKETS``; () for none), sorted."""
    return tuple(sorted(set(int(b) for b in getattr(engine_cls, "BATCH_BUCKETS", ()))))


def straddling_sizes(max_batch: int, buckets: Sequence[int], cap: int) -> tuple[int, ...]:
    """The batch sizes of the ``batch`` axis: 1..``max_batch``, and b-1, b, b+1 around each bucket b <= ``cap``.

    >>> straddling_sizes(4, (1, 2, 4, 8, 16, 32), 16)
    (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17)
    """
    sizes = set(range(1, max_batch + 1))
    for bucket in buckets:
        if bucket <= cap:
            sizes.update(s for s in (bucket - 1, bucket, bucket + 1) if s >= 1)
    return tuple(sorted(sizes))


def check_buckets(buckets: Sequence[int] | None, cap: int) -> None:
    """Raise InputError for a bucket below 1 or a cap whose straddling sizes would pass :data:`MAX_BATCH_SIZE`."""
    check_at_least("--bucket-cap", cap, 1)
    if cap >= MAX_BATCH_SIZE:
        raise InputError(f"--bucket-cap must be below {MAX_BATCH_SIZE} (a batch runs at most {MAX_BATCH_SIZE} "
                         f"sequences), got {cap}")
    bad = [b for b in buckets or () if int(b) < 1]
    if bad:
        raise InputError(f"--buckets sizes must be at least 1, got {bad[0]}")
