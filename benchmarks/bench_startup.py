"""Start-up cost of the ``vlmpack`` command: how long before the first sample is counted, and a no-op rerun.

Every figure is a fresh ``python`` process (what a user, ``scripts/pack_wds.sh`` or a scheduler starts), timed
from this script's ``subprocess.run`` to its exit, ``--runs`` times each, min / median / max::

    python -c pass                 the interpreter alone: the floor
    vlmpack --help                 the CLI: click and the command modules, no stage
    vlmpack scan, 1 sample         a fresh work_dir each run: config, processor rules, tokenizer, one Qwen2.5-VL
                                   image sample counted and committed (synthetic folder and shard, as
                                   ``benchmarks/bench_scan.py`` builds them)
      first sample committed       the same run, to the moment the manifest commits its one shard
                                   (``Manifest.write_shard``, wrapped here; the sample is counted by then)
    vlmpack scan, no-op rerun      the finished work_dir again: it answers up to date
    vlmpack scan, new folder       the 1-sample scan with an empty cache (``$VLMPACK_CACHE_DIR``, disk_cache.py): a
                                   processor folder's first scan on a machine, which loads the tokenizer with
                                   transformers, proves the loader can serve the folder, and keeps both

The other scans run with a cache the first of them filled (untimed), as every later scan of that folder does.
Beside each wall figure, the process's CPU seconds (user + system, every thread; ``getrusage`` of the children):
what a busy machine's other programs do not inflate, and what the tokenizer's read-ahead thread adds.

The scans run through ``python -m vlmpack_offline`` (the console script's own ``main``), with the synthetic
inputs built once in a temporary folder::

    python benchmarks/bench_startup.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, write_shard

# Run in the child: wrap Manifest.write_shard to print when the first shard is committed (seconds since the
# epoch, compared with the parent's launch time), then run the CLI as the console script does.
_FIRST_COMMIT = """
import sys, time
from vlmpack_offline import manifest
_write = manifest.Manifest.write_shard
def write_shard(self, *args, **kwargs):
    out = _write(self, *args, **kwargs)
    print(f"FIRST_COMMIT {time.time():.6f}", file=sys.stderr, flush=True)
    return out
manifest.Manifest.write_shard = write_shard
from vlmpack_offline.cli import main
sys.argv = ["vlmpack", *sys.argv[1:]]
main()
"""


def _inputs(root: Path) -> Path:
    """A Qwen2.5-VL processor folder, one shard of one image sample, and a config naming both; the config."""
    processor = build_processor_dir(root / "processor", "qwen2_5_vl")
    messages = [{"role": "user", "content": [{"type": "image", "image": "img0.jpg"},
                                             {"type": "text", "text": "What is in this picture?"}]},
                {"role": "assistant", "content": "A small red house near a river."}]  # fmt: skip
    sample = SyntheticSample(key="s000000", json={"messages": messages}, media={"img0.jpg": image_bytes(640, 480)})
    write_shard(root / "wds" / "shard-000000.tar", [sample])
    config = {
        "data": {"wds_dir": str(root / "wds"), "work_dir": str(root / "work"), "packed_wds_dir": str(root / "out")},
        "sample": {"max_token_len": 4096},
        "model": {"model_type": "qwen2_5_vl", "processor_kwargs": {"pretrained_model_name_or_path": str(processor)}},
        "process": {"workers": 1},
    }
    path = root / "config.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


_CPU: dict[str, list[float]] = {}  # figure -> the CPU seconds (user + system, every thread) of each of its processes


def _timed(argv: list[str], env: dict[str, str], figure: str = "") -> tuple[float, subprocess.CompletedProcess]:
    """Wall seconds of one process and its output; its CPU seconds go to ``_CPU[figure]`` (the children's usage
    before and after: one child at a time). CPU seconds are what other programs on a busy machine do not inflate."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{shlex.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    if figure:
        _CPU.setdefault(figure, []).append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return seconds, done


def _spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="processes timed per figure")
    args = parser.parse_args(argv)
    env = {**os.environ, "TQDM_DISABLE": "1"}
    python = sys.executable
    times: dict[str, list[float]] = {k: [] for k in ("pass", "help", "scan", "first", "noop", "cold")}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = _inputs(root)
        env["VLMPACK_CACHE_DIR"] = str(root / "cache")
        _timed([python, "-m", "vlmpack_offline", "scan", "--config", str(config), "--set",
                f"data.work_dir={root / 'work-warm-up'}"], env)  # fmt: skip
        for run in range(args.runs):  # interleaved, so a busy moment of the machine blurs every figure alike
            times["pass"].append(_timed([python, "-c", "pass"], env, "pass")[0])
            times["help"].append(_timed([python, "-m", "vlmpack_offline", "--help"], env, "help")[0])
            work = root / f"work-{run}"
            scan = [python, "-c", _FIRST_COMMIT, "scan", "--config", str(config), "--set", f"data.work_dir={work}"]
            launched = time.time()
            seconds, done = _timed(scan, env, "scan")
            times["scan"].append(seconds)
            first = [line for line in done.stderr.splitlines() if line.startswith("FIRST_COMMIT ")]
            if not first or "1 ok" not in done.stdout:
                raise SystemExit(f"the 1-sample scan did not count its sample:\n{done.stdout}\n{done.stderr}")
            times["first"].append(float(first[0].split()[1]) - launched)
            seconds, done = _timed(scan, env, "noop")
            if "up to date" not in done.stdout:
                raise SystemExit(f"the rerun was not a no-op:\n{done.stdout}")
            times["noop"].append(seconds)
            cold = {**env, "VLMPACK_CACHE_DIR": str(root / f"cache-{run}")}
            times["cold"].append(_timed([*scan[:-1], f"data.work_dir={work}-new-folder"], cold, "cold")[0])
    print("command:", shlex.join(["python", "benchmarks/bench_startup.py", *(sys.argv[1:] if argv is None else argv)]))
    print(f"wall per process, min / median / max of {args.runs} (cores: {os.cpu_count()}):")
    print(f"  python -c pass                  {_spread(times['pass'])}   CPU {_spread(_CPU['pass'])}")
    print(f"  vlmpack --help                  {_spread(times['help'])}   CPU {_spread(_CPU['help'])}")
    print(f"  vlmpack scan, 1 sample          {_spread(times['scan'])}   CPU {_spread(_CPU['scan'])}  (target < 1.5 s)")
    print(f"    first sample committed at     {_spread(times['first'])}")
    print(f"  vlmpack scan, no-op rerun       {_spread(times['noop'])}   CPU {_spread(_CPU['noop'])}  (target < 1 s)")
    print(f"  vlmpack scan, new folder        {_spread(times['cold'])}   CPU {_spread(_CPU['cold'])}  (its first scan on "
          "this machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
