"""No single sample holds a worker: past ``process.max_seconds_per_sample`` it is dropped as ``too_slow``.

The slow sample is real (``_slow_input``: 3,000 turns whose text keeps them on the quadratic span
search, about a minute of work); the budget is 2 s, so the scan ends in seconds with that sample
dropped, its reason and the budget in its row, and the samples around it counted.
"""

from __future__ import annotations

import time

import pytest
from _slow_input import shard_with_one_slow_sample

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.stages import scan

BUDGET = 2.0


def _scan(tmp_path, processor_dir, **process):
    config = config_from_dict({
        "data": {"wds_dir": str(tmp_path / "src"), "work_dir": str(tmp_path / "work"),
                 "packed_wds_dir": str(tmp_path / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
        "process": {"max_seconds_per_sample": BUDGET} | process,
        "scan": {"max_drop_ratio": 1.0},
    }, source="test")  # fmt: skip
    started = time.perf_counter()
    result = scan.run(config)
    with Manifest(manifest_path(config.work_dir)) as manifest:
        rows = {row.key: (row.status, row.error) for row in manifest.iter_samples()}
    return rows, result, time.perf_counter() - started


@pytest.mark.parametrize("workers", [1, 2])
def test_a_sample_past_its_budget_is_dropped_and_the_worker_moves_on(tmp_path, qwen25_processor_dir, workers):
    shard_with_one_slow_sample(tmp_path / "src" / "part-000.tar")
    rows, result, seconds = _scan(tmp_path, qwen25_processor_dir, workers=workers)
    assert {key: status for key, (status, _) in rows.items()} == {"before": "ok", "slow": "too_slow", "after": "ok"}
    assert "process.max_seconds_per_sample (2 s)" in rows["slow"][1]
    assert result.counts["dropped_too_slow"] == 1, result.counts
    # budget + the batch's share (a quarter of it) + start-up, far from the minute the sample needs
    assert seconds < 20, seconds


@pytest.mark.parametrize("value", [0, -1.5])
def test_a_budget_that_is_not_positive_is_a_config_error(value):
    with pytest.raises(ConfigError, match=r"process\.max_seconds_per_sample must be > 0"):
        config_from_dict({"process": {"max_seconds_per_sample": value}}, source="test.yaml")


def test_a_rerun_with_a_larger_budget_counts_the_too_slow_samples_again(tmp_path, qwen25_processor_dir):
    shard_with_one_slow_sample(tmp_path / "src" / "part-000.tar")
    rows, _, _ = _scan(tmp_path, qwen25_processor_dir)
    assert rows["slow"][0] == "too_slow"
    again, result, _ = _scan(tmp_path, qwen25_processor_dir, max_seconds_per_sample=1.0)  # smaller: nothing to redo
    assert again == rows and result.skipped
    done, result, _ = _scan(tmp_path, qwen25_processor_dir, max_seconds_per_sample=3.0)  # larger: counted again
    assert not result.skipped and done["before"] == rows["before"]
    assert done["slow"][0] == "too_slow" and "(3 s)" in done["slow"][1]  # (it needs a minute; 3 s is still short)
    assert _scan(tmp_path, qwen25_processor_dir, max_seconds_per_sample=3.0)[1].skipped  # and then up to date


def test_a_budget_past_the_timers_range_is_a_config_error():
    with pytest.raises(ConfigError, match=r"at most 1e\+07 seconds, or null for no budget; got inf"):
        config_from_dict({"process": {"max_seconds_per_sample": float("inf")}}, source="test.yaml")


def test_a_tick_never_lands_in_the_hook_python_hands_a_dropped_exception_to(monkeypatch):
    """pytest (or a user) installs ``sys.unraisablehook`` in Python; a tick raised inside it would break it."""
    import functools
    import sys
    import time

    from vlmpack_offline.deadline import TooSlow, limit

    seen = []

    def hook(unraisable, *, sink):
        time.sleep(0.6)  # several ticks land in here
        sink.append(unraisable.exc_type)

    class DropsAnError:
        def __del__(self):
            raise ValueError("dropped by Python, handed to the hook")

    monkeypatch.setattr(sys, "unraisablehook", functools.partial(hook, sink=seen))
    with pytest.raises(TooSlow), limit(0.1):
        DropsAnError()
        while True:
            pass
    assert seen == [ValueError]
