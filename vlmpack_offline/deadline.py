"""A time budget for one piece of work in this process: ``TooSlow`` is raised into it when the budget runs out.

The scan reads and counts each sample under ``process.max_seconds_per_sample``, so no single sample
holds its shard (and with it the run) longer than that: a sample that takes longer is dropped as
``too_slow`` and the worker moves on. The clock is the process's real-time interval timer
(``SIGALRM``), which interrupts Python code wherever it runs (a template render, a span search, a
JSON parse) and C code when it returns to Python. It needs the main thread of a POSIX process:
the local executor's workers and Ray's task workers are; elsewhere (a thread) the budget is not
enforced and ``limit`` says so once.

Whether a sample is ``too_slow`` depends on the machine, so it is the one documented exception to
byte-identical artifacts (DESIGN, "Time budgets vs determinism").
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["TooSlow", "limit"]

log = logging.getLogger(__name__)
_warned = False


class TooSlow(BaseException):  # noqa: N818 - like KeyboardInterrupt: no `except Exception` may swallow it
    """The work ran past its budget (raised from the timer's signal handler)."""


def _raise(signum, frame) -> None:
    raise TooSlow


@contextmanager
def limit(seconds: float | None) -> Iterator[None]:
    """Run the block under a budget of ``seconds`` (None or <= 0: no budget). Budgets do not nest."""
    global _warned
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not seconds or seconds <= 0 or not usable:
        if seconds and not usable and not _warned:
            log.warning("process.max_seconds_per_sample is not enforced here (not the main thread of a POSIX "
                        "process): a sample can take as long as it takes")
            _warned = True
        yield
        return
    previous = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
