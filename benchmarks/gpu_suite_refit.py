"""The GPU suite's cost-model figures, refitted off the device from a report's per-pack times.

    python benchmarks/gpu_suite_refit.py benchmarks/results/gpu_suite_h100_2026-11-27.json

The report's cost_model part holds each pack's plan cost and its times in every timed run
(``gpu_suite_balance``). The data are rebuilt here (``gpu_suite_prep.build_data``: deterministic,
checked against the report's costs pack by pack) with the stages' folders kept, so each pack's
cost terms can be summed: tokens, squared lengths, vision patches, squared attention blocks
(``packing/cost.py``). It prints, for the pack times' median and minimum over the runs:

* the plan's cost vs time (Pearson r), and each term's r alone;
* a least-squares fit of time on the four terms plus a constant, cross-validated (fitted on one
  half of the packs, judged on the other): how far a cost model calibrated on this card could go;
* step balance for R ranks, one pack each per step, judged by measured times: the plan's own
  schedule (``schedule.balance`` on the plan's costs), the calibrated costs' schedule, and the
  clock's noise floor (packs scheduled by their times in one run, judged by another run's).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from gpu_suite_balance import balance, noise_floor  # noqa: E402
from gpu_suite_prep import SHAPES, build_data  # noqa: E402

from vlmpack_offline.plan_file import read_plan_arrays  # noqa: E402
from vlmpack_offline.schedule import balance as schedule  # noqa: E402

TERMS = ("tokens", "length^2", "patches", "block^2")


def term_sums(work: Path, plan_dir: Path, pack_ids: np.ndarray) -> np.ndarray:
    """[packs, 4]: each pack's sum of the cost model's four per-sample terms (the bucket stage's arrays)."""
    bins = work / "bins"
    length = np.load(bins / "lengths.npy").astype(np.float64)
    per_sample = np.stack([length, length**2, np.load(bins / "encoder_patches.npy").astype(np.float64),
                           np.load(bins / "encoder_attention.npy").astype(np.float64)], axis=1)  # fmt: skip
    plan = np.load(plan_dir / "pack_plan.npz")
    offsets, members = plan["pack_offsets"], plan["sample_index"]
    return np.stack([per_sample[members[offsets[p] : offsets[p + 1]]].sum(axis=0) for p in pack_ids])


def step_p99(costs: np.ndarray, judge: np.ndarray, ranks: int, seeds: int = 20) -> float:
    """Median over ``seeds`` schedules by ``costs`` of the p99 step max / mean in ``judge`` times."""
    p99 = [balance(judge[schedule(costs, ranks, 1, 1, np.random.default_rng(s))[0]].reshape(ranks, -1))["p99"]
           for s in range(seeds)]  # fmt: skip
    return float(np.median(p99))


def cross_validated(terms: np.ndarray, seconds: np.ndarray, seed: int = 0) -> np.ndarray:
    """Each pack's time predicted by a least-squares fit (four terms + a constant) on the other half's packs."""
    features = np.c_[terms, np.ones(len(terms))]
    order = np.random.default_rng(seed).permutation(len(terms))
    halves = (order[: len(order) // 2], order[len(order) // 2 :])
    predicted = np.empty(len(terms))
    for fit_on, judge in (halves, halves[::-1]):
        coefficients, *_ = np.linalg.lstsq(features[fit_on], seconds[fit_on], rcond=None)
        predicted[judge] = features[judge] @ coefficients
    return predicted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="a gpu_suite.json whose cost_model part holds per-pack times")
    args = parser.parse_args(argv)
    report = json.loads(args.report.read_text())
    part = next(p for p in report["parts"] if p["name"] == "cost_model")
    results = part["results"]
    if "packs" not in results:
        print(f"{args.report}: its cost_model part has no per-pack times (a suite older than this script)")
        return 2
    pack_ids = np.array(results["packs"]["pack_id"])
    cost = np.array(results["packs"]["cost_flop"])
    runs = np.array(results["packs"]["seconds"])
    capacity, ranks = results["capacity"], results["ranks"]
    with tempfile.TemporaryDirectory(prefix="gpu_suite_refit_") as scratch:
        root = Path(scratch)
        build_data(root / "data", SHAPES[report["environment"]["model_size"]], log=lambda line: None, work=root / "work")
        plan_dir = root / "data" / f"c{capacity}" / "plan"
        if not np.array_equal(read_plan_arrays(plan_dir).cost[pack_ids], cost):
            print("the rebuilt plan's costs differ from the report's: not the data the report timed")
            return 1
        terms = term_sums(root / "work" / f"work-c{capacity}", plan_dir, pack_ids)
    print(f"{report['environment'].get('gpu')}: C={capacity}, {len(pack_ids)} packs, {len(runs)} timed runs each, "
          f"{ranks} ranks")  # fmt: skip
    for name, seconds in (("median", np.median(runs, axis=0)), ("minimum", runs.min(axis=0))):
        print(f"\npack time = {name} over the runs")
        print(f"  plan cost vs time: Pearson r {np.corrcoef(cost, seconds)[0, 1]:.4f}")
        print("  each term alone: " + ", ".join(f"{t} {np.corrcoef(terms[:, i], seconds)[0, 1]:.3f}"
                                                for i, t in enumerate(TERMS)))  # fmt: skip
        calibrated = cross_validated(terms, seconds)
        print(f"  calibrated on this card (cross-validated): r {np.corrcoef(calibrated, seconds)[0, 1]:.4f}")
        print(f"  balanced p99 judged by these times: plan's costs {step_p99(cost, seconds, ranks):.4f}, "
              f"calibrated costs {step_p99(calibrated, seconds, ranks):.4f}")
    floor = noise_floor(list(runs), ranks)
    print(f"\nthe clock's noise floor: packs scheduled by one run's times, judged by another's: p99 {floor['p99']:.4f} "
          f"(median over {floor['pairs']} pairs)")  # fmt: skip
    print("plan's costs judged run by run: p99 " + ", ".join(f"{step_p99(cost, run, ranks):.4f}" for run in runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
