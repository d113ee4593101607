"""``process.executor: ray``: the stages' tasks as Ray tasks; the driver alone commits what they return.

Same contract as ``executor.process_map`` (results in item order or as they finish, a
worker set up once, one-line errors), on a Ray cluster::

    driver ── ray.init (process.ray_address | env RAY_ADDRESS | local cluster of process.workers CPUs)
           ── submit (2 x cluster CPUs in flight) ──► task: setup once per worker process, then fn(item)
           ◄── (ok, result) or (failed, VlmpackError) ── the driver commits (manifest row, marker)

* scan: one task per source shard; write: one task per chunk of packs (describe) and one per
  output shard (``RayTaskPool``, the tar written to ``.tmp`` then renamed, as the local threads do).
* A worker lost mid-task (node gone, OOM kill) is retried ``MAX_RETRIES`` times by Ray (a node removed
  mid-stage: ``tests/test_ray_cluster.py``); a task's own error is not retried, it stops the stage with its one line.
* The setup (``initializer(*initargs)``: the scan's tokenizer) runs once per worker process and
  per distinct ``initargs``: Ray reuses its worker processes across tasks, and with them the loaded counter.
  A cold worker imports the task's module (the scan's: ``stages/_scan_shard.py``) and, at setup, the
  configured family's module alone (``families/__init__.py`` imports each on first use).
* Inputs and outputs must be on a filesystem every node sees (inputs may be fsspec URLs), and
  vlmpack (with the same version) installed on every node: tasks call its functions by name.

``import ray`` happens only here; without ray installed ``executor: ray`` is a one-line ConfigError.
Test hooks (environment of the driver, never set in production):
``VLMPACK_TEST_RAY_CRASH=<item index>:<marker file>`` makes the first attempt of that task exit
(``os._exit(1)``, as a killed worker); ``VLMPACK_TEST_RAY_DIE_AFTER=<stage>:<N>`` SIGKILLs the
driver when it comes back for more after N results of that stage (N shards committed);
``VLMPACK_TEST_RAY_HOLD=<stage>:<item index>:<marker file>`` makes the first attempt of that task of
that stage do its work (a write task: its shard renamed into place), write its Ray node's id to the
marker and wait to be killed with its node (``tests/test_ray_cluster.py`` removes that node), so a
node is lost between a task's side effects and its result reaching the driver, at a point the test
knows; unkilled after ``_HOLD_S`` seconds it exits as a killed worker (a test never hangs on it).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from .errors import ConfigError, VlmpackError
from .executor import WorkerDiedError, start_worker
from .optional import require

__all__ = ["MAX_RETRIES", "ray_map", "RayTaskPool", "ensure_ray", "require_ray"]

T = TypeVar("T")
R = TypeVar("R")

MAX_RETRIES = 3  # attempts after a lost worker (Ray's own default); a task's exception is never retried
_IN_FLIGHT_PER_CPU = 2
_CRASH_HOOK = "VLMPACK_TEST_RAY_CRASH"
_DIE_HOOK = "VLMPACK_TEST_RAY_DIE_AFTER"
_HOLD_HOOK = "VLMPACK_TEST_RAY_HOLD"
_HOLD_S = 300.0

# in a worker process: initializer's qualified name -> (initargs digest, its failure or None)
_STARTED: dict[str, tuple[str, VlmpackError | None]] = {}


def require_ray():
    return require("ray", "process.executor: ray (or set process.executor: local)")


def ensure_ray(*, workers: int, address: str | None):
    """Connect once: a running ``ray.init`` is reused; else ``address`` / ``RAY_ADDRESS`` / a local cluster."""
    ray = require_ray()
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS") or None
        try:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        except ConnectionError as exc:
            raise ConfigError(
                f"cannot join the Ray cluster at {address!r}: {' '.join(str(exc).split())} "
                "(check process.ray_address / RAY_ADDRESS, or leave both unset for a local cluster)"
            ) from None
    return ray


# -- worker side ----------------------------------------------------------------------------
def _set_up(initializer: Callable[..., Any] | None, digest: str, initargs: tuple) -> None:
    """Run the initializer once per worker process and initargs; keep and re-raise its failure."""
    if initializer is None:
        return
    name = f"{initializer.__module__}.{initializer.__qualname__}"
    if _STARTED.get(name, ("", None))[0] != digest:
        try:
            start_worker(initializer, initargs)
            _STARTED[name] = (digest, None)
        except VlmpackError as exc:
            _STARTED[name] = (digest, exc)
    failure = _STARTED[name][1]
    if failure is not None:
        raise failure


def _task(fn, initializer, digest, initargs, item, hook, shared=None):
    """One Ray task: (True, fn(item)) or (False, the VlmpackError it raised), so the driver shows one line.

    ``shared`` (an object ref, resolved by Ray): ``fn(*shared, item)`` instead. ``hook``: a test
    hook's (what, marker file) for this item's first attempt, else None.
    """
    first_attempt = hook is not None and not os.path.exists(hook[1])
    if first_attempt and hook[0] == "crash":  # test hook: this attempt dies like a killed worker
        with open(hook[1], "w"):
            pass
        os._exit(1)
    try:
        _set_up(initializer, digest, initargs)
        outcome = True, (fn(item) if shared is None else fn(*shared, item))
    except VlmpackError as exc:
        outcome = False, exc
    if first_attempt and hook[0] == "hold":
        _hold(hook[1])
    return outcome


def _hold(marker: str) -> None:
    """Test hook: say on which node this attempt runs, then wait to be killed with that node."""
    import ray

    with open(marker + ".tmp", "w") as handle:
        handle.write(ray.get_runtime_context().get_node_id())
    os.replace(marker + ".tmp", marker)  # the watcher never reads half an id
    time.sleep(_HOLD_S)
    os._exit(1)


_REMOTE: dict[str, Any] = {}


def _remote(ray):
    if "task" not in _REMOTE:
        _REMOTE["task"] = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(_task)
    return _REMOTE["task"]


# -- driver side ----------------------------------------------------------------------------
def _hook_for(stage: str, index: int, *, crash_hook: bool = True) -> tuple[str, str] | None:
    """The test hook that item ``index`` of ``stage`` carries: ("crash" | "hold", marker file), else None
    (the crash hook only where ``crash_hook``: ``ray_map``'s items, as before the hold hook)."""
    crash = os.environ.get(_CRASH_HOOK) if crash_hook else None
    if crash:
        at, _, marker = crash.partition(":")
        if int(at) == index:
            return "crash", marker
    hold = os.environ.get(_HOLD_HOOK)
    if hold:
        name, at, marker = hold.split(":", 2)
        if name == stage and int(at) == index:
            return "hold", marker
    return None


def _die_after(stage: str) -> int | None:
    value = os.environ.get(_DIE_HOOK, "")
    name, _, count = value.rpartition(":")
    return int(count) if value and name == stage else None


def _maybe_die(stage: str, done: int) -> None:
    limit = _die_after(stage)
    if limit is not None and done >= limit:
        os.kill(os.getpid(), signal.SIGKILL)


_POLL_S = 1.0  # how often a waiting driver asks whether the cluster still has a CPU


def _first_ready(ray, refs: list, stage: str, wait_for_cpu_s: float | None):
    """The first of ``refs`` to finish. While none does, the cluster's CPUs are watched: with none for
    ``wait_for_cpu_s`` (every worker node lost; ``process.ray_wait_for_cpu_s``) the stage stops with one line
    instead of waiting for ever for a node that may never come. Tasks are then pending, not failed, so Ray's
    retries (``MAX_RETRIES``) never end such a wait by themselves."""
    without_cpu = None
    while True:
        ready, _ = ray.wait(refs, num_returns=1, timeout=_POLL_S)
        if ready:
            return ready[0]
        if wait_for_cpu_s is None:
            continue
        if ray.cluster_resources().get("CPU", 0) > 0:
            without_cpu = None
            continue
        without_cpu = without_cpu if without_cpu is not None else time.monotonic()
        if time.monotonic() - without_cpu >= wait_for_cpu_s:
            raise WorkerDiedError(
                f"the Ray cluster has had no CPU for {wait_for_cpu_s:g} s while {stage} tasks wait (every worker "
                "node gone?): start worker nodes and rerun the same command to resume (finished shards are kept), "
                "or raise process.ray_wait_for_cpu_s where an autoscaler starts nodes slowly"
            )


def _unwrap(ray, ref, stage: str, wait_for_cpu_s: float | None = None):
    _first_ready(ray, [ref], stage, wait_for_cpu_s)
    try:
        ok, value = ray.get(ref)
    except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
            ray.exceptions.OutOfMemoryError) as exc:  # fmt: skip
        raise WorkerDiedError(
            f"a {stage} Ray task lost its worker {MAX_RETRIES + 1} times ({type(exc).__name__}): "
            "rerun the same command to resume; check the cluster's memory and nodes"
        ) from None
    except ray.exceptions.RayTaskError as exc:  # an unforeseen error in the task: raise it as process_map does
        if isinstance(getattr(exc, "cause", None), Exception):
            raise exc.cause from exc
        raise
    if not ok:
        raise value
    return value


