"""Process pools that always end: a worker that cannot start stops the stage with its one-line error.

``multiprocessing.Pool`` replaces a worker whose initializer raised, forever (a missing
processor folder printed the same traceback 33 times in 40 s and never exited). Here the
initializer's failure is kept inside the worker and raised by its first task instead, so
the parent gets the real error (a ``VlmpackError``, one line) and shuts the pool down::

    parent ── submit (at most 2 x workers in flight) ──► worker: initializer(*initargs) once
                                                          (a failure is kept, not raised)
           ◄── results (plan order or as they finish) ── task: raise the kept failure, else fn(item)

Where processes fork (Linux), the initializer runs once in the parent instead, before the
pool starts: the workers inherit what it loaded (a tokenizer, copy-on-write), so N workers
cost one tokenizer load, not N loads competing for the same cores, and a failure is raised
in the parent at once.

A worker killed from outside (out of memory, ``kill -9``) ends the stage with
``WorkerDiedError``, also one line; finished shards stay committed, so a rerun resumes.
With ``workers <= 1`` everything runs in this process, through the same checks.
``stage_map`` picks this pool or Ray's (``process.executor``: ``ray_executor.ray_map``, same contract).

    for outcome in process_map(scan_shard, tasks, workers=4, initializer=init, initargs=(config,)):
        ...
"""

from __future__ import annotations

import functools
import multiprocessing
import pickle
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from .errors import ConfigError, VlmpackError

__all__ = ["WorkerStartError", "WorkerDiedError", "check_executor", "process_map", "stage_map", "start_worker"]

T = TypeVar("T")
R = TypeVar("R")

_IN_FLIGHT_PER_WORKER = 2  # tasks queued per worker: keeps every worker busy, bounds memory
_START_FAILURE: VlmpackError | None = None  # set in a worker whose initializer raised


class WorkerStartError(ConfigError):
    """A worker process could not set itself up (tokenizer, processor, missing package)."""


class WorkerDiedError(VlmpackError):
    """A worker process was killed from outside (out of memory, a signal) while it ran a task."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _as_start_error(exc: BaseException) -> VlmpackError:
    """The error the parent shows: ``VlmpackError`` s keep their type and text (on one line)."""
    if isinstance(exc, VlmpackError):
        message = _one_line(str(exc))
        try:  # keep the type (ConfigError, ...) when it survives the trip to the parent
            same = type(exc)(message)
            pickle.loads(pickle.dumps(same))
            return same
        except Exception:
            return WorkerStartError(message)
    return WorkerStartError(f"a worker process could not start: {type(exc).__name__}: {_one_line(str(exc))}")


def start_worker(initializer: Callable[..., Any] | None, initargs: tuple = ()) -> None:
    """Run ``initializer(*initargs)``; raise its failure as a one-line ``VlmpackError``."""
    if initializer is None:
        return
    try:
        initializer(*initargs)
    except Exception as exc:
        raise _as_start_error(exc) from None


def _guarded_start(initializer: Callable[..., Any] | None, initargs: tuple) -> None:
    """Pool initializer: never raises (a raising initializer makes the pool restart it forever)."""
    global _START_FAILURE
    try:
        start_worker(initializer, initargs)
    except VlmpackError as exc:
        _START_FAILURE = exc


def _call(fn: Callable[[T], R], item: T) -> R:
    if _START_FAILURE is not None:
        raise _START_FAILURE
    return fn(item)


def _context() -> multiprocessing.context.BaseContext:
    return multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")


def process_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    workers: int,
    initializer: Callable[..., Any] | None = None,
    initargs: tuple = (),
    ordered: bool = True,
    stage: str = "this stage",
    own_process: bool = False,
) -> Iterator[R]:
    """``fn`` over ``items`` in ``workers`` processes, each set up once by ``initializer(*initargs)``.

    Yields results in ``items`` order (``ordered``) or as they finish. ``fn`` and
    ``initializer`` must be module-level functions (picklable). Raises the first
    error of a task or of a worker's setup; the remaining tasks are cancelled.
    ``own_process``: even one worker runs in a process of its own, for a caller whose
    threads do other work meanwhile (they would otherwise wait on ``fn`` for the GIL); only
    where processes fork (a spawned one would import everything again first).
    """
    context = _context()
    forks = context.get_start_method() == "fork"
    if workers <= 0 or (workers == 1 and not (own_process and forks)):
        start_worker(initializer, initargs)
        yield from map(fn, items)
        return
    call = functools.partial(_call, fn)
    window = workers * _IN_FLIGHT_PER_WORKER
    source = iter(items)
    if initializer is not None and forks:
        start_worker(initializer, initargs)  # here, once: the forked workers inherit its state
        initializer, initargs = None, ()
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_guarded_start,
        initargs=(initializer, initargs),
    )
    try:
        if ordered:
            queue: deque[Future] = deque(pool.submit(call, item) for item in _take(source, window))
            while queue:
                result = queue.popleft().result()
                queue.extend(pool.submit(call, item) for item in _take(source, 1))
                yield result
        else:
            running = {pool.submit(call, item) for item in _take(source, window)}
            while running:
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    result = future.result()
                    running |= {pool.submit(call, item) for item in _take(source, 1)}
                    yield result
    except BrokenProcessPool:
        raise WorkerDiedError(
            f"a {stage} worker process died (killed by the system, out of memory?): rerun the same command "
            "to resume, with fewer process.workers if memory is short"
        ) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _take(source: Iterator[T], n: int) -> list[T]:
    out = []
    for item in source:
        out.append(item)
        if len(out) == n:
            break
    return out


def stage_map(
    process: Any,
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    workers: int,
    initializer: Callable[..., Any] | None = None,
    initargs: tuple = (),
    ordered: bool = True,
    stage: str = "this stage",
    own_process: bool = False,
) -> Iterator[R]:
    """``process_map``, or ``ray_map`` when ``process.executor`` (a ``ProcessConfig``) is ``ray``."""
    if process.executor == "ray":
        from .ray_executor import ray_map  # ray is optional: imported only when asked for

        return ray_map(fn, items, workers=process.workers, address=process.ray_address, initializer=initializer,
                       initargs=initargs, ordered=ordered, stage=stage,
                       wait_for_cpu_s=process.ray_wait_for_cpu_s)  # fmt: skip
    return process_map(fn, items, workers=workers, initializer=initializer, initargs=initargs,
                       ordered=ordered, stage=stage, own_process=own_process)  # fmt: skip


def check_executor(process: Any) -> None:
    """Before a stage touches anything: ``executor: ray`` needs ray installed (one-line ConfigError)."""
    if process.executor == "ray":
        from .ray_executor import require_ray

        require_ray()
