"""Scan throughput vs the per-sample image-processor baseline, on image-heavy synthetic shards.

Baseline (what the published offline-packing tool does): for every sample, decode
each image and run the real processor (``Qwen2_5_VLProcessor`` with
``Qwen2VLImageProcessorPil``; ``Qwen2VLProcessor`` for ``qwen2_vl``, ``Qwen3VLProcessor`` for ``qwen3_vl`` and
``qwen3_5`` (which transformers serves with Qwen3-VL's classes); for the other families their own processor,
with its PIL image processor where transformers has one) on text + pixels, then take ``len(input_ids)``.
vlmpack: ``stages.scan.run`` end to end (shard discovery, tar reading, header-only
image sizes, batched tokenization, sqlite commits), one worker, like the baseline.
Both must give identical token counts for every sample the baseline counted.

The baseline's cost is the same for every sample, so it runs on the first
``--baseline-samples`` only (its setup excluded from its time); vlmpack runs on
all ``--samples`` with its setup (tokenizer load, processor-dir hashing)
included. Both choices favour the baseline.

Two vlmpack figures, both on one core:
  * end to end: ``stages.scan.run`` with ``process.workers: 1``, setup included;
  * steady state: one ``ShardScanner`` (what a pool worker holds: its tokenizer is loaded
    once, untimed), the first shard scanned untimed as a warm-up, then every shard timed
    ``--repeats`` times; samples/s of the median pass. This is what each worker of a
    long scan sustains once started, the figure to compare with 1,000 samples/s per core.

And what the media integrity walk (``media/integrity.py``, on by default) costs, measured inside one run so
other programs sharing the machine blur it less than two runs apart: ``check_image`` alone on every image of
the timed shards (best of ``--repeats``), and ``--walk-pairs`` pairs of steady-state passes of one scanner
with the walk and without it (the scan module's ``check_image`` replaced by a no-op), the order alternating
within each pair; CPU seconds per pass, min / median / max of each.

    python benchmarks/bench_scan.py [--samples 1200] [--baseline-samples 150] [--shards 8] [--repeats 3]
    python benchmarks/bench_scan.py --family all     # every family with a module, one line each

End to end is reported twice: a folder's first scan (the counting tokenizer loaded with transformers and its
snapshot saved, ``tokens/tokenizer_snapshot.py``) and a later scan of the same folder (the snapshot read back), each
in a fresh cache (``VLMPACK_CACHE_DIR``) per family.

**Generic families** (``--family`` a type with a synthetic folder and no module: gemma4, glm5_next, molmo2, ...): the
generic fast path (``families/generic.py``, proven at folder load) against the slow path (``tokens/slow.py``: the
folder's own processor on decoded images and frames) in the same run, on the same mixed shards (text, one and
two images, videos). Both are one ``ShardScanner`` (what a scan worker holds), the slow one given the
``SlowCounter`` the scan falls back to where the proof fails; the first shard is scanned untimed by each as a
warm-up, then every other shard is timed (the generic path ``--repeats`` times, median pass). Every sample must
get the same status and ``token_len`` from both (a video the processor's rule refuses is a drop in both).
Setup is reported apart: the generic path's includes its proof (a fresh proof cache), the slow path's loading
``AutoProcessor``. Both run with ``loss.train_on: all`` (counts only: where the labels fall is not measured; with
the default, the synthetic Gemma4 and Molmo2 folders dropped every sample as ``no_labels`` when this was written,
on either path). The slow path needs torchvision: run it in ``.venv-ref``, with ``LD_LIBRARY_PATH`` as
``make test-ref`` sets it::

    LD_LIBRARY_PATH="$(.venv-ref/bin/python -m vlmpack_offline.synthetic.torchcodec_env .venv-ref/ffmpeg-libs)" \
        .venv-ref/bin/python benchmarks/bench_scan.py --family gemma4 --samples 120 --shards 4
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import io
import os
import random
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image
from transformers import (
    AutoProcessor,
    Glm4vProcessor,
    InternVLProcessor,
    LlavaOnevisionProcessor,
    Qwen2_5_VLProcessor,
    Qwen2VLProcessor,
    Qwen3VLProcessor,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.families import FAST_FAMILIES
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.media import check_image
from vlmpack_offline.stages import _scan_shard, scan
from vlmpack_offline.stages._scan_shard import ShardScanner, ShardTask
from vlmpack_offline.synthetic.processor_dir import FOLDER_MODULES, build_processor_dir
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, video_bytes, write_shard
from vlmpack_offline.tario import iter_samples, read_range
from vlmpack_offline.tokens import load_tokenizer
from vlmpack_offline.tokens.factory import counting_path

MODULE_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "gemma3", "internvl", "glm4v", "kimi_k25", "mistral3",
                   "llava_onevision")  # fmt: skip
GENERIC_FAMILIES = tuple(sorted(t for t in FOLDER_MODULES if t not in FAST_FAMILIES))  # folders the suite builds

_WORDS = "the a cat dog red blue image shows sits near table window tree river city street car bird".split()
IMAGES_PER_SAMPLE = (1, 1, 2)  # make_shards draws a sample's image count from these


def question(rng: random.Random) -> str:
    """A sample's question text: 5-40 words of ``_WORDS``."""
    return " ".join(rng.choices(_WORDS, k=rng.randint(5, 40)))


