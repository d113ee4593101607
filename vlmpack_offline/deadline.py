"""A time budget for one piece of work in this process: ``TooSlow`` is raised into it when the budget runs out.

The scan reads and counts each sample under ``process.max_seconds_per_sample``, so no single sample
holds its shard (and with it the run) longer than that: a sample that takes longer is dropped as
``too_slow`` and the worker moves on. The clock is the process's real-time interval timer
(``SIGALRM``), which interrupts Python code wherever it runs (a template render, a span search, a
JSON parse) and C code when it returns to Python: one C call on a huge input (the tokenizer on a
single multi-megabyte message) runs to its end first. Past the budget the timer keeps firing every
``_REPEAT`` seconds until the block ends, so an interrupt that lands in a finalizer (where Python
drops exceptions) is not the last one. It needs the main thread of a POSIX process:
the local executor's workers and Ray's task workers are; elsewhere (a thread) the budget is not
enforced and ``limit`` says so once.

Whether a sample is ``too_slow`` depends on the machine, so it is the one documented exception to
byte-identical artifacts (DESIGN, "Time budgets vs determinism").
"""

from __future__ import annotations

import functools
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["TooSlow", "limit"]

log = logging.getLogger(__name__)
_warned = False


class TooSlow(BaseException):  # noqa: N818 - like KeyboardInterrupt: no `except Exception` may swallow it
    """The work ran past its budget (raised from the timer's signal handler)."""


_REPEAT = 0.25  # seconds: past the budget the timer fires again until the block has ended
_state = threading.local()


def _raise(signum, frame) -> None:
    """Raise ``TooSlow`` into the running code, unless the budget is over or the code is a finalizer or the
    hook Python hands a dropped exception to: an exception raised in ``__del__`` is printed and dropped, and
    one raised inside ``sys.unraisablehook`` (pytest installs one in Python) breaks that hook; the next tick
    tries again once they have ended."""
    if not getattr(_state, "active", False):
        return
    hook = _code_of(sys.unraisablehook)
    while frame is not None:
        if frame.f_code.co_name == "__del__" or frame.f_code is hook:
            return
        frame = frame.f_back
    raise TooSlow


def _code_of(function) -> object:
    """The Python code object of ``function`` (through ``functools.partial``), or None for C functions."""
    while isinstance(function, functools.partial):
        function = function.func
    return getattr(function, "__code__", None)


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
    _state.active = True
    signal.setitimer(signal.ITIMER_REAL, seconds, _REPEAT)  # fires again until cleared: a swallowed one is not the end
    try:
        yield
    finally:
        while True:  # a tick may land in here too: retry until the timer is off (the budget is over)
            try:
                _state.active = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
                break
            except TooSlow:
                continue
