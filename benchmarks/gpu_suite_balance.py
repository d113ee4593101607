"""Part (b): the plan's cost model against the clock, and the step balance it buys in measured time.

The balanced capacity's packs (planned with ``parallel.data_parallel_size`` R and the suite model's
``config.json`` as ``packing.cost.model_config``) are read for R emulated ranks twice:

* balanced: ``PackDataset(rank=r, world_size=R)``, each rank's slots as the plan scheduled them;
* unbalanced: the same packs as ``follow_plan=False`` hands them out (a seeded shuffle).

Each order is timed as R ranks would run it, one rank's pack after another for every step: the
forward + backward time of one pack (``perf_counter`` around it, the device synchronized on both
sides; the gradients dropped after). A step takes as long as its slowest rank, so its balance is
max / mean over its R pack times; "idle" is the share of the ranks' time spent waiting for the
slowest. Every pack is timed once in each order, so its two times also show how well the clock
repeats (every pack runs once untimed before, so no time holds a shape's first kernels); further
passes (``repeats`` in all) give each pack a median time. The fit of the plan's predicted cost to the
median time: Pearson r, a least-squares line (its slope as effective TFLOP/s, its intercept as the
time no FLOP explains) and the spread of time / cost. The same steps are also judged by the median
times (the balance without the clock's run-to-run noise), and the noise floor is what a perfect cost
model would get: the packs scheduled by their times in one run, judged by another run's.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_suite_attention import use_attention  # noqa: E402
from gpu_suite_report import RAN, Part, Target  # noqa: E402

TARGET_R = 0.95  # the issue's: predicted pack cost vs measured time
TARGET_P99 = 1.05  # the issue's: balanced steps' measured max / mean at p99


def _timer(suite, model, attention: str):
    def fwd_bwd(batch) -> float:
        if suite.device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        model(**batch.model_kwargs(attention)).loss.backward()  # the mask, if any, is built per step as in training
        if suite.device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        model.zero_grad(set_to_none=True)
        return seconds

    return fwd_bwd


def balance(table: np.ndarray) -> dict:
    """``table`` [ranks, steps] of pack times (or costs): per step max / mean; its p50, p99, worst, idle share."""
    top, mean = table.max(axis=0), table.mean(axis=0)
    ratio = top / mean
    return {"steps": int(table.shape[1]), "p50": float(np.percentile(ratio, 50)), "p99": float(np.percentile(ratio, 99)),
            "worst": float(ratio.max()), "idle": float((top - mean).sum() / top.sum())}


def fit(cost: np.ndarray, seconds: np.ndarray) -> dict:
    """How the plan's cost predicts the clock: Pearson r, seconds = slope * cost + intercept, spread of seconds / cost."""
    slope, intercept = np.polyfit(cost, seconds, 1)
    per_flop = seconds / cost
    normalized = per_flop / np.median(per_flop)
    return {"packs": int(len(cost)), "pearson_r": float(np.corrcoef(cost, seconds)[0, 1]),
            "effective_tflops": float(1 / slope / 1e12) if slope > 0 else None, "intercept_ms": float(intercept * 1e3),
            "time_per_cost_cv": float(per_flop.std() / per_flop.mean()),
            "time_per_cost_p5_p95": [float(np.percentile(normalized, 5)), float(np.percentile(normalized, 95))],
            "cost_max_over_min": float(cost.max() / cost.min()), "time_max_over_min": float(seconds.max() / seconds.min())}


def noise_floor(passes: list[np.ndarray], ranks: int) -> dict:
    """The measured p99 a perfect cost model would get on this clock: the packs scheduled (the plan's own
    ``schedule.balance``, one pack per rank per step) by their times in one run, judged by another run's."""
    from vlmpack_offline.schedule import balance as schedule

    p99 = []
    for a, b in ((a, b) for a in range(len(passes)) for b in range(len(passes)) if a != b):
        order, _, _ = schedule(passes[a], ranks, 1, 1, np.random.default_rng(a * len(passes) + b))
        p99.append(balance(passes[b][order].reshape(ranks, -1))["p99"])
    return {"pairs": len(p99), "p99": float(np.median(p99))}