def answer(rng: random.Random) -> str:
    """A sample's answer text: 5-80 words of ``_WORDS``."""
    return " ".join(rng.choices(_WORDS, k=rng.randint(5, 80)))


def make_shards(root: Path, n_samples: int, n_shards: int, seed: int = 0) -> list[Path]:
    """Samples with 1-2 JPEG images of 300-1500 px per side and a short Q/A."""
    rng = random.Random(seed)
    per_shard: list[list[SyntheticSample]] = [[] for _ in range(n_shards)]
    for index in range(n_samples):
        n_images = rng.choice(IMAGES_PER_SAMPLE)
        media = {
            f"img{i}.jpg": image_bytes(rng.randint(300, 1500), rng.randint(300, 1500), seed=index * 7 + i)
            for i in range(n_images)
        }
        user = [{"type": "image", "image": part} for part in media]
        user.append({"type": "text", "text": question(rng)})
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": answer(rng)}]
        per_shard[index % n_shards].append(
            SyntheticSample(key=f"s{index:06d}", json={"messages": messages}, media=media)
        )
    return [write_shard(root / f"shard-{n:06d}.tar", samples) for n, samples in enumerate(per_shard)]


def baseline(
    shards: list[Path], processor_dir: Path, family: str, limit: int
) -> tuple[dict[str, int], float, float]:
    """Decode every image and run the real processor per sample; returns ({id: token_len}, seconds, CPU seconds)."""
    tokenizer = load_tokenizer(str(processor_dir))
    processor = reference_processor(family, processor_dir, tokenizer)
    counts: dict[str, int] = {}
    start, start_cpu = time.perf_counter(), time.process_time()
    for path in shards:
        with open(path, "rb") as handle:
            for raw in iter_samples(path):
                parts = {m.part: read_range(handle, m.offset, m.size) for m in raw.members}
                conversation = parse_conversation(parts.pop("json"), key=raw.key, parts=list(parts))
                text = tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
                images = [Image.open(io.BytesIO(parts[m.part])).convert("RGB") for m in conversation.media]
                if family == "llava_onevision" and images:  # one list per sample, as apply_chat_template passes them
                    images = [images]  # (its processor tiles a sample's only image, not those of a multi-image one)
                ids = processor(text=[text], images=images or None)["input_ids"][0]
                counts[f"{path.name}/{raw.key}"] = len(ids)
                if len(counts) >= limit:
                    return counts, time.perf_counter() - start, time.process_time() - start_cpu
    return counts, time.perf_counter() - start, time.process_time() - start_cpu


