"""The GPU suite's CPU smoke (issue 40): every part of ``benchmarks/gpu_suite.py`` runs on tiny shapes, so
the one GPU run it is written for does not die on a typo.

The data are built here as ``make gpu-prep`` builds them (``gpu_suite_prep.build_data``: real tars, the
real scan -> bucket -> plan -> write stages, the Qwen2.5-VL processor folder), smoke-sized; the suite runs
in-process with ``--smoke`` (CPU, fp32) and its report is read back. What a CPU cannot run (bf16 kernels,
flash-attn, TransformerEngine) must be listed as skipped with why. The numerics part must compare each
packed sub-sample's logits with the same sub-sample run alone, and fail when they differ: an attention
that lets a pack's sub-samples see each other is run through it and must be caught.
"""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds packs with the real stages and trains a tiny model: about a minute on 2 cores

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
PARTS = ["numerics", "throughput", "cost_model", "megatron"]
LEAKY = "leaky_flash_varlen"  # "flash": transformers hands the vision tower its cu_seqlens, as for the suite's own


@pytest.fixture(scope="module")
def suite():
    """The suite's modules, imported from benchmarks/ (sys.path restored after the module's tests)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCHMARKS))
        yield {name: importlib.import_module(name) for name in ("gpu_suite", "gpu_suite_prep", "gpu_suite_attention")}


@pytest.fixture(scope="module")
def data(suite, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gpu_suite") / "data"
    prep = suite["gpu_suite_prep"]
    prep.build_data(root, prep.SHAPES["smoke"], log=lambda line: None)
    return root


@pytest.fixture(scope="module")
def smoke(suite, data, tmp_path_factory) -> tuple[int, dict, str]:
    out = tmp_path_factory.mktemp("gpu_suite_out")
    code = suite["gpu_suite"].main(["--smoke", "--data", str(data), "--out", str(out)])
    return code, json.loads((out / "gpu_suite.json").read_text()), (out / "gpu_suite.txt").read_text()


def _parts(report: dict) -> dict[str, dict]:
    return {part["name"]: part for part in report["parts"]}


def _finite(value) -> bool:
    return isinstance(value, float) and math.isfinite(value)


def test_every_part_runs_on_cpu_or_says_why_and_the_report_is_written(smoke):
    code, report, text = smoke
    assert code == 0 and report["finished"] and report["exit_code"] == 0
    assert report["environment"]["device"] == "cpu"
    assert report["environment"]["mode"].startswith("smoke")
    parts = _parts(report)
    assert list(parts) == PARTS
    assert {name: part["status"] for name, part in parts.items()} == dict.fromkeys(PARTS, "ran")
    for part in parts.values():
        assert part["failures"] == []
        assert all(": " in item and item.split(": ", 1)[1] for item in part["skipped"])  # "what: why"
    # what needs a GPU is skipped with its reason, not silently dropped
    assert any("CUDA" in item for item in parts["numerics"]["skipped"])
    assert any(item.startswith("THD training") and "CUDA" in item for item in parts["megatron"]["skipped"])
    for name in PARTS:
        assert f"[{name}] RAN" in text
    assert text.rstrip().endswith("exit 0: no part failed")


def test_numerics_compares_each_packed_sample_with_it_alone(smoke, suite):
    _, report, _ = smoke
    numerics = _parts(report)["numerics"]["results"]
    tolerance = 1e-4  # fp32 on the CPU: the packed-equivalence tests' tolerance
    model = numerics["model"]
    attentions = {key.rsplit(" ", 1)[1] for key in model}
    assert attentions == {"sdpa", suite["gpu_suite_attention"].VARLEN}
    for key, result in model.items():
        assert result["sub_samples"] >= 2, f"{key}: a pack of one sample checks nothing"
        for measure in ("packed_vs_alone", "packed_vs_fp32", "alone_vs_fp32"):
            assert _finite(result[measure]) and result[measure] < tolerance, (key, measure, result[measure])
        assert result["passed"] is True
    ran = [k for k in numerics["kernels"] if k["status"] == "ran"]
    assert {k["path"] for k in ran} == {"sdpa_block_mask", "varlen_attention[sdpa]"}
    for kernel in ran:
        assert _finite(kernel["max_abs_diff"]) and kernel["max_abs_diff"] < kernel["tolerance"] == tolerance
        assert kernel["passed"] is True


def test_throughput_and_cost_model_measure_both_arms(smoke):
    _, report, _ = smoke
    parts = _parts(report)
    throughput = parts["throughput"]["results"]
    assert sorted(int(c) for c in throughput) == [256, 512]
    for row in throughput.values():
        assert 0 < row["padded"]["slot_fill"] <= 1
        assert row["padded"]["real_tokens"] == row["packed_tokens"]  # the same samples in both arms
        for arms in row["by_attention"].values():
            for arm in ("packed", "padded"):
                assert _finite(arms[arm]["real_tokens_per_s"]) and arms[arm]["real_tokens_per_s"] > 0
    cost = parts["cost_model"]["results"]
    assert cost["ranks"] == 2 and cost["fit"]["packs"] >= 3
    assert -1 <= cost["fit"]["pearson_r"] <= 1
    for kind in ("balanced", "unbalanced"):
        for source in ("measured", "predicted"):
            assert cost["steps"][kind][source]["p99"] >= 1  # a step's slowest rank over its mean
    assert len(cost["packs"]["seconds"]) == 3 and len(cost["packs"]["pack_id"]) == cost["fit"]["packs"]  # refittable
    assert cost["steps_by_median_time"]["balanced"]["p99"] >= 1 and cost["noise_floor"]["p99"] >= 1
    targets = parts["cost_model"]["targets"]  # reported, met or not: on the CPU the clock proves nothing
    assert len(targets) == 2 and all(isinstance(t["met"], bool) for t in targets)
    assert parts["megatron"]["results"]["dry_run"]["qkv_format"] == "thd"


def test_numerics_fails_an_attention_that_lets_sub_samples_see_each_other(suite, data, tmp_path, monkeypatch):
    from transformers import AttentionInterface

    gpu_suite, varlen = suite["gpu_suite"], suite["gpu_suite_attention"].hf_varlen_attention

    def leaky(module, query, key, value, attention_mask, position_ids=None, **kwargs):
        """The suite's varlen attention without the text row's positions: a pack's text is one causal sequence,
        each sub-sample seeing those before it (the vision tower still gets its own cu_seqlens)."""
        return varlen(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setitem(AttentionInterface._global_mapping, LEAKY, leaky)
    monkeypatch.setattr(gpu_suite.Suite, "attentions", lambda self: [LEAKY])
    code = gpu_suite.main(["--smoke", "--data", str(data), "--out", str(tmp_path), "--parts", "numerics"])
    report = json.loads((tmp_path / "gpu_suite.json").read_text())
    (numerics,) = report["parts"]
    assert code == 1 and report["exit_code"] == 1
    assert numerics["status"] == "failed"
    assert any(LEAKY in failure for failure in numerics["failures"])
    (result,) = numerics["results"]["model"].values()
    assert result["passed"] is False
    assert result["packed_vs_alone"] > 1e-3  # far outside fp32 rounding: another sub-sample's tokens were seen


def test_an_arm_out_of_memory_is_skipped_with_why_not_a_failure(suite, data, tmp_path, monkeypatch):
    """A size the card cannot hold (the SDPA block mask at C = 16384 on an H100) is a measurement."""
    import torch

    throughput = importlib.import_module("gpu_suite_throughput")
    real, calls = throughput._arm, []

    def first_runs_out(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.27 GiB.")
        return real(*args, **kwargs)

    monkeypatch.setattr(throughput, "_arm", first_runs_out)
    code = suite["gpu_suite"].main(["--smoke", "--data", str(data), "--out", str(tmp_path), "--parts", "throughput"])
    part = _parts(json.loads((tmp_path / "gpu_suite.json").read_text()))["throughput"]
    assert code == 0 and part["status"] == "ran" and part["failures"] == []
    assert [item for item in part["skipped"] if "out of memory on this card" in item] == [part["skipped"][0]]