def run(suite) -> Part:
    settings, layout, data = suite.settings["cost_model"], suite.layout, suite.data
    capacity, ranks = layout.balanced_capacity, layout.ranks
    orders = {"balanced": [data.dataset(capacity, rank=r, world_size=ranks, follow_plan=True).rank_order(0)
                           for r in range(ranks)],
              "unbalanced": [data.dataset(capacity, rank=r, world_size=ranks).rank_order(0) for r in range(ranks)]}
    steps = {kind: min(len(o) for o in order) for kind, order in orders.items()}
    needed = sorted({int(i) for order in orders.values() for o in order for i in o})
    suite.log(f"C={capacity}: reading {len(needed)} packs for {ranks} ranks ({steps} steps)")
    batches = dict(data.packs_at(capacity, needed))
    costs_by_id = data.plan_costs(capacity)
    cost = {i: float(costs_by_id[batches[i].pack_id]) for i in needed}
    model, attention = suite.model(), suite.training_attention()
    use_attention(model, attention)  # the model keeps the last part's choice otherwise
    fwd_bwd = _timer(suite, model, attention)
    # every pack once before any is timed: a pack's first run pays its shapes' first kernels and allocations
    for i in needed if settings["warm_every_pack"] else needed[: settings["warmup"]]:
        fwd_bwd(batches[i])
    measured, tables, ids_of = {}, {}, {}
    for kind, order in orders.items():  # step by step, rank after rank, as R ranks would run them
        times = {}
        for k in range(steps[kind]):
            for r in range(ranks):
                times[int(order[r][k])] = fwd_bwd(batches[int(order[r][k])])
        for i in needed:  # the packs this order leaves out, so every pack has a time in both
            if i not in times:
                times[i] = fwd_bwd(batches[i])
        measured[kind] = times
        ids = ids_of[kind] = np.array([[int(order[r][k]) for k in range(steps[kind])] for r in range(ranks)])
        tables[kind] = {"measured": balance(np.vectorize(times.get)(ids)),
                        "predicted": balance(np.vectorize(cost.get)(ids))}
    passes = [np.array([measured[kind][i] for i in needed]) for kind in ("balanced", "unbalanced")]
    for _ in range(settings["repeats"] - len(passes)):  # a pack's own time, told from the clock's noise
        passes.append(np.array([fwd_bwd(batches[i]) for i in needed]))
    first, second = passes[0], passes[1]
    seconds, costs = np.median(passes, axis=0), np.array([cost[i] for i in needed])
    model_fit = fit(costs, seconds)
    repeat = np.abs(first - second) / seconds
    by_median = {kind: balance(np.vectorize(dict(zip(needed, seconds, strict=True)).get)(ids_of[kind])) for kind in ids_of}
    floor = noise_floor(passes, ranks)
    results = {"capacity": capacity, "ranks": ranks, "attention": attention, "fit": model_fit,
               "repeatability": {"median": float(np.median(repeat)), "p95": float(np.percentile(repeat, 95))},
               "steps": tables, "steps_by_median_time": by_median, "noise_floor": floor,
               "pack_seconds_median": float(np.median(seconds)),
               "pack_costs_pflop_median": float(np.median(costs) / 1e15),
               # each pack's plan cost and its two times, by pack id: the cost model can be refitted off the device
               "packs": {"pack_id": [int(batches[i].pack_id) for i in needed], "cost_flop": costs.tolist(),
                         "seconds": [p.tolist() for p in passes]}}
    bal, unbal = tables["balanced"]["measured"], tables["unbalanced"]["measured"]
    lines = (
        f"C={capacity}, {len(needed)} packs, {attention}; median pack {1e3 * np.median(seconds):.1f} ms, "
        f"{np.median(costs) / 1e12:.1f} TFLOP predicted",
        f"cost vs time: Pearson r {model_fit['pearson_r']:.4f}; {model_fit['effective_tflops'] or 0:.0f} TFLOP/s "
        f"effective, intercept {model_fit['intercept_ms']:.1f} ms; time/cost CV {model_fit['time_per_cost_cv']:.3f}, "
        f"p5-p95 {model_fit['time_per_cost_p5_p95'][0]:.3f}-{model_fit['time_per_cost_p5_p95'][1]:.3f} of median",
        f"clock repeat (|t1 - t2| / t): median {results['repeatability']['median']:.4f}, "
        f"p95 {results['repeatability']['p95']:.4f}",
        f"{ranks} ranks, step max/mean  balanced ({bal['steps']} steps): p50 {bal['p50']:.4f} p99 {bal['p99']:.4f} "
        f"worst {bal['worst']:.4f} idle {100 * bal['idle']:.2f}%  |  unbalanced ({unbal['steps']}): p50 "
        f"{unbal['p50']:.4f} p99 {unbal['p99']:.4f} worst {unbal['worst']:.4f} idle {100 * unbal['idle']:.2f}%",
        f"same steps by the plan's cost: balanced p99 {tables['balanced']['predicted']['p99']:.4f}, unbalanced p99 "
        f"{tables['unbalanced']['predicted']['p99']:.4f}",
        f"same steps by each pack's median time over {len(passes)} runs: balanced p99 "
        f"{by_median['balanced']['p99']:.4f}, unbalanced p99 {by_median['unbalanced']['p99']:.4f}",
        f"the clock's noise floor (packs scheduled by their time in one run, judged by another): p99 "
        f"{floor['p99']:.4f} (median over {floor['pairs']} pairs of runs)",
    )
    targets = (
        Target(name=f"predicted cost vs measured time, Pearson r >= {TARGET_R}", value=f"{model_fit['pearson_r']:.4f}",
               met=model_fit["pearson_r"] >= TARGET_R),
        Target(name=f"balanced steps' measured max/mean p99 <= {TARGET_P99} (unbalanced {unbal['p99']:.4f})",
               value=f"{bal['p99']:.4f}", met=bal["p99"] <= TARGET_P99),
    )
    del batches
    return Part(name="cost_model", status=RAN, results=results, targets=targets, lines=lines)
