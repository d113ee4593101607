"""No single sample holds a worker: past ``process.max_seconds_per_sample`` it is dropped as ``too_slow``.

The slow sample is real (``_slow_input``: 3,000 turns whose text keeps them on the turn-by-turn span
search, many minutes of work); the budget is 2 s. Only the budget can end that work in a test's time,
so no test reads a clock: a scan that ends with the sample dropped ``too_slow``, its reason and budget
in its row and the samples around it counted, is a budget that stopped it. (A broken budget shows as a
run of many minutes that then fails, not as a flaky bound on a busy machine.)

The timer interrupts only the sample's own work: CPython runs some code on its own behalf between any
two bytecodes (garbage-collector callbacks, finalizers, weak references' callbacks, the hook a dropped
exception goes to), and an exception raised there is dropped as "Exception ignored in ..." with that
code's cleanup cut short. Each such kind below is made to run across the budget's end; it must run to
its end, no exception may be dropped, and the block must still be interrupted by a later tick.
"""

from __future__ import annotations

import functools
import gc
import io
import signal
import sys
import time
import weakref

import pytest
from _slow_input import shard_with_one_slow_sample, slow_sample

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.deadline import TooSlow, handler, limit
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.stages import scan
from vlmpack_offline.synthetic.shards import write_shard

BUDGET = 2.0
HANG_GUARD_S = 120  # a block that is never interrupted fails here instead of hanging the suite


