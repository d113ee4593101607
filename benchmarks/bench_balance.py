"""Step balance as the ranks read it: per step, the costliest of 8 ranks' packs over the mean, balanced vs not.

    python benchmarks/bench_balance.py --out /tmp/bench_balance.json     # defaults below: ~2.6 min on 2 cores
    python benchmarks/bench_balance.py --samples 5000 --keep /tmp/bb       # keep the tars, work dirs, packed dirs

What is built, honestly:
  Two real datasets of real tars in a temp dir (``synthetic.shards.write_shard``), read through a real
  Qwen2.5-VL processor folder (``build_processor_dir``):
  * "image-heavy" (--samples, default 20,000): 85% one JPEG (sides ~150-1400 px, seven aspect ratios),
    15% two to four JPEGs; texts from one sentence to ~1,500 words, 25% with a second turn;
  * "mixed" (same count): 30% text only (up to ~3,000 words), 35% one image, 15% several images,
    20% an MP4 (6-48 frames, 112-448 px; a fifth of them also with an image).
  Media come from seeded pools (--image-pool distinct JPEGs, --video-pool distinct MP4s) that samples
  pick from, so building stays cheap; every sample is its own tar member and counts from its bytes.
  Both are packed by the real stages (scan, bucket, plan, write ``.run(config)``) at C = 4096 with a
  model config.json of Qwen2.5-VL-7B's sizes in ``packing.cost.model_config``: balanced
  (``parallel.data_parallel_size: 8``) and unbalanced; the mixed set also with ``packing.group_by: none``.
What is measured:
  For every packed folder, W = 8 ranks of each loader are started and the pack each rank reads at each
  step of one epoch is recorded: PackDataset in a torch DataLoader (num_workers 0 and 2) and energon's
  ``get_savable_loader`` (num_workers 0 and 2; balanced folder: ``loader.task_encoder.train_dataset``,
  unbalanced folder: energon's plain ``get_train_dataset(path, batch_size=1, shuffle_buffer_size=None,
  max_samples_per_sequence=None)``; PackDataset: its default order either way). The loaders read and
  cook every pack; only the per-pack encoding (pixels, tokens) is replaced by "return the pack id", so
  their own sharding and worker order decide what each rank gets. A step's ratio is max / mean over the
  8 ranks of the plan's cost of the packs read (``read_plan_arrays(work_dir).cost``, by pack id).
  "idle" = sum over steps of (max - mean) / sum of max: the share of the ranks' step time spent waiting.
  Balanced reads are also checked: every rank reads only its own block, all ranks the same slot at each
  step, each slot once ("ok"). Fill gap = (packs - lower bound) / lower bound, from ``bins/meta.json``;
  "plan s" is the plan stage's ``StageResult.seconds``. What limits the balanced plan is printed from the
  plan itself: the costliest packs and the worst slot over the median pack cost, and the train packs the
  schedule leaves out of every step (fewer than 8 ranks x 8 loader_workers, mostly a random sample; no
  balanced loader reads them, in any epoch) with the samples they hold.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import shlex
import shutil
import sqlite3
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from megatron.energon import Sample, WorkerConfig, get_savable_loader, get_train_dataset
from megatron.energon.edataclass import edataclass
from torch.utils.data import DataLoader

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.loader import PackDataset, PackEncoder, PackTaskEncoder
from vlmpack_offline.loader.task_encoder import train_dataset
from vlmpack_offline.plan_file import read_plan_arrays
from vlmpack_offline.stages import bucket, plan, scan, write
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, video_bytes, write_shard

CAPACITY = 4096
WORLD = 8
TIMEOUT_S = 120
SAMPLES_PER_SHARD = 500
# Qwen2.5-VL-7B's published config.json (the fields the cost model reads, and their neighbours)
QWEN25_VL_7B = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
    "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "vocab_size": 152064, "hidden_act": "silu", "max_position_embeddings": 128000,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
                      "num_heads": 16, "in_chans": 3, "out_hidden_size": 3584, "patch_size": 14,
                      "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
                      "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2, "temporal_patch_size": 2},
}
VIDEO = {"min_pixels": 16 * 28 * 28, "max_pixels": 256 * 28 * 28}  # per frame; fps 2, min 4 frames (recipe)
WORDS = ("the a cat dog red blue small large image picture shows sits near under over table window tree river "
         "mountain city street car bird flower house person child woman man holding looking at bright dark old new "
         "because while describe what is in this scene there are two three several many colorful wooden metal glass "
         "sky cloud sun light shadow left right center background green yellow road bridge boat water field").split()
RATIOS = (1.0, 4 / 3, 3 / 4, 16 / 9, 9 / 16, 2.0, 0.5)


# -- inputs -------------------------------------------------------------------------------------------
def _words(rng: random.Random, median: float, top: int) -> str:
    n = int(min(top, max(3, rng.lognormvariate(np.log(median), 1.0))))
    return " ".join(rng.choices(WORDS, k=n)).capitalize() + "."


def _image_pool(n: int, seed: int, lo: int, hi: int) -> list[bytes]:
    rng = random.Random(seed)
    pool = []
    for i in range(n):
        side = int(np.exp(rng.uniform(np.log(lo), np.log(hi))))  # log-uniform: many small, some large
        ratio = rng.choice(RATIOS)
        w, h = (side, max(40, int(side / ratio))) if ratio >= 1 else (max(40, int(side * ratio)), side)
        pool.append(image_bytes(w, h, seed=seed * 100_003 + i))
    return pool


def _video_pool(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    sizes = ((112, 84), (160, 120), (224, 168), (320, 240), (448, 336), (168, 224))
    return [video_bytes(rng.randint(6, 48), rng.choice((4, 8)), *rng.choice(sizes), seed=seed + i) for i in range(n)]


def _messages(user: list, rng: random.Random, median: float, top: int) -> dict:
    messages = [{"role": "user", "content": user}, {"role": "assistant", "content": _words(rng, median, top)}]
    if rng.random() < 0.25:
        messages += [{"role": "user", "content": _words(rng, 12, 60)},
                     {"role": "assistant", "content": _words(rng, median, top)}]
    return {"messages": messages}


def _sample(kind: str, rng: random.Random, images: list[bytes], small: list[bytes], videos: list[bytes]):
    question = {"type": "text", "text": _words(rng, 12, 80)}
    if kind == "text":
        return _messages(_words(rng, 60, 600), rng, 150, 3000), {}
    if kind == "image":
        return _messages([{"type": "image", "image": "img0.jpg"}, question], rng, 60, 1500), \
            {"img0.jpg": rng.choice(images)}
    if kind == "multi":
        media = {f"img{i}.jpg": rng.choice(small) for i in range(rng.randint(2, 4))}
        return _messages([*({"type": "image", "image": p} for p in media), question], rng, 60, 1000), media
    media = {"clip.mp4": rng.choice(videos)}
    user = [{"type": "video", "video": "clip.mp4"}]
    if rng.random() < 0.2:
        media["img0.jpg"] = rng.choice(small)
        user.append({"type": "image", "image": "img0.jpg"})
    return _messages([*user, question], rng, 60, 1000), media


def build_dataset(out: Path, name: str, n: int, mix: dict[str, float], pools: dict, seed: int) -> None:
    rng = random.Random(seed)
    kinds = rng.choices(list(mix), weights=list(mix.values()), k=n)
    shard: list[SyntheticSample] = []
    for index, kind in enumerate(kinds):
        raw, media = _sample(kind, rng, pools["images"], pools["small"], pools["videos"])
        shard.append(SyntheticSample(key=f"{name}{index:07d}", json=raw, media=media))
        if len(shard) == SAMPLES_PER_SHARD or index == n - 1:
            write_shard(out / f"shard-{index // SAMPLES_PER_SHARD:05d}.tar", shard)
            shard = []


# -- packing ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Packed:
    name: str  # "image-heavy / balanced" ...
    balanced: bool
    root: Path  # packed_wds_dir
    cost: np.ndarray  # the plan's cost of every pack, by pack id
    sizes: np.ndarray  # sub-samples of every pack, by pack id
    schedule: dict | None  # .nv-meta/vlmpack.json's schedule (balanced) or None
    n_packs: int
    lower_bound: int
    plan_seconds: float
    stage_seconds: dict  # every stage's StageResult.seconds
    plan_lines: list  # the plan stage's own summary


def pack(tmp: Path, data: Path, name: str, tag: str, *, scanned: Path | None, **sections) -> Packed:
    work, out = tmp / f"work-{tag}", tmp / f"packed-{tag}"
    if scanned is not None:  # same inputs and scan settings: the scan of the first variant is up to date here
        work.mkdir(parents=True, exist_ok=True)
        shutil.copy2(scanned / "manifest.sqlite", work / "manifest.sqlite")
    raw = {"data": {"wds_dir": str(data), "work_dir": str(work), "packed_wds_dir": str(out)},
           "sample": {"max_token_len": CAPACITY},
           "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(tmp / "processor")}},
           "video": VIDEO, "process": {"workers": 2},
           "packing": {"cost": {"model_config": str(tmp / "qwen2_5_vl_7b" / "config.json")}}}
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    config = config_from_dict(raw, source="bench_balance")
    seconds, plan_lines = {}, []
    for stage in (scan, bucket, plan, write):
        result = stage.run(config)
        stage_name = stage.__name__.rsplit(".", 1)[-1]
        if result.exit_code:
            raise SystemExit(f"{tag}: {stage_name} failed: {result.summary}")
        seconds[stage_name] = round(result.seconds, 2)
        if stage is plan:
            plan_lines = result.summary
    meta = json.loads((work / "bins" / "meta.json").read_text())
    arrays = read_plan_arrays(work)
    return Packed(name=name, balanced="data_parallel_size" in sections.get("parallel", {}), root=out,
                  cost=arrays.cost, sizes=arrays.pack_sizes,
                  schedule=json.loads((out / ".nv-meta" / "vlmpack.json").read_text())["schedule"], n_packs=int(meta["n_packs"]),
                  lower_bound=sum(int(g["lower_bound"]) for g in meta["groups"]), plan_seconds=seconds["plan"],
                  stage_seconds=seconds, plan_lines=plan_lines)


def encoder_patches(work: Path) -> dict:
    with sqlite3.connect(work / "manifest.sqlite") as conn:
        rows = conn.execute("SELECT media_type, COUNT(*), SUM(encoder_patches > 0), SUM(token_len) FROM samples "
                            "WHERE status = 'ok' GROUP BY media_type").fetchall()
        dropped = conn.execute("SELECT status, COUNT(*) FROM samples WHERE status != 'ok' GROUP BY status").fetchall()
    return {"by_media_type": {t: {"samples": n, "with_encoder_patches": int(p or 0), "tokens": int(tok)}
                              for t, n, p, tok in rows}, "dropped": dict(dropped)}


# -- reading what each rank gets -----------------------------------------------------------------------
class PackIds(PackDataset):
    """PackDataset whose per-pack encoding is just the pack id: its order and worker split are its own."""

    def encode_cooked(self, cooked, position):
        return int(cooked.pack.pack_id)


@edataclass
class PackRead(Sample):
    pack_id: int  # the pack's JSON pack_id (its plan position)


class PackIdTaskEncoder(PackTaskEncoder):
    """PackTaskEncoder that cooks each pack as usual and hands out only its id (no pixels)."""

    def encode_sample(self, sample):
        return PackRead.derive_from(sample, pack_id=int(sample.pack.pack_id))

    def encode_batch(self, batch):
        return batch


def read_pack_dataset(packed: Packed, encoder, workers: int) -> tuple[dict, int]:
    datasets = {r: PackIds(packed.root, encoder, rank=r, world_size=WORLD) for r in range(WORLD)}
    steps = datasets[0].packs_per_rank(workers)
    read = {}
    for rank, dataset in datasets.items():
        dataset.set_epoch(0)
        loader = DataLoader(dataset, batch_size=None, num_workers=workers, timeout=TIMEOUT_S if workers else 0)
        read[rank] = [int(i) for i in loader]
    return read, steps


def read_energon(packed: Packed, encoder, workers: int) -> tuple[dict, int]:
    loaders = {}
    for rank in range(WORLD):
        config = WorkerConfig(rank=rank, world_size=WORLD, num_workers=workers)
        task_encoder = PackIdTaskEncoder(encoder)
        if packed.balanced:
            dataset = train_dataset(packed.root, task_encoder, config)
        else:  # as a user would: energon's own train dataset, no shuffle buffer, no sequence cut
            dataset = get_train_dataset(packed.root, batch_size=1, shuffle_buffer_size=None,
                                        max_samples_per_sequence=None, worker_config=config,
                                        task_encoder=task_encoder)
        loaders[rank] = get_savable_loader(dataset, watchdog_timeout_seconds=TIMEOUT_S, fail_on_timeout=True)
    steps = min(len(loader) for loader in loaders.values())  # one epoch of the rank with the fewest packs
    read = {}
    for rank in range(WORLD):
        loader = loaders.pop(rank)
        batches = iter(loader)
        read[rank] = [int(next(batches).pack_id) for _ in range(steps)]
        batches.close()  # energon's loader never ends: stop its workers now, not in a later fork's garbage
        del batches, loader
        gc.collect()
    return read, steps


def step_ratios(read: dict, steps: int, cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(max / mean per step, the cost table [rank, step]) over the first ``steps`` packs each rank read."""
    ids = np.array([read[r][:steps] for r in range(WORLD)])
    table = cost[ids]
    return table.max(axis=0) / table.mean(axis=0), table


