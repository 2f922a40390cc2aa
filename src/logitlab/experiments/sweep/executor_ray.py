"""The ``ray`` executor: a sweep's jobs on Ray actors that keep engines loaded between jobs.

Imported only for ``--executor ray`` (``pip install 'logitlab[ray]'``).
``address``: an existing cluster (``HOST:PORT`` of its GCS, ``ray://HOST:10001``
through Ray Client, or ``auto``); none: a local Ray instance started for
this sweep and stopped after it (``ray.init(address="local")``).

Each worker is an actor (``SweepWorker``) reserving the matrix's
``num_cpus``/``num_gpus``; Ray gives it its GPUs through
``CUDA_VISIBLE_DEVICES``. With ``[resources] bundles`` every worker first
reserves a placement group of those bundles (strategy ``strategy``), runs in
bundle 0, and captures its child tasks into the group, so that an engine
which starts its own Ray workers (a tensor-parallel engine over several
GPUs) finds its GPUs reserved next to it. Logitlab must be importable on
every node (installed, or shipped with ``[ray] runtime_env``, e.g.
``py_modules``).

Ray's own retry machinery is off (``max_restarts=0``, ``max_task_retries=0``):
a dead actor is replaced by a fresh one and its job follows the executor's
``retries`` rule, the same as on the local executor.
"""

from __future__ import annotations

import math
import time
import socket
from typing import Any

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from logitlab.errors import InputError
from logitlab.experiments.engine_cache import EngineCache
from logitlab.experiments.sweep.executors import Executor, WorkerDied
from logitlab.experiments.sweep.matrix import JobSpec, Resources
from logitlab.experiments.sweep.job import execute, worker_info

__all__ = ["RayExecutor"]

#: Seconds to wait for a placement group's resources before giving up.
PLACEMENT_TIMEOUT = 120.0


class _SweepWorker:
    """A Ray actor: runs one job at a time and keeps engines loaded between jobs."""

    def __init__(self, lane: int, keep_engines: int, placement: dict[str, Any] | None):
        context = ray.get_runtime_context()
        self.cache = EngineCache(keep_engines)
        if placement is not None:  # what an engine's own Ray tasks started from here would be placed in
            current = ray.util.get_current_placement_group()
            placement = {**placement, "captures_child_tasks": current is not None and current.id.hex() == placement["id"]}
        self.where = worker_info("ray", lane=lane, gpus=[str(g) for g in ray.get_gpu_ids()],
                                 node_id=context.get_node_id(), node_ip=ray.util.get_node_ip_address(),
                                 actor_id=context.get_actor_id(), **({"placement_group": placement} if placement
                                                                      else {}))

    def hello(self) -> dict[str, Any]:
        return self.where

    def run(self, spec: dict[str, Any], attempt: int) -> dict[str, Any]:
        return execute(spec, self.where, self.cache, attempt)


class _RayLane:
    def __init__(self, index: int, actor: Any, group: Any, where: dict[str, Any]):
        self.index, self.actor, self.group, self.where = index, actor, group, where


