"""Benchmark a mixture (``data.sources``, issue 27): bucket + plan time with and without weights, and evenness.

    python benchmarks/bench_mix.py --samples 200000                  # smoke check, well under a minute
    python benchmarks/bench_mix.py --samples 10000000 --repeats 3 --out /tmp/bench_mix.json
    python benchmarks/bench_mix.py --samples 2000000 --repeats 0 --breakdown     # where the mixture's time goes

What runs: 20 synthetic sources (SOURCES below: sizes from 0.2% to 20% of --samples, i.e. 20k to 2M at
10M; text, image and video sources with their own length distributions; weights that up-sample the
small sources and down-sample the large ones, one ``repeat`` and one ``count`` source) held as the
arrays bucket loads from the manifest (``OkSamples`` with ``source_code``), C = 8192, group_by
media_type, val 1%. The stage code is timed as ``bucket.run`` / ``plan.run`` call it, minus sqlite and
files other than pack_plan.npz (as in ``bench_pack.py`` A):

  uses    ``bucket.mixture_uses`` (the mixture's draws; the same call with one ``default`` source
          for the baseline, where every sample is used once)
  bucket  ``bucket.build_bins`` (grouping + best-fit decreasing over every copy, copies kept apart)
  plan    ``plan.validate`` + ``pack_costs`` + ``mix_of`` + ``make_plan`` (interleave by source) +
          ``mixture_record`` (the 100-step window measure), then ``write_plan_arrays``

Two baselines without weights, both with ``data.sources`` empty (the code path of a config without a
mixture, which is what bucket + plan cost before mixtures):

  one source    the same samples as one source: every sample that fits packed once (fewer or more
                sub-samples than the mixture packs, by how its weights draw)
  same copies   one source whose samples are exactly the mixture's packed multiset: each sample
                repeated ``uses`` times as distinct samples (every column ``np.repeat``-ed; overlong
                samples, used 0 times, are gone). Same number of sub-samples and lengths as the
                mixture, so mixture / same copies is the cost of the mixture machinery alone
                (use_counts, copies + separate_copies, the interleave, mix_of, the window record)

All three run for each balance setting (none, and ``parallel.data_parallel_size`` --ranks), each in a
fresh process (peak RSS is its own, synthetic data generation and the same-copies expansion included,
not timed), in rotating order, --repeats times; the tables show the fastest repeat of each.

``--breakdown`` then times the mixture's pieces (and the same-copies baseline's) one by one, calling them
the way ``build_bins`` and ``plan.run`` do: uses, per group ``copies`` / ``pack_samples`` /
``separate_copies``, validate, pack_costs, ``mix_of``, ``make_plan`` (with ``balance`` and
``interleave`` timed inside it), the same ``make_plan`` without ``mix``, and ``mixture_record`` (the
run's steps and the window measure).

Evenness is ``plan.mixture_record``'s: per source, the largest |share of a window of 100 consecutive
steps - asked share| over every window of the train split read cyclically (a step = one pack
without balancing, one slot of --ranks packs with it), in percentage points; shares by
``data.mix_by``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import queue as queue_module
import resource
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_pack import CAPACITY, flat_bins  # benchmarks/ is on sys.path when this script runs

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.packing import PackLimits, lower_bound, pack_samples
from vlmpack_offline.packing import interleave as interleave_module
from vlmpack_offline.packing.copies import copies, separate_copies
from vlmpack_offline.packing.cost import pack_costs
from vlmpack_offline.plan_file import plan_path, write_plan_arrays
from vlmpack_offline.stages import bucket, plan
from vlmpack_offline.stages._ok_samples import MEDIA_TYPES, OkSamples

# name, P(text, image, video), samples at 10M, median tokens, sigma (lognormal), visual share of an image /
# video sample's tokens, images per sample, rule ("weight" x: x times its natural share before
# normalising; "repeat" r; "count" f: f times its size)
SOURCES = [
    ("web-caption", (0.0, 1.0, 0.0), 1_620_000, 250, 0.35, 0.85, 1, "weight", 0.5),
    ("laion-ocr", (0.0, 1.0, 0.0), 1_500_000, 700, 0.6, 0.75, 1, "weight", 0.6),
    ("ultrachat", (1.0, 0.0, 0.0), 1_200_000, 1100, 0.8, 0.0, 0, "weight", 0.7),
    ("sharegpt4v", (0.1, 0.9, 0.0), 1_000_000, 900, 0.5, 0.7, 1, "weight", 1.0),
    ("openhermes", (1.0, 0.0, 0.0), 800_000, 500, 0.9, 0.0, 0, "weight", 0.8),
    ("doc-vqa", (0.0, 1.0, 0.0), 700_000, 2500, 0.6, 0.8, 2, "weight", 1.0),
    ("video-caption", (0.0, 0.0, 1.0), 600_000, 3000, 0.5, 0.9, 1, "weight", 1.2),
    ("chart-qa", (0.0, 1.0, 0.0), 500_000, 800, 0.5, 0.7, 1, "weight", 1.5),
    ("math-text", (1.0, 0.0, 0.0), 400_000, 1500, 0.7, 0.0, 0, "weight", 1.5),
    ("interleaved", (0.05, 0.95, 0.0), 350_000, 4000, 0.5, 0.75, 3, "weight", 1.0),
    ("code-text", (1.0, 0.0, 0.0), 300_000, 2000, 0.9, 0.0, 0, "count", 0.8),
    ("video-qa", (0.0, 0.0, 1.0), 250_000, 5000, 0.4, 0.9, 1, "weight", 2.0),
    ("ocr-books", (0.0, 1.0, 0.0), 200_000, 1800, 0.5, 0.8, 1, "weight", 2.0),
    ("science-qa", (0.3, 0.7, 0.0), 150_000, 600, 0.6, 0.6, 1, "weight", 3.0),
    ("long-doc", (1.0, 0.0, 0.0), 120_000, 6000, 0.4, 0.0, 0, "weight", 1.0),
    ("gui-screens", (0.0, 1.0, 0.0), 100_000, 2200, 0.4, 0.85, 1, "weight", 3.0),
    ("grounding", (0.0, 1.0, 0.0), 80_000, 400, 0.5, 0.8, 1, "weight", 4.0),
    ("video-long", (0.0, 0.0, 1.0), 60_000, 7000, 0.2, 0.9, 1, "weight", 2.0),
    ("safety-text", (1.0, 0.0, 0.0), 50_000, 300, 0.5, 0.0, 0, "repeat", 3.0),
    ("gold-sft", (0.5, 0.5, 0.0), 20_000, 1000, 0.7, 0.6, 1, "weight", 5.0),
]
FULL = sum(s[2] for s in SOURCES)  # 10M


def _sizes(n: int, k: int) -> list[int]:
    sizes = [max(1, round(s[2] * n / FULL)) for s in SOURCES[:k]]
    sizes[0] += n - sum(sizes)
    return sizes


def mixture_samples(n: int, k: int = len(SOURCES), seed: int = 0,
                    by_tokens: bool = False) -> tuple[OkSamples, list[dict]]:
    """``n`` samples of the first ``k`` SOURCES in manifest order (sources sorted by name, each contiguous,
    as a scan of prefixed shards stores them) and their ``data.sources`` entries (weights and the count
    in samples, or in tokens with ``by_tokens``). Lengths run past C
    (up to 4 C), so some samples are overlong; vision-encoder columns as in ``bench_pack.synthetic``."""
    rng = np.random.default_rng(seed)
    sizes = _sizes(n, k)
    specs = sorted(zip(SOURCES[:k], sizes, strict=True), key=lambda x: x[0][0])
    lengths, media, codes, images, source = [], [], [], [], []
    for code, ((_, probs, _, median, sigma, visual, per_sample, _, _), size) in enumerate(specs):
        length = np.clip(np.round(rng.lognormal(np.log(median), sigma, size)), 16, 4 * CAPACITY).astype(np.int32)
        kind = rng.choice(3, size=size, p=probs).astype(np.int8)
        lengths.append(length)
        media.append(np.where(kind == 0, 0, (length * visual).astype(np.int32)).astype(np.int32))
        codes.append(kind)
        images.append(np.where(kind == 2, 4, max(per_sample, 1)))  # attention blocks: video 4 frames, else images
        source.append(np.full(size, code, np.int16))
    media_tokens = np.concatenate(media)
    patches = media_tokens * 4
    frames = np.concatenate(images)
    blocks = (patches.astype(np.int64) // frames) ** 2 * frames
    samples = OkSamples(token_len=np.concatenate(lengths), media_tokens=media_tokens,
                        media_code=np.concatenate(codes), media_names=MEDIA_TYPES, encoder_patches=patches,
                        encoder_attention=blocks, source_code=np.concatenate(source),
                        source_names=tuple(s[0][0] for s in specs))
    # a source's size by mix_by: its samples, or its tokens (those within C)
    fits = np.where(samples.token_len <= CAPACITY, samples.token_len, 0).astype(np.int64)
    measure = np.bincount(samples.source_code, weights=fits if by_tokens else None, minlength=k)
    size_of = {name: float(measure[code]) for code, name in enumerate(samples.source_names)}
    total = float(measure.sum())
    entries = []
    for name, *_, rule, value in SOURCES[:k]:
        entry = {"name": name, "wds_dir": f"/data/{name}"}
        if rule == "weight":
            entry["weight"] = round(value * size_of[name] / total, 5)
        elif rule == "count":
            entry["count"] = int(value * size_of[name])
        else:
            entry["repeat"] = value
        entries.append(entry)
    return samples, entries


def _config(work_dir: Path, balance: int | None, sources: list[dict] | None, mix_by: str):
    data = {"work_dir": str(work_dir), "mix_by": mix_by}
    if sources:
        data["sources"] = sources
    return config_from_dict({"data": data, "sample": {"max_token_len": CAPACITY},
                             "packing": {"group_by": "media_type"}, "parallel": {"data_parallel_size": balance},
                             "split": {"val_ratio": 0.01}}, source="bench")


MODES = ("one source", "same copies", "mixture")


def _same_copies(samples: OkSamples, uses: np.ndarray) -> OkSamples:
    """One source holding the mixture's packed multiset: sample ``i`` repeated ``uses[i]`` times, as distinct samples."""
    reps = uses.astype(np.int64)
    return OkSamples(token_len=np.repeat(samples.token_len, reps), media_tokens=np.repeat(samples.media_tokens, reps),
                     media_code=np.repeat(samples.media_code, reps), media_names=samples.media_names,
                     encoder_patches=np.repeat(samples.encoder_patches, reps),
                     encoder_attention=np.repeat(samples.encoder_attention, reps),
                     source_code=np.zeros(int(reps.sum()), np.int16), source_names=("default",))