def summarize(ratios: np.ndarray, table: np.ndarray) -> dict:
    top = table.max(axis=0)
    return {"steps": int(len(ratios)), "p50": float(np.percentile(ratios, 50)), "p99": float(np.percentile(ratios, 99)),
            "worst": float(ratios.max()), "idle": float((top - table.mean(axis=0)).sum() / top.sum())}


def check_balanced_reads(read: dict, steps: int, packs_per_rank: int) -> str:
    """'ok' when every rank reads its own block, the same slot at each step, each slot once; else what broke."""
    slots = {r: [i - r * packs_per_rank for i in read[r][:steps]] for r in range(WORLD)}
    if any(not 0 <= s < packs_per_rank for r in slots for s in slots[r]):
        return "a rank read another rank's pack"
    if any(slots[r] != slots[0] for r in slots):
        return "ranks read different slots at one step"
    return "ok" if sorted(slots[0]) == list(range(packs_per_rank)) else "slots missing or repeated"


def tail_costs(packed: Packed) -> dict:
    """What limits the balanced plan: the costliest packs over the median, the plan's worst slot (its 8 packs'
    costs over the median), and the packs the schedule leaves out (no balanced loader reads them)."""
    cost, median = packed.cost, float(np.median(packed.cost))
    n, d, rest = (packed.schedule[k] for k in ("packs_per_rank", "data_parallel_size", "unscheduled"))
    table = cost[: d * n].reshape(d, n)  # [rank, slot]: train pack r * n + j
    ratio = table.max(axis=0) / table.mean(axis=0)
    worst = int(ratio.argmax())
    left = slice(d * n, d * n + rest)
    return {"median_flops": median,
            "top16_over_median": [round(float(c) / median, 4) for c in np.sort(cost)[::-1][:16]],
            "worst_slot": {"ratio": float(ratio[worst]),
                           "costs_over_median": [round(float(c) / median, 4) for c in np.sort(table[:, worst])]},
            "unscheduled": {"packs": rest, "samples": int(packed.sizes[left].sum()),
                            "share_of_samples": float(packed.sizes[left].sum() / packed.sizes.sum()),
                            "samples_per_pack": float(packed.sizes[left].mean()) if rest else 0.0,
                            "scheduled_samples_per_pack": float(packed.sizes[: d * n].mean()),
                            "cost_over_median_max": float(cost[left].max() / median) if rest else 0.0}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=20_000, help="samples per dataset")
    parser.add_argument("--image-pool", type=int, default=1200, help="distinct JPEGs per dataset")
    parser.add_argument("--video-pool", type=int, default=48, help="distinct MP4s")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--keep", type=Path, help="build in this folder and keep it (default: a temp dir)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="'pin_memory' argument is set as true")  # CPU: nothing to pin
    print("command:", shlex.join([sys.executable, *sys.argv]), flush=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_balance_") as scratch:
        tmp = args.keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        results = run(tmp, args, started)
    results["total_seconds"] = round(time.perf_counter() - started, 1)
    print(f"\ntotal wall time {results['total_seconds']:.0f} s")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.out}")