def reference_processor(family: str, processor_dir: Path, tokenizer):
    """The family's real HF processor (PIL image processor; without its video processor, which needs torchvision)."""
    images_only = {"get_attributes": classmethod(lambda c: ["image_processor", "tokenizer"])}
    qwen = {"qwen2_vl": Qwen2VLProcessor, "qwen2_5_vl": Qwen2_5_VLProcessor, "qwen3_vl": Qwen3VLProcessor,
            "qwen3_5": Qwen3VLProcessor}  # qwen3_5: AutoProcessor gives Qwen3VLProcessor too
    if family in qwen:
        base = qwen[family]
        image_processor = Qwen2VLImageProcessorPil.from_pretrained(processor_dir)
        return type("ImageOnly", (base,), images_only)(
            image_processor=image_processor, tokenizer=tokenizer, chat_template=tokenizer.chat_template
        )
    if family == "internvl":
        return type("ImageOnly", (InternVLProcessor,), images_only).from_pretrained(str(processor_dir))
    if family == "llava_onevision":  # LlavaOnevisionProcessor's video processor needs torchvision
        return type("ImageOnly", (LlavaOnevisionProcessor,), images_only).from_pretrained(str(processor_dir))
    if family == "glm4v":  # Glm4vProcessor's video processor needs torchvision
        return type("ImageOnly", (Glm4vProcessor,), images_only).from_pretrained(str(processor_dir))
    return AutoProcessor.from_pretrained(str(processor_dir))  # gemma3: builds without torchvision; kimi_k25, mistral3: need it


def _config(shards: list[Path], processor_dir: Path, work: Path, train_on: str | None = None):
    loss = {"loss": {"train_on": train_on}} if train_on else {}
    return config_from_dict(
        {
            "data": {
                "wds_dir": str(shards[0].parent),
                "work_dir": str(work),
                "packed_wds_dir": str(work.parent / f"{work.name}-out"),
            },
            "sample": {"max_token_len": 1_000_000},
            "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
            "process": {"workers": 1},
            **loss,
        },
        source="bench",
    )


def vlmpack_scan(shards: list[Path], processor_dir: Path, work: Path) -> tuple[dict[str, int], float, float]:
    """({id: token_len}, wall seconds, CPU seconds) of ``scan.run``; CPU seconds are this process's, every thread's
    (the tokenizer snapshot's read-ahead thread included): samples per CPU second is samples/s per core."""
    config = _config(shards, processor_dir, work)
    start, start_cpu = time.perf_counter(), time.process_time()
    result = scan.run(config)
    seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    assert result.counts["dropped"] == 0, result.summary
    with Manifest(manifest_path(work)) as manifest:
        return {s.id: s.token_len for s in manifest.iter_samples()}, seconds, cpu


def steady_state(
    shards: list[Path], processor_dir: Path, work: Path, repeats: int
) -> tuple[float, float, float, int]:
    """(setup s, median wall s and median CPU s of one pass over shards[1:], samples per pass) in one scanner.

    CPU seconds are this process's (all its threads): samples per CPU second is samples/s per
    core, which other programs sharing the machine do not lower as they lower wall-clock rates.
    """
    start = time.perf_counter()
    scanner = ShardScanner(_config(shards, processor_dir, work))
    setup = time.perf_counter() - start
    tasks = [ShardTask(shard=p.name, path=str(p)) for p in shards]
    scanner.scan(tasks[0])  # warm-up: first template compile, first tokenizer call, page cache
    passes, cpu, n = [], [], 0
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        n = sum(len(scanner.scan(task).samples) for task in tasks[1:])
        passes.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return setup, statistics.median(passes), statistics.median(cpu), n


def walk_cpu(shards: list[Path], repeats: int) -> tuple[float, int]:
    """(best CPU seconds of ``check_image`` over every image of ``shards``, images walked)."""
    datas = []
    for path in shards:
        with open(path, "rb") as handle:
            datas += [read_range(handle, m.offset, m.size) for raw in iter_samples(path) for m in raw.members
                      if m.part != "json"]  # fmt: skip
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for data in datas:
            check_image(data)
        best = min(best, time.process_time() - start)
    return best, len(datas)