def _scan(tmp_path, processor_dir, **process):
    config = config_from_dict({
        "data": {"wds_dir": str(tmp_path / "src"), "work_dir": str(tmp_path / "work"),
                 "packed_wds_dir": str(tmp_path / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
        "process": {"max_seconds_per_sample": BUDGET} | process,
        "scan": {"max_drop_ratio": 1.0},
    }, source="test")  # fmt: skip
    result = scan.run(config)
    with Manifest(manifest_path(config.work_dir)) as manifest:
        rows = {row.key: (row.status, row.error) for row in manifest.iter_samples()}
    return rows, result


@pytest.mark.parametrize("workers", [1, 2])
def test_a_sample_past_its_budget_is_dropped_and_the_worker_moves_on(tmp_path, qwen25_processor_dir, workers):
    shard_with_one_slow_sample(tmp_path / "src" / "part-000.tar")
    rows, result = _scan(tmp_path, qwen25_processor_dir, workers=workers)
    assert {key: status for key, (status, _) in rows.items()} == {"before": "ok", "slow": "too_slow", "after": "ok"}
    assert "process.max_seconds_per_sample (2 s)" in rows["slow"][1]
    assert result.counts["dropped_too_slow"] == 1, result.counts


@pytest.mark.parametrize("value", [0, -1.5])
def test_a_budget_that_is_not_positive_is_a_config_error(value):
    with pytest.raises(ConfigError, match=r"process\.max_seconds_per_sample must be > 0"):
        config_from_dict({"process": {"max_seconds_per_sample": value}}, source="test.yaml")


def test_a_rerun_with_a_larger_budget_counts_the_too_slow_samples_again(tmp_path, qwen25_processor_dir):
    shard_with_one_slow_sample(tmp_path / "src" / "part-000.tar")
    rows, _ = _scan(tmp_path, qwen25_processor_dir)
    assert rows["slow"][0] == "too_slow"
    again, result = _scan(tmp_path, qwen25_processor_dir, max_seconds_per_sample=1.0)  # smaller: nothing to redo
    assert again == rows and result.skipped
    done, result = _scan(tmp_path, qwen25_processor_dir, max_seconds_per_sample=3.0)  # larger: counted again
    assert not result.skipped and done["before"] == rows["before"]
    assert done["slow"][0] == "too_slow" and "(3 s)" in done["slow"][1]  # (it needs minutes; 3 s is still short)
    assert _scan(tmp_path, qwen25_processor_dir, max_seconds_per_sample=3.0)[1].skipped  # and then up to date


def test_a_run_of_budgets_holds_the_handler_once_and_gives_the_previous_one_back():
    """The scan holds the timer's handler once per shard (``handler()``); each sample's budget only arms the timer,
    still interrupts its sample, and leaves no timer running; the handler installed before comes back as it was."""

    def theirs(signum, frame):  # what the process had installed before the scan
        pass

    before = signal.signal(signal.SIGALRM, theirs)
    try:
        with handler():
            held = signal.getsignal(signal.SIGALRM)
            assert held is not theirs
            with pytest.raises(TooSlow), limit(0.1):
                _work_that_never_ends()
            with limit(60):
                pass
            assert signal.getsignal(signal.SIGALRM) is held  # the budgets left it to the block
            assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # and no timer runs between them
        assert signal.getsignal(signal.SIGALRM) is theirs
        with pytest.raises(TooSlow), limit(0.1):  # a budget outside a block installs and restores it itself
            _work_that_never_ends()
        assert signal.getsignal(signal.SIGALRM) is theirs
    finally:
        signal.signal(signal.SIGALRM, before)


def test_a_budget_inside_a_budget_is_refused_and_the_outer_one_still_fires():
    with pytest.raises(TooSlow), limit(0.1):
        with pytest.raises(RuntimeError, match="budgets do not nest"), limit(60):
            pass
        _work_that_never_ends()
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_budget_past_the_timers_range_is_a_config_error():
    with pytest.raises(ConfigError, match=r"at most 1e\+07 seconds, or null for no budget; got inf"):
        config_from_dict({"process": {"max_seconds_per_sample": float("inf")}}, source="test.yaml")


class _SlowCleanup:
    """Cleanup that is still running when the budget fires: busy until the timer has fired and repeated twice.

    The timer is real time, so a busy machine delays when a tick is handled, never that it fires in here."""

    def __init__(self) -> None:
        self.finished = 0  # times it ran to its end

    def __call__(self, *_) -> None:
        if self.finished:
            return
        to_next_tick, repeat = signal.getitimer(signal.ITIMER_REAL)
        end = time.monotonic() + to_next_tick + 2 * repeat
        while time.monotonic() < end:
            pass
        self.finished += 1


def _work_that_never_ends() -> None:
    """The sample's own work: only the budget can end it."""
    end = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < end:
        pass
    pytest.fail(f"the budget never interrupted the block ({HANG_GUARD_S} s)")


class _Target:
    """Something to drop (a plain instance: weak references to it are allowed)."""


def _gc_callback(cleanup) -> None:
    def callback(phase, info):  # what hypothesis installs to time collections
        cleanup()

    gc.callbacks.append(callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(callback)


def _finalizer(cleanup) -> None:
    class Holder:
        def __del__(self):
            cleanup()

    Holder()


def _finalizer_under_another_name(cleanup) -> None:
    class Handle:
        def release(self):
            cleanup()

        __del__ = release

    Handle()


def _file_closed_by_its_finalizer(cleanup) -> None:
    class Stream(io.RawIOBase):  # io.IOBase's finalizer (in C) calls close()
        def close(self):
            cleanup()
            super().close()

    Stream()


def _weak_reference_callback(cleanup) -> None:
    target = _Target()
    ref = weakref.ref(target, lambda dead: cleanup())
    del target
    assert ref() is None


def _weakref_finalize(cleanup) -> None:
    target = _Target()
    weakref.finalize(target, cleanup)
    del target


def _generator_closed_as_it_is_dropped(cleanup) -> None:
    def lines():
        try:
            yield "first"
        finally:  # CPython throws GeneratorExit in here when the generator is dropped half-read
            cleanup()

    next(lines())


RUN_BY_PYTHON = {
    "gc callback": _gc_callback,
    "__del__": _finalizer,
    "__del__ under another name": _finalizer_under_another_name,
    "io.IOBase finalizer": _file_closed_by_its_finalizer,
    "weakref callback": _weak_reference_callback,
    "weakref.finalize": _weakref_finalize,
    "generator close": _generator_closed_as_it_is_dropped,
}


@pytest.mark.parametrize("run_by_python", RUN_BY_PYTHON.values(), ids=RUN_BY_PYTHON)
def test_code_python_runs_on_its_own_behalf_is_not_interrupted_and_the_block_still_is(monkeypatch, run_by_python):
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: dropped.append(unraisable.exc_type))
    cleanup = _SlowCleanup()
    with pytest.raises(TooSlow), limit(0.1):
        run_by_python(cleanup)
        _work_that_never_ends()
    assert cleanup.finished == 1  # the cleanup ran to its end, though the budget fired in it
    assert dropped == []  # and no TooSlow was dropped as "Exception ignored in ..."


def test_the_cleanup_the_interrupt_runs_on_its_way_out_is_not_interrupted_again():
    """A later tick raised into a ``finally`` that the first one started would cut that cleanup short."""
    cleanup = _SlowCleanup()
    with pytest.raises(TooSlow) as raised, limit(0.1):
        try:
            _work_that_never_ends()
        finally:
            cleanup()  # the timer keeps firing in here
    assert cleanup.finished == 1 and raised.value.__context__ is None  # the first interrupt, not a second one


def test_a_budget_entered_while_handling_an_interrupt_still_fires():
    """The scan counts a batch's samples alone inside ``except TooSlow`` (``_scan_shard``): that handled
    interrupt is not this budget's own, so its ticks are raised."""
    with pytest.raises(TooSlow), limit(0.1):
        _work_that_never_ends()
    try:
        raise TooSlow
    except TooSlow:
        with pytest.raises(TooSlow), limit(0.1):
            _work_that_never_ends()


def test_a_tick_never_lands_in_the_hook_python_hands_a_dropped_exception_to(monkeypatch):
    """pytest (or a user) installs ``sys.unraisablehook`` in Python; a tick raised inside it would break it."""
    seen = []

    def hook(unraisable, *, sink):
        _SlowCleanup()()  # the budget fires in here
        sink.append(unraisable.exc_type)

    class DropsAnError:
        def __del__(self):
            raise ValueError("dropped by Python, handed to the hook")

    monkeypatch.setattr(sys, "unraisablehook", functools.partial(hook, sink=seen))
    with pytest.raises(TooSlow), limit(0.1):
        DropsAnError()
        _work_that_never_ends()
    assert seen == [ValueError]


def test_a_gc_callback_the_budget_fires_in_does_not_stop_the_scan_dropping_the_slow_sample(
    tmp_path, qwen25_processor_dir, monkeypatch
):
    """The CI failure: hypothesis' gc callback (timing collections) got the scan's ``TooSlow``, dropped."""
    write_shard(tmp_path / "src" / "part-000.tar", [slow_sample()])  # every budget in this scan is its own
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: dropped.append(unraisable.exc_type))
    cleanup = _SlowCleanup()

    def callback(phase, info):
        if phase == "start" and signal.getitimer(signal.ITIMER_REAL)[0] > 0:  # a collection inside a budget
            cleanup()

    gc.callbacks.append(callback)
    try:
        rows, _ = _scan(tmp_path, qwen25_processor_dir, workers=1)  # one worker: this process, this callback
    finally:
        gc.callbacks.remove(callback)
    assert {key: status for key, (status, _) in rows.items()} == {"slow": "too_slow"}
    assert cleanup.finished == 1 and dropped == []