def _samples_of(mode: str, n: int, k: int, balance: int | None, mix_by: str,
                work_dir: Path) -> tuple[OkSamples, object]:
    """The mode's samples (module doc) and config."""
    samples, entries = mixture_samples(n, k, by_tokens=mix_by == "tokens")
    if mode == "mixture":
        return samples, _config(work_dir, balance, entries, mix_by)
    if mode == "same copies":
        samples = _same_copies(samples, bucket.mixture_uses(samples, _config(work_dir, balance, entries, mix_by))[1])
    else:  # the same samples as the one source of a config without data.sources
        samples = dataclasses.replace(samples, source_code=np.zeros(samples.n, np.int16), source_names=("default",))
    return samples, _config(work_dir, balance, None, mix_by)


def bench_one(n: int, k: int, balance: int | None, mode: str, mix_by: str, queue) -> None:
    """One configuration, timed as the stages call it (module doc); puts a dict on ``queue``."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        samples, config = _samples_of(mode, n, k, balance, mix_by, Path(tmp))
        t_gen = time.perf_counter() - t0
        t1 = time.perf_counter()
        source, uses, mixture = bucket.mixture_uses(samples, config)
        t_uses = time.perf_counter() - t1
        t2 = time.perf_counter()
        groups = bucket.build_bins(samples, config, uses)
        t_bucket = time.perf_counter() - t2
        t3 = time.perf_counter()
        indexes, offsets, pack_group = flat_bins(groups)
        lengths = config.alignment.aligned(samples.token_len)
        overlong = np.flatnonzero(lengths > CAPACITY).astype(np.int32)
        plan.validate(indexes, offsets, lengths, samples.n, CAPACITY, overlong, uses)
        costs = pack_costs(plan.cost_model(config), lengths, samples.encoder_patches, samples.encoder_attention,
                           indexes, offsets)
        record = mixture if config.data.sources else None
        mix = plan.mix_of(record, source, samples.token_len, indexes, offsets)
        arrays, schedule = plan.make_plan(indexes, offsets, pack_group, tuple(groups),
                                          samples.token_len, samples.media_tokens, config, costs, mix)
        n_train = int(np.count_nonzero(arrays.split == 0))
        if record is not None:
            written = plan.mix_of(record, source, samples.token_len, arrays.sample_index, arrays.pack_offsets)
            record = plan.mixture_record(record, written, schedule, n_train)[0]
        del costs, indexes
        t_plan = time.perf_counter() - t3
        t4 = time.perf_counter()
        write_plan_arrays(tmp, arrays, {"bench": True})
        t_write = time.perf_counter() - t4
        plan_bytes = plan_path(tmp).stat().st_size
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    packed = np.repeat(lengths, uses.astype(np.int64))
    out = dict(gen=t_gen, uses=t_uses, bucket=t_bucket, plan=t_plan, write=t_write, peak=peak,
               packs=arrays.n_packs, train_packs=n_train, lower_bound=lower_bound(packed, CAPACITY),
               samples_packed=int(uses.sum()), tokens_packed=int(packed.astype(np.int64).sum()),
               plan_bytes=plan_bytes, steps=schedule.steps if schedule else n_train,
               together=sum(int(g[2]) for g in groups.values()))
    if record is not None:
        out["worst_window_deviation"] = record["worst_window_deviation"]
        out["window_steps"], out["mix_steps"] = record["window_steps"], record["steps"]
        out["sources"] = [{k: row[k] for k in ("name", "rule", "value", "ok", "overlong", "packed", "asked_share",
                                               "train_share", "worst_window_deviation")}
                          for row in record["sources"]]
    queue.put(out)


class _Clock:
    """Seconds per named piece; ``wrap`` times every call of a function (one a module looks up by name)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def time(self, name: str, fn, *args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t

    def wrap(self, name: str, fn):
        return lambda *args, **kwargs: self.time(name, fn, *args, **kwargs)


def breakdown_one(n: int, k: int, balance: int | None, mode: str, mix_by: str, queue) -> None:
    """The pieces of one configuration's bucket + plan, each timed (module doc); puts {piece: seconds} on ``queue``."""
    clock = _Clock()
    # this child process only: Mix.interleaved looks interleave up in its module, plan looks balance up in its own
    interleave_module.interleave = clock.wrap("  interleave (in make_plan)", interleave_module.interleave)
    plan.balance = clock.wrap("  balance (in make_plan, interleave included)", plan.balance)
    with tempfile.TemporaryDirectory() as tmp:
        samples, config = _samples_of(mode, n, k, balance, mix_by, Path(tmp))
        source, uses, mixture = clock.time("mixture_uses", bucket.mixture_uses, samples, config)
        # build_bins, piece by piece (as bucket.build_bins calls them)
        packing = config.packing
        limits = PackLimits(capacity=CAPACITY, max_samples=packing.max_samples_per_pack,
                            max_media_tokens=packing.max_media_tokens_per_pack)
        t = time.perf_counter()
        lengths = config.alignment.aligned(samples.token_len)
        fits = lengths <= CAPACITY
        codes = np.where(fits, samples.media_code, -1)
        order = np.argsort(codes, kind="stable").astype(np.int32)
        counts = np.bincount(samples.media_code[fits], minlength=len(samples.media_names))
        start, members_of = int(np.count_nonzero(~fits)), {}
        for code, name in enumerate(samples.media_names):
            members_of[name] = order[start : start + counts[code]]
            start += counts[code]
        clock.seconds["build_bins: grouping"] = time.perf_counter() - t
        groups = {}
        for name, members in members_of.items():
            items = members[clock.time("build_bins: copies", copies, uses[members])]
            if items.size == 0:
                continue
            bins = clock.time("build_bins: pack_samples (BFD)", pack_samples, lengths[items], limits,
                              algorithm=packing.algorithm, media_tokens=samples.media_tokens[items])
            got = clock.time("build_bins: separate_copies", separate_copies, items[bins.indexes], bins.offsets,
                             lengths, limits, samples.media_tokens)
            groups[name] = (got[0].astype(np.int32), got[1].astype(np.int64), got[2])
        indexes, offsets, pack_group = flat_bins(groups)
        overlong = np.flatnonzero(lengths > CAPACITY).astype(np.int32)
        clock.time("plan: validate", plan.validate, indexes, offsets, lengths, samples.n, CAPACITY, overlong, uses)
        costs = clock.time("plan: pack_costs", pack_costs, plan.cost_model(config), lengths, samples.encoder_patches,
                           samples.encoder_attention, indexes, offsets)
        record = mixture if config.data.sources else None
        mix = clock.time("plan: mix_of (bins order)", plan.mix_of, record, source, samples.token_len, indexes, offsets)
        arrays, schedule = clock.time("plan: make_plan", plan.make_plan, indexes, offsets, pack_group, tuple(groups),
                                      samples.token_len, samples.media_tokens, config, costs, mix)
        if mix is not None:
            interleaved = {name: clock.seconds.pop(name) for name in list(clock.seconds) if name.startswith("  ")}
            clock.time("(plan: make_plan without mix, not in the plan)", plan.make_plan, indexes, offsets, pack_group,
                       tuple(groups), samples.token_len, samples.media_tokens, config, costs, None)
            clock.seconds.pop("  balance (in make_plan, interleave included)", None)
            clock.seconds.update(interleaved)
            n_train = int(np.count_nonzero(arrays.split == 0))
            written = clock.time("plan: mix_of (written order)", plan.mix_of, record, source, samples.token_len,
                                 arrays.sample_index, arrays.pack_offsets)
            clock.time("plan: mixture_record", plan.mixture_record, record, written, schedule, n_train)
        clock.time("plan: write_plan_arrays", write_plan_arrays, tmp, arrays, {"bench": True})
    queue.put(clock.seconds)


def _in_child(target, *args) -> dict:
    """``bench_pack._in_child`` (a fresh process, so its peak RSS is its own), but a child that dies ends the run."""
    context = mp.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=target, args=(*args, results))
    child.start()
    while True:
        try:
            result = results.get(timeout=5)
            break
        except queue_module.Empty:
            if not child.is_alive():
                raise SystemExit(f"the benchmark's child process failed (exit code {child.exitcode})") from None
    child.join()
    return result


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:g}"