def ray_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    workers: int,
    address: str | None = None,
    initializer: Callable[..., Any] | None = None,
    initargs: tuple = (),
    ordered: bool = True,
    stage: str = "this stage",
    wait_for_cpu_s: float | None = None,
) -> Iterator[R]:
    """``executor.process_map`` on Ray: ``fn(item)`` per item as one task, results to the driver."""
    ray = ensure_ray(workers=workers, address=address)
    task = _remote(ray)
    digest = hashlib.sha256(pickle.dumps(initargs)).hexdigest() if initializer else ""
    args_ref = ray.put(initargs)  # sent once, not per task
    window = max(workers, int(ray.cluster_resources().get("CPU", 1))) * _IN_FLIGHT_PER_CPU
    numbered = enumerate(items)

    def submit(n: int):
        out = []
        for index, item in numbered:
            out.append(task.remote(fn, initializer, digest, args_ref, item, _hook_for(stage, index)))
            if len(out) == n:
                break
        return out

    running = deque(submit(window))
    done = 0
    try:
        while running:
            if ordered:
                ref = running.popleft()
            else:
                ref = _first_ready(ray, list(running), stage, wait_for_cpu_s)
                running.remove(ref)
            result = _unwrap(ray, ref, stage, wait_for_cpu_s)
            running.extend(submit(1))
            yield result
            done += 1
            _maybe_die(stage, done)
    finally:
        for ref in running:
            ray.cancel(ref, force=True)


