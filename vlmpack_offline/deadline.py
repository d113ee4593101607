"""A time budget for one piece of work in this process: ``TooSlow`` is raised into it when the budget runs out.

The scan reads and counts each sample under ``process.max_seconds_per_sample``, so no single sample
holds its shard (and with it the run) longer than that: a sample that takes longer is dropped as
``too_slow`` and the worker moves on. The clock is the process's real-time interval timer
(``SIGALRM``), which interrupts Python code wherever it runs (a template render, a span search, a
JSON parse) and C code when it returns to Python: one C call on a huge input (the tokenizer on a
single multi-megabyte message) runs to its end first. Past the budget the timer keeps firing every
``_REPEAT`` seconds until the block ends. It needs the main thread of a POSIX process: the local
executor's workers and Ray's task workers are; elsewhere (a thread) the budget is not enforced and
``limit`` says so once. A run of budgets (the scan: one per sample of a shard) is entered inside one
``handler()`` block, which installs the timer's handler once and gives the previous one back at its end;
each budget then only arms and clears the timer.

Only the work's own code is interrupted. Between any two bytecodes of the work, CPython may run code
on its own behalf: a garbage-collector callback (``gc.callbacks``: hypothesis installs one), a
finalizer (``__del__``, the ``close`` that ``io.IOBase``'s finalizer calls, a generator closed as it is
dropped), a weak reference's callback (``weakref.finalize``'s among them), the hook it hands a dropped
exception to (``sys.unraisablehook``). An exception raised there never reaches the work: CPython
prints it as "Exception ignored in ..." and drops it, and that code's cleanup stops halfway. A tick that
lands in such code, or in the cleanup that this block's interrupt runs on its way out (a ``finally``,
an ``__exit__``), is not raised; the next one is, once that code has returned (``_in_cleanup``).

Whether a sample is ``too_slow`` depends on the machine, so it is the one documented exception to
byte-identical artifacts (DESIGN, "Time budgets vs determinism").
"""

from __future__ import annotations

import _signal
import functools
import gc
import io
import logging
import signal
import sys
import threading
import types
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["TooSlow", "handler", "limit"]

log = logging.getLogger(__name__)
_warned = False


class TooSlow(BaseException):  # noqa: N818 - like KeyboardInterrupt: no `except Exception` may swallow it
    """The work ran past its budget (raised from the timer's signal handler)."""


_REPEAT = 0.25  # seconds: past the budget the timer fires again until the block has ended
_TIMER = hasattr(signal, "setitimer")  # POSIX: the interval timer exists


@dataclass(slots=True, kw_only=True)
class _Block:
    """The budgeted block now running (budgets do not nest; signal handlers run in the main thread only)."""

    entered: types.FrameType | None  # the frame of the `with limit(...)`: a tick's walk up its frames stops there
    handled: BaseException | None  # the exception already being handled when the block began: not its cleanup
    raised: TooSlow | None = None  # the interrupt raised into the block, once it has been


_block: _Block | None = None


def _class_attribute(owner: type, name: str) -> object:
    """``owner.name`` as the class dictionaries hold it (no descriptor, no ``__getattr__``: no Python code runs)."""
    return next((vars(k)[name] for k in owner.__mro__ if name in vars(k)), None)


_IOBASE_FINALIZER = _class_attribute(io.IOBase, "__del__")  # in C (_io._IOBase): it calls self.close()


def _raise(signum, frame) -> None:
    """Raise ``TooSlow`` into the running code, unless the budget is over, the tick lands in the budget's own
    start or end (``limit``), or the code runs on CPython's own behalf (``_in_cleanup``); the next tick tries
    again."""
    block = _block
    if block is None or (frame is not None and frame.f_code in _OWN) or _in_cleanup(frame, block):
        return
    block.raised = TooSlow()
    raise block.raised


def _in_cleanup(frame: types.FrameType | None, block: _Block) -> bool:
    """Whether the interrupted code (``frame`` up to the block's own) is code that CPython runs on its own
    behalf, where a raised exception is dropped (see the module doc), or the cleanup of the block's interrupt.

    The exception being handled tells a generator closed as it is dropped (``GeneratorExit``, which CPython
    throws into it) and a ``finally`` run by the interrupt itself; the frames tell the rest: the code of a
    ``gc.callbacks`` entry or of ``sys.unraisablehook``, and a frame whose arguments say who called it
    (``_finalizes``)."""
    handled = sys.exc_info()[1]
    if handled is not block.handled and (isinstance(handled, GeneratorExit) or handled is block.raised):
        return True
    hooks = {_code_of(hook) for hook in (*gc.callbacks, sys.unraisablehook)}
    while frame is not None and frame is not block.entered:
        if frame.f_code in hooks or frame.f_code.co_name == "__del__" or _finalizes(frame):
            return True
        frame = frame.f_back
    return False