def _total(r: dict) -> float:
    return r["uses"] + r["bucket"] + r["plan"] + r["write"]


PIECES = ("mixture_uses", "build_bins: grouping", "build_bins: copies", "build_bins: pack_samples (BFD)",
          "build_bins: separate_copies", "plan: validate", "plan: pack_costs", "plan: mix_of (bins order)",
          "plan: make_plan", "  balance (in make_plan, interleave included)", "  interleave (in make_plan)",
          "(plan: make_plan without mix, not in the plan)", "plan: mix_of (written order)",
          "plan: mixture_record", "plan: write_plan_arrays")


def _key(mode: str, balance: int | None) -> str:
    return f"{mode}, {f'{balance} ranks' if balance else 'unbalanced'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--sources", type=int, default=len(SOURCES), help=f"the first N of the {len(SOURCES)}")
    parser.add_argument("--ranks", type=int, default=8, help="parallel.data_parallel_size of the balanced runs")
    parser.add_argument("--mix-by", choices=("samples", "tokens"), default="samples")
    parser.add_argument("--repeats", type=int, default=1, help="0: only --breakdown")
    parser.add_argument("--breakdown", action="store_true", help="then time the pieces one by one (module doc)")
    parser.add_argument("--out", type=Path, help="write every run's numbers here (JSON)")
    args = parser.parse_args()
    if not 1 <= args.sources <= len(SOURCES):
        parser.error(f"--sources must be 1..{len(SOURCES)}")
    command = shlex.join([sys.executable, *sys.argv])
    print("command:", command)
    sizes = _sizes(args.samples, args.sources)
    setting = (f"{args.samples:,} samples in {args.sources} sources ({min(sizes):,} to {max(sizes):,} samples), "
               f"C={CAPACITY}, group_by media_type, BFD, val 1%, mix_by {args.mix_by}")
    balances = (None, args.ranks)

    runs: dict[str, list[dict]] = {}
    for repeat in range(args.repeats):
        for balance in balances:
            # rotate which goes first, so a drift in the machine's load hits all alike
            for mode in MODES[repeat % 3:] + MODES[:repeat % 3]:
                key = _key(mode, balance)
                r = _in_child(bench_one, args.samples, args.sources, balance, mode, args.mix_by)
                runs.setdefault(key, []).append(r)
                print(f"  [{repeat + 1}/{args.repeats}] {key}: uses {r['uses']:.2f} s, bucket {r['bucket']:.2f} s, "
                      f"plan {r['plan']:.2f} s, write {r['write']:.2f} s, total {_total(r):.2f} s, "
                      f"peak {r['peak']:.2f} GiB", flush=True)
    if runs:
        _report(args, setting, runs)

    pieces = {}
    if args.breakdown:
        for balance in balances:
            for mode in ("same copies", "mixture"):
                pieces[_key(mode, balance)] = _in_child(breakdown_one, args.samples, args.sources, balance, mode,
                                                        args.mix_by)
        print(f"\nbreakdown (s, one run each): {setting}")
        print("| piece | " + " | ".join(pieces) + " |")
        print("|---|" + "---|" * len(pieces))
        for piece in PIECES:
            if any(piece in p for p in pieces.values()):
                print(f"| {piece} | " + " | ".join(f"{p[piece]:.2f}" if piece in p else "-" for p in pieces.values())
                      + " |")
        totals = [sum(v for name, v in p.items() if name[0] not in " (") for p in pieces.values()]
        print("| total (indented and parenthesized lines left out) | "
              + " | ".join(f"{t:.2f}" for t in totals) + " |")
    if args.out:
        args.out.write_text(json.dumps({"command": command, "args": {k: str(v) for k, v in vars(args).items()},
                                        "runs": runs, "breakdown": pieces}, indent=1) + "\n")
        print(f"\nwrote {args.out}")