class RayExecutor(Executor):
    """Jobs on Ray actors, on an existing cluster (``address``) or a local Ray started for the sweep."""

    name = "ray"

    def __init__(self, *, workers: int | None = None, retries: int = 0, address: str | None = None,
                 runtime_env: dict[str, Any] | None = None):
        super().__init__(workers=workers, retries=retries)
        self.address = address
        self.runtime_env = runtime_env or None
        self._started_ray = False

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "address": self.address or "local (started for this sweep)"}

    # -- start and stop -----------------------------------------------------------------
    def _start(self, resources: Resources, n_jobs: int) -> None:
        self.resources = resources
        kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR"}
        if self.runtime_env:
            kwargs["runtime_env"] = self.runtime_env
        if self.address:
            _check_reachable(self.address)
            kwargs["address"] = self.address
        else:
            kwargs.update(address="local", include_dashboard=False)
        for attempt in range(1, CLIENT_INIT_ATTEMPTS + 1):
            try:
                ray.init(**kwargs)
                break
            except (ConnectionError, RuntimeError, ValueError) as exc:
                # Ray Client's proxier forks a server per client and that server can die at birth (a gRPC fork
                # race, ray-project/ray#63202, ~7 % of connections): its "Initialization failure from server"
                # is tried again; anything else is the cluster's answer.
                if "Initialization failure from server" in str(exc) and attempt < CLIENT_INIT_ATTEMPTS:
                    ray.shutdown()  # the half-made client connection
                    time.sleep(1.0)
                    continue
                where = self.address or "a local Ray"
                raise InputError(f"cannot start or reach Ray at {where}: {str(exc).splitlines()[0]}") from None
        self._started_ray = True
        workers = min(self.workers or self._fits(resources), n_jobs)
        self._actor = ray.remote(_SweepWorker)
        lanes = [self._new_lane(i) for i in range(workers)]
        self.lanes = [self._ready(lane) for lane in lanes]

    def _fits(self, resources: Resources) -> int:
        """How many workers the cluster holds at once with these resources (at least 1 of each kind asked)."""
        total = ray.cluster_resources()
        need: dict[str, float] = {}
        if resources.bundles:
            for bundle in resources.bundles:
                for key, amount in bundle.items():
                    need[key] = need.get(key, 0.0) + float(amount)
        else:
            need = {"CPU": resources.num_cpus, "GPU": resources.num_gpus}
        fits = [math.floor(total.get(key, 0.0) / amount + 1e-9) for key, amount in need.items() if amount > 0]
        count = min(fits) if fits else 1
        if count < 1:
            have = ", ".join(f"{key} {total.get(key, 0):g}" for key in need)
            raise InputError(f"the Ray cluster cannot hold one sweep worker: it needs "
                             f"{', '.join(f'{k} {v:g}' for k, v in need.items() if v > 0)} ([resources]) and the cluster "
                             f"has {have}")
        return count

    def _new_lane(self, index: int) -> _RayLane:
        res = self.resources
        options: dict[str, Any] = {"num_cpus": res.num_cpus, "num_gpus": res.num_gpus, "max_restarts": 0,
                                   "max_task_retries": 0, "max_concurrency": 1}
        group, placement = None, None
        if res.bundles:
            group = placement_group([dict(b) for b in res.bundles], strategy=res.strategy)
            ready = group.ready()
            done, _ = ray.wait([ready], timeout=PLACEMENT_TIMEOUT)
            if not done:
                remove_placement_group(group)
                raise InputError(f"Ray could not reserve the placement group {list(res.bundles)} ({res.strategy}) "
                                 f"within {PLACEMENT_TIMEOUT:g} s: the cluster lacks the resources; lower --workers "
                                 "or the bundles")
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=0, placement_group_capture_child_tasks=True)
            placement = {"id": group.id.hex(), "bundles": [dict(b) for b in res.bundles], "strategy": res.strategy,
                         "bundle": 0}
        actor = self._actor.options(**options).remote(index, res.keep_engines, placement)
        return _RayLane(index, actor, group, {"executor": "ray", "lane": index})

    def _ready(self, lane: _RayLane) -> _RayLane:
        try:
            lane.where = ray.get(lane.actor.hello.remote())
        except ray.exceptions.RayError as exc:
            raise InputError(f"a Ray sweep worker could not start: {_first_line(exc)}") from None
        return lane

    def close(self) -> None:
        super().close()
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    # -- the loop's hooks --------------------------------------------------------------------
    def _submit(self, lane: _RayLane, spec: JobSpec, attempt: int) -> Any:
        return lane.actor.run.remote(spec.to_dict(), attempt)

    def _wait(self, handles: list[Any]) -> list[Any]:
        done, _ = ray.wait(handles, num_returns=1)
        return done

    def _result(self, handle: Any) -> dict[str, Any]:
        try:
            return ray.get(handle)
        except ray.exceptions.RayError as exc:  # the actor died, its node went away, out of memory
            raise WorkerDied(_first_line(exc)) from None

    def _replace_lane(self, lane: _RayLane) -> _RayLane:
        self._close_lane(lane)
        fresh = self._ready(self._new_lane(lane.index))
        self.lanes[self.lanes.index(lane)] = fresh
        return fresh

    def _close_lane(self, lane: _RayLane) -> None:
        try:
            ray.kill(lane.actor)
        except Exception:  # already dead, or the connection is gone
            pass
        if lane.group is not None:
            try:
                remove_placement_group(lane.group)
            except Exception:
                pass


#: Connections to a Ray Client server (``ray://``) tried when its per-client server dies at start-up.
CLIENT_INIT_ATTEMPTS = 3

#: Seconds to wait for a TCP connection to a cluster's address before ``ray.init`` (which retries for minutes).
CONNECT_TIMEOUT = 10.0


def _check_reachable(address: str) -> None:
    """Raise InputError when nothing accepts a TCP connection at ``HOST:PORT`` or ``ray://HOST:PORT``.

    ``auto`` and addresses without a port are left to Ray.
    """
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT):
            pass
    except OSError as exc:
        raise InputError(f"no Ray cluster answers at --address {address} ({exc.strerror or exc}): start one "
                         "(ray start --head) or check the address") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")