def _finalizes(frame: types.FrameType) -> bool:
    """Whether ``frame`` is a finalizer or a weak reference's callback, told by its arguments: a dead weak
    reference (CPython hands one to the callback once the referent has gone: ``weakref.ref``'s callback, a
    ``weakref.finalize``), or a ``self`` whose class finalizes through this code (``__del__`` under another
    name, as ``__del__ = close``; ``close`` where the finalizer is ``io.IOBase``'s)."""
    code = frame.f_code
    if not code.co_argcount:
        return False
    local = frame.f_locals
    arguments = [local.get(name) for name in code.co_varnames[: code.co_argcount]]
    if any(issubclass(type(a), weakref.ReferenceType) and a() is None for a in arguments):
        return True
    owner = type(arguments[0])
    finalizer = _class_attribute(owner, "__del__")
    if finalizer is _IOBASE_FINALIZER:
        finalizer = _class_attribute(owner, "close")
    return finalizer is not None and _code_of(finalizer) is code


def _code_of(function: object) -> types.CodeType | None:
    """The code object that calling ``function`` runs (through ``functools.partial``, bound methods and a
    callable object's ``__call__``), or None for C functions."""
    for _ in range(8):  # a partial of a bound method of a callable object ... is a handful of steps deep
        if isinstance(function, types.FunctionType):
            return function.__code__
        if isinstance(function, functools.partial):
            function = function.func
        elif isinstance(function, types.MethodType):
            function = function.__func__
        else:
            function = _class_attribute(type(function), "__call__")  # a C function's is a slot wrapper: None
    return None


def _usable() -> bool:
    """The timer can interrupt here: a POSIX process's main thread (signal handlers run there only)."""
    return _TIMER and threading.current_thread() is threading.main_thread()


_installed = False  # a ``handler()`` block holds the SIGALRM handler: a budget inside it only arms the timer


@contextmanager
def handler() -> Iterator[None]:
    """Hold the budgets' SIGALRM handler for a run of budgets (the scan: one shard's samples), and give the
    previous handler back when the block ends.

    A ``limit`` inside then only arms and clears the timer (two system calls, not four: the scan enters one
    budget per sample); outside one, each ``limit`` installs and restores the handler itself. Between budgets
    the handler does nothing (no budget is running), so a tick delivered after a budget ended is dropped."""
    global _installed
    if _installed or not _usable():
        yield
        return
    previous = _signal.signal(signal.SIGALRM, _raise)  # (_signal: see limit.__enter__)
    _installed = True
    try:
        yield
    finally:
        _installed = False
        _signal.signal(signal.SIGALRM, previous)


class limit:  # noqa: N801 - read as a function: `with limit(seconds):`
    """Run the block under a budget of ``seconds`` (None or <= 0: no budget). Budgets do not nest: entering
    one inside another raises RuntimeError (the inner one would end the outer one's timer).

    A class, not a ``@contextmanager`` generator: the scan enters one per sample, and a generator's set-up
    cost more than the timer's system calls."""

    __slots__ = ("_seconds", "_restores", "_previous")

    def __init__(self, seconds: float | None) -> None:
        self._seconds = seconds  # None once entered without a budget: nothing to end
        self._restores = False  # whether this budget installed the handler (no handler() block held it) ...
        self._previous = None  # ... and the one it gives back

    def __enter__(self) -> None:
        global _warned, _block
        seconds = self._seconds
        usable = _usable()
        if not seconds or seconds <= 0 or not usable:
            if seconds and not usable and not _warned:
                log.warning("process.max_seconds_per_sample is not enforced here (not the main thread of a POSIX "
                            "process): a sample can take as long as it takes")
                _warned = True
            self._seconds = None
            return
        if _block is not None:
            raise RuntimeError("deadline.limit: a budget inside another budget (budgets do not nest); end the "
                               "outer one first")  # fmt: skip
        if not _installed:
            # _signal.signal: signal.signal less its conversion of the handlers to enums, which cost more than the
            # rest of this set-up; the previous handler goes back as it came
            self._previous, self._restores = _signal.signal(signal.SIGALRM, _raise), True
        # sys._getframe(1): the frame of the `with` statement (a tick's walk up the frames stops there)
        _block = _Block(entered=sys._getframe(1), handled=sys.exc_info()[1])
        signal.setitimer(signal.ITIMER_REAL, seconds, _REPEAT)  # fires again until cleared: a swallowed one is not the end

    def __exit__(self, *exc_info) -> None:
        global _block
        if self._seconds is None:
            return
        while True:  # a tick may land in here too: retry until the timer is off (the budget is over)
            try:
                _block = None
                signal.setitimer(signal.ITIMER_REAL, 0)
                if self._restores:
                    _signal.signal(signal.SIGALRM, self._previous)
                break
            except TooSlow:
                continue


# a tick that lands in a budget's own start or end is not raised there (``_raise``): __exit__ would leave the timer
# running, __enter__ the block set; the next tick is raised into the block, or finds the budget over
_OWN = (limit.__enter__.__code__, limit.__exit__.__code__)