def _report(args, setting: str, runs: dict[str, list[dict]]) -> None:
    best = {key: min(rs, key=_total) for key, rs in runs.items()}
    print(f"\n{setting}; fastest of {args.repeats}")
    print("| balance | weights | uses (s) | bucket (s) | plan + write (s) | total (s) | peak RSS (GiB) | "
          "samples packed | packs | gap to bound | worst 100-step deviation |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    label = {"one source": "one source", "same copies": "same copies, one source",
             "mixture": f"{args.sources}-source mixture"}
    for balance in (None, args.ranks):
        for mode in MODES:
            r = best[_key(mode, balance)]
            worst = f"{100 * r['worst_window_deviation']:.2f} pp" if mode == "mixture" else "-"
            print(f"| {f'{balance} ranks' if balance else 'none'} | {label[mode]} | {r['uses']:.2f} | "
                  f"{r['bucket']:.2f} | {r['plan'] + r['write']:.2f} | {_total(r):.2f} | {r['peak']:.2f} | "
                  f"{r['samples_packed']:,} | {r['packs']:,} | {100 * (r['packs'] / r['lower_bound'] - 1):.4f}% | "
                  f"{worst} |")
    print("\nweights' cost (mixture / baseline, fastest repeats):")
    print("| balance | baseline | bucket (uses + build_bins) | plan + write | bucket + plan |")
    print("|---|---|---|---|---|")
    for balance in (None, args.ranks):
        m = best[_key("mixture", balance)]
        for mode in MODES[:2]:
            o = best[_key(mode, balance)]
            print(f"| {f'{balance} ranks' if balance else 'none'} | {mode} | "
                  f"{(m['uses'] + m['bucket']) / (o['uses'] + o['bucket']):.3f}x | "
                  f"{(m['plan'] + m['write']) / (o['plan'] + o['write']):.3f}x | {_total(m) / _total(o):.3f}x |")

    unbalanced, balanced = best[_key("mixture", None)], best[_key("mixture", args.ranks)]
    print(f"\nper source (shares by {args.mix_by}; steps: {unbalanced['mix_steps']:,} unbalanced, "
          f"{balanced['mix_steps']:,} with {args.ranks} ranks)")
    print(f"| source | media | ok samples | rule | packed | asked share | worst 100-step deviation, unbalanced | "
          f"same, {args.ranks} ranks |")
    print("|---|---|---|---|---|---|---|---|")
    media = {s[0]: "/".join(t for t, p in zip(MEDIA_TYPES, s[1], strict=True) if p) for s in SOURCES}
    for a, b in zip(unbalanced["sources"], balanced["sources"], strict=True):
        print(f"| {a['name']} | {media[a['name']]} | {a['ok']:,} | {a['rule']} {_number(a['value'])} | {a['packed']:,} | "
              f"{100 * a['asked_share']:.2f}% | {100 * a['worst_window_deviation']:.2f} pp | "
              f"{100 * b['worst_window_deviation']:.2f} pp |")


if __name__ == "__main__":
    main()