class RayTaskPool:
    """``submit(item)`` runs ``fn(*shared, item)`` as a Ray task; ``shared`` is sent to the cluster once.

    Futures answer ``result()``, as ``concurrent.futures`` ones do (write's shard writers).
    """

    def __init__(self, fn: Callable[..., R], shared: tuple, *, workers: int, address: str | None, stage: str,
                 wait_for_cpu_s: float | None = None):  # fmt: skip
        self._ray = ensure_ray(workers=workers, address=address)
        self._task = _remote(self._ray)
        self._fn, self._stage, self._wait_for_cpu_s = fn, stage, wait_for_cpu_s
        self._shared = self._ray.put(shared)
        self._submitted: list = []

    def submit(self, item) -> _RayFuture:
        limit = _die_after(self._stage)
        if limit is not None and len(self._submitted) >= limit:  # test hook: die with N tasks finished
            self._ray.wait(self._submitted, num_returns=len(self._submitted))
            _maybe_die(self._stage, len(self._submitted))
        hook = _hook_for(self._stage, len(self._submitted), crash_hook=False)
        ref = self._task.remote(self._fn, None, "", (), item, hook, self._shared)
        self._submitted.append(ref)
        return _RayFuture(self._ray, ref, self._stage, self._wait_for_cpu_s)

    def __enter__(self) -> RayTaskPool:
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:
            for ref in self._submitted:
                self._ray.cancel(ref, force=True)


class _RayFuture:
    def __init__(self, ray, ref, stage: str, wait_for_cpu_s: float | None) -> None:
        self._ray, self._ref, self._stage, self._wait_for_cpu_s = ray, ref, stage, wait_for_cpu_s

    def result(self):
        return _unwrap(self._ray, self._ref, self._stage, self._wait_for_cpu_s)
