"""The whole GPU run in one command: what packing and balancing buy, measured on the card, and every attention path checked.

    bash benchmarks/gpu_suite.sh "$OUT"                    # on the device: wheels, then this (docs/performance.md)
    python benchmarks/gpu_suite.py --out DIR               # here, with .gpu-suite/data from `make gpu-prep`
    python benchmarks/gpu_suite.py --smoke --data D --out DIR   # CPU, tiny shapes (tests/test_gpu_suite_smoke.py)

Parts, in this order, each against its baseline in the same process (one module each):

    numerics     gpu_suite_numerics     packed vs each sub-sample alone: kernels, then the full Qwen2.5-VL model
    throughput   gpu_suite_throughput   training tokens/s on packs vs the same samples padded, every capacity
    cost_model   gpu_suite_balance      plan cost vs measured fwd+bwd time; balanced vs unbalanced steps, R ranks
    megatron     gpu_suite_megatron     megatron-core THD: training where TransformerEngine exists, else the data half

The data are the carried folder's (``gpu_suite_data.Layout``, built by ``gpu_suite_prep.py``); the model
is ``gpu_suite_model``'s, built once on the device in bf16 (fp32 on the CPU smoke, where bf16 means
nothing). A part that cannot run says why and the rest run; the report (``gpu_suite_report``) is
rewritten in ``--out`` after every part. Parts start only while ``--budget-s`` leaves them their
usual time. Exit 0 only when no part failed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import inspect
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # vlmpack_offline from this working tree (the device does not install it)
sys.path.insert(0, str(HERE))
import gpu_suite_balance  # noqa: E402
import gpu_suite_megatron  # noqa: E402
import gpu_suite_numerics  # noqa: E402
import gpu_suite_throughput  # noqa: E402
from gpu_suite_attention import VARLEN, register, use_attention  # noqa: E402
from gpu_suite_data import Data, Layout, loader_workers  # noqa: E402
from gpu_suite_model import build_model, parameters  # noqa: E402
from gpu_suite_report import SKIPPED, Part, exit_code, run_part, write_report  # noqa: E402

PARTS = {"numerics": gpu_suite_numerics.run, "throughput": gpu_suite_throughput.run,
         "cost_model": gpu_suite_balance.run, "megatron": gpu_suite_megatron.run}
# Per mode: each part's sizes, and the seconds it needs at least (a part starts only if the budget has them).
SETTINGS = {
    "gpu": {"throughput": {"warmup": 3, "steps": 20}, "cost_model": {"warmup": 3, "warm_every_pack": True, "repeats": 4},
            "numerics": {"packs": 2, "lengths": (700, 129, 1, 2048, 3000)}, "megatron": {"steps": 6, "warmup": 2},
            "needs_s": {"numerics": 30, "throughput": 120, "cost_model": 240, "megatron": 20}},
    # smoke: one step per arm, nothing warmed up (each CPU fwd+bwd is seconds: the 151,936-word LM head)
    "smoke": {"throughput": {"warmup": 0, "steps": 1}, "cost_model": {"warmup": 0, "warm_every_pack": False, "repeats": 3},
              "numerics": {"packs": 1, "lengths": (70, 13, 1, 200)}, "megatron": {"steps": 2, "warmup": 1},
              "needs_s": dict.fromkeys(PARTS, 0)},
}  # fmt: skip


@dataclass
class Suite:
    """What every part reads: device and dtype, the carried data, the training model (built once), settings."""

    device: str
    dtype: torch.dtype
    layout: Layout
    data: Data
    settings: dict
    log: object = print
    _model: torch.nn.Module | None = None
    _training_attention: str | None = None
    notes: dict = field(default_factory=dict)

    def model(self) -> torch.nn.Module:
        if self._model is None:
            self._model = build_model(self.layout.model_config(), device=self.device, dtype=self.dtype).train()
            use_attention(self._model, self.training_attention())
            self.notes["model_parameters"] = parameters(self._model)
        return self._model

    def attentions(self) -> list[str]:
        """The HF attention implementations the throughput and numerics parts compare."""
        found = self.device == "cuda" and importlib.util.find_spec("flash_attn") is not None
        return [VARLEN, "sdpa", *(["flash_attention_2"] if found else [])]

    def training_attention(self) -> str:
        """``VARLEN`` when ``varlen_attention`` runs here on the model's head layout, else ``sdpa`` (said in notes)."""
        if self._training_attention is None:
            from vlmpack_offline.loader import varlen_attention

            text = self.layout.model_config()["text_config"]
            heads, kv = text["num_attention_heads"], text["num_key_value_heads"]
            q = torch.zeros(16, heads, text["head_dim"], device=self.device, dtype=self.dtype)
            kv_t = torch.zeros(16, kv, text["head_dim"], device=self.device, dtype=self.dtype)
            try:
                varlen_attention(q, kv_t, kv_t, torch.tensor([0, 9, 16], dtype=torch.int32, device=self.device), 9)
                self._training_attention = VARLEN
            except Exception as error:  # noqa: BLE001 - the numerics part reports the same error as a failure
                self.notes["training_attention"] = f"{VARLEN} raised {type(error).__name__}: {error}; using sdpa"
                self._training_attention = "sdpa"
        return self._training_attention


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment(device: str, layout: Layout, workers: tuple[int, str], smoke: bool) -> dict:
    env = {"mode": "smoke (CPU, tiny shapes: measures nothing)" if smoke else "gpu", "device": device,
           "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env |= {"gpu": props.name, "gpu_memory_gib": round(props.total_memory / 2**30, 1),
                "capability": f"{props.major}.{props.minor}"}
    for name in ("transformers", "tokenizers", "numpy", "megatron-core", "megatron-energon", "flash-attn",
                 "transformer-engine"):
        env[name] = _version(name)
    try:
        from torch.nn.attention.varlen import varlen_attn

        env["torch_varlen_attn"] = str(inspect.signature(varlen_attn))
    except ImportError as error:
        env["torch_varlen_attn"] = f"not importable ({error})"
    env |= {"cpus": os.cpu_count(), "loader_workers": f"{workers[0]} ({workers[1]})",
            "data": str(layout.root), "data_built_by": layout.body.get("built_by"),
            "model_size": layout.body.get("model_size")}
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="report folder ($OUT on the device)")
    parser.add_argument("--data", type=Path, default=HERE.parent / ".gpu-suite" / "data", help="the carried data")
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, fp32: checks the script, measures nothing")
    parser.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS))
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no part the remaining seconds cannot hold (default: 450 on the GPU, none on --smoke)")
    parser.add_argument("--workers", type=int, default=None, help="DataLoader workers decoding packs (default: by /dev/shm)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    budget = args.budget_s if args.budget_s is not None else (float("inf") if args.smoke else 450.0)
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    layout = Layout.read(args.data)
    mode = "smoke" if args.smoke else "gpu"
    if layout.body.get("model_size") != mode:
        print(f"note: {args.data} was built for the {layout.body.get('model_size')!r} model, this run is {mode!r}")
    workers = loader_workers(device, args.workers)
    env = environment(device, layout, workers, args.smoke)
    parts: list[Part] = []
    if device == "cpu" and not args.smoke:
        parts = [Part(name=name, status=SKIPPED, why="no CUDA device (pass --smoke to check the script on CPU)")
                 for name in args.parts]
        write_report(args.out, env, parts, finished=True)
        print(f"skipped: no CUDA device; report in {args.out}")
        return 0
    register()
    settings = SETTINGS[mode]
    with tempfile.TemporaryDirectory(prefix="gpu_suite_") as scratch:
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        data = Data(layout=layout, scratch=Path(scratch), device=device, dtype=dtype, workers=workers[0])
        suite = Suite(device=device, dtype=dtype, layout=layout, data=data, settings=settings)
        for name in args.parts:
            left = budget - (time.perf_counter() - started)
            if left < settings["needs_s"][name]:
                parts.append(Part(name=name, status=SKIPPED, why=f"time budget: {left:.0f} s left of --budget-s "
                                  f"{budget:g}, this part needs about {settings['needs_s'][name]} s"))
            else:
                parts.append(run_part(name, lambda name=name: PARTS[name](suite)))
            write_report(args.out, env | suite.notes, parts, finished=False)
    env |= suite.notes | {"seconds": round(time.perf_counter() - started, 1)}
    json_path, text_path = write_report(args.out, env, parts, finished=True)
    print(text_path.read_text())
    print(f"report: {json_path}, {text_path}")
    return exit_code(parts)


if __name__ == "__main__":
    sys.exit(main())