def run(tmp: Path, args, started: float) -> dict:
    def say(text: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {text}", flush=True)

    build_processor_dir(tmp / "processor", "qwen2_5_vl")
    (tmp / "qwen2_5_vl_7b").mkdir(exist_ok=True)
    (tmp / "qwen2_5_vl_7b" / "config.json").write_text(json.dumps(QWEN25_VL_7B, indent=2))
    t0 = time.perf_counter()
    pools = {"images": _image_pool(args.image_pool, 1, 150, 1400), "small": _image_pool(args.image_pool // 2, 2, 120, 700),
             "videos": _video_pool(args.video_pool, 3)}
    sets = {"image-heavy": {"image": 0.85, "multi": 0.15},
            "mixed": {"text": 0.30, "image": 0.35, "multi": 0.15, "video": 0.20}}
    for seed, (name, mix) in enumerate(sets.items()):
        build_dataset(tmp / f"data-{name}", name.split("-")[0], args.samples, mix, pools, seed)
    build_seconds = time.perf_counter() - t0
    say(f"built {len(sets)} x {args.samples} samples in {build_seconds:.1f} s")

    variants = [("image-heavy", "media_type"), ("mixed", "media_type"), ("mixed", "none")]
    results: dict = {"capacity": CAPACITY, "world": WORLD, "samples": args.samples, "build_seconds": build_seconds,
                     "datasets": {}, "rows": []}
    packed_all: list[tuple[Packed, Packed]] = []
    for name, group_by in variants:
        label = name if group_by == "media_type" else f"{name}, group_by none"
        tag = label.replace(", ", "-").replace(" ", "_")
        data = tmp / f"data-{name}"
        first = tmp / f"work-{name}-balanced" if group_by == "none" else None
        pair = []
        for balanced in (True, False):
            sections = {"packing": {"group_by": group_by}}
            if balanced:
                sections["parallel"] = {"data_parallel_size": WORLD}
            kind = "balanced" if balanced else "unbalanced"
            p = pack(tmp, data, label, f"{tag}-{kind}", scanned=first, **sections)
            first = first or tmp / f"work-{tag}-{kind}"
            say(f"{label} {kind}: {p.n_packs} packs (lower bound {p.lower_bound}), stages {p.stage_seconds}")
            for line in p.plan_lines[-3:]:
                print("     " + line)
            pair.append(p)
        packed_all.append((pair[0], pair[1]))
        patches = encoder_patches(first)
        results["datasets"][label] = {
            "manifest": patches, "n_packs": pair[0].n_packs, "lower_bound": pair[0].lower_bound,
            "fill_gap": pair[0].n_packs / pair[0].lower_bound - 1,
            "plan_seconds": {"balanced": pair[0].plan_seconds, "unbalanced": pair[1].plan_seconds},
            "stage_seconds": {"balanced": pair[0].stage_seconds, "unbalanced": pair[1].stage_seconds},
            "plan_summary": pair[0].plan_lines, "tail": tail_costs(pair[0]),
            "schedule": pair[0].schedule,
        }
        zero = [t for t, v in patches["by_media_type"].items() if t != "text" and v["with_encoder_patches"] == 0]
        if zero:
            say(f"WARNING {label}: no encoder_patches for {zero} samples: costs lack the vision term")

    encoder = PackEncoder.from_packed_dir(packed_all[0][0].root)
    for balanced, unbalanced in packed_all:
        for loader_name, reader in (("PackDataset", read_pack_dataset), ("energon", read_energon)):
            for workers in (0, 2):
                row = {"dataset": balanced.name, "loader": loader_name, "num_workers": workers}
                for packed in (balanced, unbalanced):
                    t1 = time.perf_counter()
                    read, steps = reader(packed, encoder, workers)
                    ratios, table = step_ratios(read, steps, packed.cost)
                    kind = "balanced" if packed.balanced else "unbalanced"
                    row[kind] = summarize(ratios, table) | {"read_seconds": round(time.perf_counter() - t1, 1)}
                    if packed.balanced:
                        row[kind]["slots"] = check_balanced_reads(read, steps, packed.schedule["packs_per_rank"])
                    else:
                        flat = [i for r in range(WORLD) for i in read[r][:steps]]
                        row[kind]["distinct"] = len(set(flat)) == len(flat)
                results["rows"].append(row)
                b, u = row["balanced"], row["unbalanced"]
                say(f"{balanced.name} {loader_name} w{workers}: balanced p50 {b['p50']:.4f} p99 {b['p99']:.4f} "
                    f"worst {b['worst']:.4f} ({b['slots']}) | unbalanced p50 {u['p50']:.4f} p99 {u['p99']:.4f} "
                    f"worst {u['worst']:.4f}")
    print_table(results)
    return results


def print_table(results: dict) -> None:
    print(f"\nPer step, max / mean cost over {WORLD} ranks (C = {CAPACITY}, Qwen2.5-VL-7B sizes); one epoch per rank\n")
    print("| dataset | loader | workers | steps | balanced p50 | p99 | worst | idle | unbalanced p50 | p99 | worst | "
          "idle |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in results["rows"]:
        b, u = row["balanced"], row["unbalanced"]
        print(f"| {row['dataset']} | {row['loader']} | {row['num_workers']} | {b['steps']} / {u['steps']} | "
              f"{b['p50']:.4f} | {b['p99']:.4f} | {b['worst']:.4f} | {100 * b['idle']:.2f}% | "
              f"{u['p50']:.4f} | {u['p99']:.4f} | {u['worst']:.4f} | {100 * u['idle']:.2f}% |")
    print("\n| dataset | packs | lower bound | fill gap | plan s (balanced / unbalanced) | packs per rank | "
          "left out of every step: packs (samples) |")
    print("|---|---|---|---|---|---|---|")
    for label, d in results["datasets"].items():
        left = d["tail"]["unscheduled"]
        print(f"| {label} | {d['n_packs']:,} | {d['lower_bound']:,} | {100 * d['fill_gap']:.4f}% | "
              f"{d['plan_seconds']['balanced']:.2f} / {d['plan_seconds']['unbalanced']:.2f} | "
              f"{d['schedule']['packs_per_rank']} | {left['packs']} ({left['samples']:,}, "
              f"{100 * left['share_of_samples']:.1f}%) |")
    print("\nwhat limits the balanced plan (pack cost / median pack cost):")
    for label, d in results["datasets"].items():
        tail, left = d["tail"], d["tail"]["unscheduled"]
        print(f"  {label}: costliest 8 {', '.join(f'{v:.3f}' for v in tail['top16_over_median'][:8])}; worst slot "
              f"{tail['worst_slot']['ratio']:.4f} = {', '.join(f'{v:.3f}' for v in tail['worst_slot']['costs_over_median'])}; "
              f"left-out packs hold {left['samples_per_pack']:.1f} samples each (scheduled "
              f"{left['scheduled_samples_per_pack']:.1f}), cost <= {left['cost_over_median_max']:.3f}")
    print("\nmanifest (ok samples with nonzero encoder_patches / ok samples):")
    for label, d in results["datasets"].items():
        parts = ", ".join(f"{t} {v['with_encoder_patches']}/{v['samples']}" for t, v in d["manifest"]["by_media_type"].items())
        print(f"  {label}: {parts}; dropped {d['manifest']['dropped'] or 'none'}")


if __name__ == "__main__":
    main()