def walk_pairs(shards: list[Path], processor_dir: Path, work: Path, pairs: int) -> tuple[list[float], list[float]]:
    """CPU seconds of passes over shards[1:] by one scanner (first shard as warm-up): (with the walk, without)."""
    scanner = ShardScanner(_config(shards, processor_dir, work))
    tasks = [ShardTask(shard=p.name, path=str(p)) for p in shards]
    scanner.scan(tasks[0])
    walked, skipped = [], []
    for pair in range(pairs):
        for walk in (True, False) if pair % 2 == 0 else (False, True):
            _scan_shard.check_image = check_image if walk else _no_walk
            start = time.process_time()
            for task in tasks[1:]:
                scanner.scan(task)
            (walked if walk else skipped).append(time.process_time() - start)
    _scan_shard.check_image = check_image
    return walked, skipped


def _no_walk(data: bytes, *, part: str = "image") -> None:
    return None


# -- generic families: the generic fast path vs the slow path ------------------------------------------------
# (kind, share of samples): text, one image, two images, one video
MIX = (("text", 0.2), ("image", 0.35), ("two_images", 0.2), ("video", 0.25))


def make_mixed_shards(root: Path, n_samples: int, n_shards: int, seed: int = 0) -> list[Path]:
    """Samples of every kind in ``MIX`` (in turn, so every shard holds each): JPEGs of 300-1500 px a side, MP4s
    of 24-96 frames at 8-30 fps and 96-192 px a side (small, so the slow path's decoding is cheap: this favours
    it), a short Q/A."""
    rng = random.Random(seed)
    kinds = [kind for kind, share in MIX for _ in range(round(share * 20))]
    per_shard: list[list[SyntheticSample]] = [[] for _ in range(n_shards)]
    for index in range(n_samples):
        kind = kinds[index % len(kinds)]
        media: dict[str, bytes] = {}
        if kind in ("image", "two_images"):
            for i in range(1 if kind == "image" else 2):
                media[f"img{i}.jpg"] = image_bytes(rng.randint(300, 1500), rng.randint(300, 1500), seed=index * 7 + i)
        elif kind == "video":
            media["clip.mp4"] = video_bytes(rng.randint(24, 96), rng.choice((8, 12, 24, 30)), rng.choice((96, 128, 192)),
                                            rng.choice((96, 128, 160)), seed=index)  # fmt: skip
        user = [{"type": "image" if part.endswith(".jpg") else "video",
                 "image" if part.endswith(".jpg") else "video": part} for part in media]  # fmt: skip
        user.append({"type": "text", "text": question(rng)})
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": answer(rng)}]
        per_shard[index % n_shards].append(SyntheticSample(key=f"s{index:06d}", json={"messages": messages}, media=media))
    return [write_shard(root / f"shard-{n:06d}.tar", samples) for n, samples in enumerate(per_shard)]


@dataclasses.dataclass(frozen=True, slots=True)
class PathRun:
    """One path's scanner over the timed shards."""

    line: str  # what vlmpack scan prints for it
    setup_s: float  # scanner construction (the generic path: its proof; the slow path: AutoProcessor)
    wall_s: float  # one pass over shards[1:] (the generic path: median of its passes)
    cpu_s: float  # this process's CPU seconds for that pass
    results: dict[str, tuple[str, int]]  # sample id -> (status, token_len)


def _pass(scanner: ShardScanner, tasks: list[ShardTask]) -> tuple[float, float, dict[str, tuple[str, int]]]:
    start, start_cpu = time.perf_counter(), time.process_time()
    records = [r for task in tasks for r in scanner.scan(task).samples]
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    return wall, cpu, {r.id: (r.status, r.token_len) for r in records}


def path_run(shards: list[Path], processor_dir: Path, work: Path, *, slow: bool, repeats: int) -> PathRun:
    """The generic path (``slow=False``: ``make_counter``, proven at load) or the slow path (its ``SlowCounter`` on
    the same rules, as ``make_counter`` builds it where the proof fails) scanning ``shards[1:]``."""
    from vlmpack_offline.tokens.slow import SlowCounter

    config = _config(shards, processor_dir, work, train_on="all")  # counts only (module doc)
    start = time.perf_counter()
    scanner = ShardScanner(config)
    rules = scanner.counter.rules
    if not slow and rules.generic is None:  # nothing to compare: say so, not a ratio of the slow path to itself
        raise SystemExit(f"{counting_path(rules)}: the generic path does not serve this folder here")
    if slow:
        rules = dataclasses.replace(rules, generic=None, slow_reason="forced by bench_scan.py")
        scanner.counter = SlowCounter(rules, config)
    setup = time.perf_counter() - start
    tasks = [ShardTask(shard=p.name, path=str(p)) for p in shards]
    scanner.scan(tasks[0])  # warm-up: template compile, first processor call, page cache
    passes = [_pass(scanner, tasks[1:]) for _ in range(1 if slow else repeats)]
    wall, cpu, results = sorted(passes, key=lambda p: p[0])[len(passes) // 2]
    return PathRun(line=counting_path(rules), setup_s=setup, wall_s=wall, cpu_s=cpu, results=results)


def generic_vs_slow(args: argparse.Namespace) -> int:
    """Print the two paths' rates and their ratio for one generic family; 1 when counts differ or below target."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["VLMPACK_CACHE_DIR"] = str(root / "cache")  # the generic setup includes its proof
        builder = importlib.import_module(f"vlmpack_offline.synthetic.{FOLDER_MODULES[args.family]}")
        takes_video = getattr(builder, "VIDEO", {}) is not None  # VIDEO = None: its processor takes no video
        processor_dir = build_processor_dir(root / "processor", args.family, video=takes_video)
        shards = make_mixed_shards(root / "wds", args.samples, args.shards)
        fast = path_run(shards, processor_dir, root / "work-generic", slow=False, repeats=args.repeats)
        slow = path_run(shards, processor_dir, root / "work-slow", slow=True, repeats=1)
    n = len(fast.results)
    differ = sorted(k for k in fast.results if fast.results[k] != slow.results.get(k))
    drops = sum(1 for status, _ in fast.results.values() if status != "ok")
    fast_rate, slow_rate = n / fast.wall_s, n / slow.wall_s
    ratio, cpu_ratio = fast_rate / slow_rate, slow.cpu_s / fast.cpu_s
    print("command:", shlex.join(["python", "benchmarks/bench_scan.py", *args.argv]))
    print(f"family {args.family}: {n} timed samples (shards 2-{args.shards}; mix "
          f"{', '.join(f'{kind} {share:.0%}' for kind, share in MIX)}), {drops} dropped by both paths' rules")
    print(f"identical status and token_len for every sample: {not differ} ({len(differ)} differ"
          f"{': ' + ', '.join(f'{k} {fast.results[k]} vs {slow.results.get(k)}' for k in differ[:5]) if differ else ''})")
    for name, run, rate in (("generic", fast, fast_rate), ("slow", slow, slow_rate)):
        print(f"  {name:8s} {run.line}")
        print(f"           setup {run.setup_s:.2f}s; {run.wall_s:.2f}s wall, {run.cpu_s:.2f}s CPU per pass: "
              f"{rate:.1f} samples/s, {n / run.cpu_s:.1f} per CPU second")
    print(f"speed-up: {ratio:.1f}x samples/s (wall), {cpu_ratio:.1f}x per CPU second (target >= {args.min_ratio:.0f}x)")
    if differ or not fast.line.startswith(f"{args.family}: generic fast path"):
        return 1
    return 0 if ratio >= args.min_ratio else 1


def _spread(values: list[float]) -> str:
    return f"{min(values):.0f} / {statistics.median(values):.0f} / {max(values):.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=1200)
    parser.add_argument("--baseline-samples", type=int, default=150)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--family", choices=(*MODULE_FAMILIES, *GENERIC_FAMILIES, "all"), default="qwen2_5_vl",
                        help="a family with a module: fast path vs the per-sample processor baseline; a generic "
                             "family: the generic fast path vs the slow path (module doc); all: every family "
                             "with a module, one line each")
    parser.add_argument("--repeats", type=int, default=3, help="timed steady-state passes (median)")
    parser.add_argument("--walk-pairs", type=int, default=6,
                        help="steady-state passes with and without the media integrity walk, alternating")
    parser.add_argument(
        "--min-ratio", type=float, default=None, help="exit 1 when the speed-up is below this (20, generic: 30)"
    )
    parser.add_argument("--line", action="store_true", help=argparse.SUPPRESS)  # one table line (--family all)
    args = parser.parse_args(argv)
    if args.shards < 2:
        parser.error("--shards must be at least 2 (the first one warms the steady-state scanner up)")
    args.argv = sys.argv[1:] if argv is None else argv
    if args.family in GENERIC_FAMILIES:
        args.min_ratio = 30.0 if args.min_ratio is None else args.min_ratio
        return generic_vs_slow(args)
    args.min_ratio = 20.0 if args.min_ratio is None else args.min_ratio
    if args.family == "all":
        return every_family(args)
    return module_family(args, args.family, walk=not args.line)


def module_family(args: argparse.Namespace, family: str, *, walk: bool) -> int:
    """vlmpack (end to end, steady state) against the per-sample processor baseline for one family with a module;
    with ``walk`` also what the integrity walk costs. Prints the figures; 1 when counts differ or below target."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["VLMPACK_CACHE_DIR"] = str(root / "cache")
        processor_dir = build_processor_dir(root / "processor", family)
        shards = make_shards(root / "wds", args.samples, args.shards)
        cold, cold_s, _ = vlmpack_scan(shards, processor_dir, root / "work-cold")  # the folder's first scan
        ours, ours_s, ours_cpu = vlmpack_scan(shards, processor_dir, root / "work")  # every later one (snapshot)
        setup_s, pass_s, pass_cpu, pass_n = steady_state(shards, processor_dir, root / "work-steady", args.repeats)
        if walk:
            walk_s, walked = walk_cpu(shards[1:], args.repeats)
            with_walk, without_walk = walk_pairs(shards, processor_dir, root / "work-pairs", args.walk_pairs)
        theirs, theirs_s, theirs_cpu = baseline(shards, processor_dir, family, args.baseline_samples)
    mismatches = [k for k in theirs if theirs[k] != ours.get(k) or theirs[k] != cold.get(k)]
    ours_rate, theirs_rate = len(ours) / ours_s, len(theirs) / theirs_s
    ratio = ours_rate / theirs_rate
    steady_rate = pass_n / pass_s
    if not walk:  # one line per family (--family all)
        print(f"{family:16s} {theirs_rate:7.1f} {len(cold) / cold_s:9.0f} {ours_rate:9.0f} {steady_rate:9.0f} "
              f"{pass_n / pass_cpu:9.0f} {ratio:7.1f}x {steady_rate / theirs_rate:7.1f}x {len(mismatches):>4d}", flush=True)
        return 1 if mismatches or len(ours) != args.samples or ratio < args.min_ratio else 0
    print("command:", shlex.join(["python", "benchmarks/bench_scan.py", *args.argv]))
    print(
        f"samples: vlmpack {len(ours)}, baseline {len(theirs)}; identical counts on the baseline's "
        f"samples: {not mismatches} ({len(mismatches)} mismatches)"
    )
    print(f"baseline (decode + {family} processor per sample): {theirs_s:.2f}s, {theirs_rate:.1f} samples/s; per CPU "
          f"second {len(theirs) / theirs_cpu:.1f}")
    print(f"vlmpack scan, the folder's first (stage end to end incl. setup and saving the tokenizer snapshot, 1 worker): "
          f"{cold_s:.2f}s, {len(cold) / cold_s:.1f} samples/s")
    print(f"vlmpack scan (stage end to end incl. setup, 1 worker):  {ours_s:.2f}s, {ours_rate:.1f} samples/s; "
          f"{ours_cpu:.2f} CPU seconds (every thread), {len(ours) / ours_cpu:.0f} per CPU second (target >= 1500 "
          "per core)")
    print(f"vlmpack steady state (1 core, setup {setup_s:.2f}s excluded): {pass_n} samples in {pass_s:.2f}s "
          f"(median of {args.repeats}), {steady_rate:.0f} samples/s; per CPU second {pass_n / pass_cpu:.0f} "
          "samples (target >= 4000 per core)")
    print(f"integrity walk: {walked} images in {walk_s * 1e3:.1f} ms CPU ({walk_s / walked * 1e6:.1f} us each), "
          f"{100 * walk_s / pass_cpu:.1f}% of the steady state's CPU per pass: it adds "
          f"{100 * walk_s / (pass_cpu - walk_s):.1f}% to the scan without it")
    on, off = [pass_n / s for s in with_walk], [pass_n / s for s in without_walk]
    if args.walk_pairs:  # --walk-pairs 0: no passes to compare
        print(f"steady state with and without the walk, {args.walk_pairs} alternating passes each, samples per CPU "
              f"second min / median / max: with {_spread(on)}, without {_spread(off)}; the walk costs "
              f"{100 * (1 - statistics.median(on) / statistics.median(off)):.1f}% (medians), "
              f"{100 * (1 - max(on) / max(off)):.1f}% (best passes)")
    cpu_ratio = (len(ours) / ours_cpu) / (len(theirs) / theirs_cpu)
    print(f"speed-up: {ratio:.1f}x end to end, {steady_rate / theirs_rate:.1f}x steady state "
          f"(target >= {args.min_ratio:.0f}x end to end); per CPU second {cpu_ratio:.1f}x end to end, "
          f"{(pass_n / pass_cpu) / (len(theirs) / theirs_cpu):.1f}x steady state")
    if mismatches or len(ours) != args.samples:
        return 1
    return 0 if ratio >= args.min_ratio else 1


def every_family(args: argparse.Namespace) -> int:
    """``module_family`` for every family with a module, one line each, each in a fresh process (a family's run
    is not slowed by what earlier ones left in memory); a family whose baseline processor cannot be built here
    (it needs torchvision: kimi_k25, mistral3 in ``.venv``) says so and is left out."""
    import subprocess

    print("command:", shlex.join(["python", "benchmarks/bench_scan.py", *args.argv]))
    print(f"{args.samples} image samples per family (1-2 JPEGs of 300-1500 px), 1 worker; samples/s, baseline on the "
          f"first {args.baseline_samples}; 'e2e first' is a folder's first scan (tokenizer snapshot saved)")
    print(f"{'family':16s} {'baseline':>7s} {'e2e first':>9s} {'e2e':>9s} {'steady':>9s} {'per CPU s':>9s} "
          f"{'e2e x':>8s} {'steady x':>8s} {'diff':>4s}", flush=True)
    failed = 0
    for family in MODULE_FAMILIES:
        child = [sys.executable, __file__, "--family", family, "--line", "--samples", str(args.samples),
                 "--baseline-samples", str(args.baseline_samples), "--shards", str(args.shards),
                 "--repeats", str(args.repeats), "--min-ratio", str(args.min_ratio)]  # fmt: skip
        done = subprocess.run(child, capture_output=True, text=True, check=False)
        lines = done.stdout.strip().splitlines()
        if lines and lines[-1].startswith(family):
            print(lines[-1], flush=True)
            failed |= done.returncode
        else:
            why = (done.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"{family:16s} not run here: {why}", flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
