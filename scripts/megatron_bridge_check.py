"""Run vlmpack's Megatron-Bridge provider and batches through Megatron-Bridge's own code, on CPU.

    python scripts/megatron_bridge_check.py --bridge-src ~/Megatron-Bridge/src --packed /data/packed --cp 2

Megatron-Bridge's VLM packing code needs a release newer than the registry's (0.3.1 pins
transformers < 5), so this check reads a Megatron-Bridge source tree instead of an install, and
imports only what it checks: ``data/base.py`` (``DatasetProvider``, ``DatasetBuildContext``),
``training/utils/packed_seq_utils.py`` (``get_packed_seq_params``) and ``training/vlm_step.py``
(``get_batch_from_iterator``). Its package ``__init__`` (which imports every model) is bypassed,
and the modules ``vlm_step`` imports only for what ``get_batch_from_iterator`` does not use are
stubbed. Checked, with megatron-core installed (``pip install 'vlmpack-offline[megatron]'``):

1. ``VlmpackDatasetProvider`` is a ``DatasetProvider``; ``build_datasets`` with a context whose
   process groups match gives train / val streams, and refuses a CP size the groups contradict;
2. ``get_packed_seq_params`` builds from our batch the same ``PackedSeqParams`` as vlmpack's;
3. ``get_batch_from_iterator`` keeps every key our batch carries (it sets unknown ones to None),
   and ``visual_inputs.normalized_for_model()`` gives the vision tensors;
4. the stream's ``save_state`` returns energon's state;
5. for a Qwen2.5-VL folder: Megatron-Bridge's Qwen2.5-VL position path (its
   ``unpack_mcore_thd_tensor_for_position_ids``, the HF model's ``get_rope_index`` over those rows,
   ``repack_mcore_thd_position_ids``) gives our ``position_ids`` on every real token.

Exit 0 when all hold. Not part of the test suite: the Megatron-Bridge tree is not a dependency.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import torch

KEYS = ("tokens", "input_ids", "labels", "loss_mask", "position_ids", "visual_inputs", "cu_seqlens_q",
        "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded", "max_seqlen_q", "max_seqlen_kv")
PARAMS = ("qkv_format", "cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded",
          "max_seqlen_q", "max_seqlen_kv")


class _Stub(types.ModuleType):
    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return type(attr, (), {})


class _Group:
    def __init__(self, rank: int, size: int) -> None:
        self._rank, self._size = rank, size

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size


def _load_bridge(src: Path) -> None:
    import megatron.core  # noqa: F401  (the real one, before the bridge namespace is set up)

    root = src / "megatron" / "bridge"
    if not (root / "data" / "base.py").is_file():
        sys.exit(f"{src}: no megatron/bridge/data/base.py; pass the src/ folder of a Megatron-Bridge checkout")
    for name, sub in [("megatron.bridge", ""), ("megatron.bridge.data", "data"), ("megatron.bridge.training", "training"),
                      ("megatron.bridge.training.utils", "training/utils"),
                      ("megatron.bridge.training.tokenizers", "training/tokenizers")]:
        module = types.ModuleType(name)
        module.__path__ = [str(root / sub)]
        sys.modules[name] = module
    for name in ("megatron.bridge.training.tokenizers.tokenizer", "megatron.bridge.training.config",
                 "megatron.bridge.training.losses", "megatron.bridge.training.state",
                 "megatron.bridge.training.utils.flop_utils", "megatron.bridge.training.utils.pg_utils"):
        sys.modules[name] = _Stub(name)
    sys.path.insert(0, str(src))


def _same(a, b) -> bool:
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


def _is_qwen25(packed: str) -> bool:
    from vlmpack_offline.packed_settings import read_packed_settings

    return read_packed_settings(packed)["model"].get("model_type") == "qwen2_5_vl"


def _check_qwen25_positions(batches, packed_seq_params, packed_seq_utils) -> list[str]:
    """Positions as Megatron-Bridge's Qwen2.5-VL recomputes them (modeling_qwen25_vl.py) vs ours."""
    from vlmpack_offline.synthetic.tiny_models import tiny_qwen_vl

    model = tiny_qwen_vl("qwen2_5_vl").model  # only its config (token ids, merge size) matters here
    problems = []
    for batch in batches:
        params = packed_seq_params(batch)
        rows, mask, starts, lengths = packed_seq_utils.unpack_mcore_thd_tensor_for_position_ids(batch["input_ids"], params)
        types_ = torch.zeros_like(rows, dtype=torch.int32)
        types_[rows == model.config.image_token_id] = 1
        types_[rows == model.config.video_token_id] = 2
        vision = batch["visual_inputs"].as_model_kwargs()
        kwargs = {k: vision[k] for k in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts") if k in vision}
        positions, _ = model.get_rope_index(rows, types_, attention_mask=mask.long(), **kwargs)
        theirs = packed_seq_utils.repack_mcore_thd_position_ids(positions, padded_starts=starts, lengths=lengths,
                                                                total_length=batch["total_tokens"])
        real = torch.zeros(batch["total_tokens"], dtype=torch.bool)
        for start, length in zip(starts, lengths, strict=True):
            real[start : start + length] = True
        if not torch.equal(theirs[..., real], batch["position_ids"][..., real]):
            problems.append("Megatron-Bridge's Qwen2.5-VL positions differ from ours")
    print(f"Qwen2.5-VL positions, Megatron-Bridge's way: {len(batches) - len(problems)} of {len(batches)} packs equal")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bridge-src", type=Path, required=True, help="src/ of a Megatron-Bridge checkout")
    parser.add_argument("--packed", required=True, help="a folder written by `vlmpack write`")
    parser.add_argument("--cp", type=int, default=1, help="the context_parallel_size it was planned for")
    args = parser.parse_args()
    _load_bridge(args.bridge_src.resolve())

    from megatron.bridge.data.base import DatasetBuildContext, DatasetProvider
    from megatron.bridge.training.utils import packed_seq_utils
    from megatron.core.packed_seq_params import PackedSeqParams

    fields = set(PackedSeqParams.__dataclass_fields__)
    core = PackedSeqParams  # a newer Megatron-Bridge may pass fields (total_tokens) an older megatron-core lacks
    packed_seq_utils.PackedSeqParams = lambda **kw: core(**{k: v for k, v in kw.items() if k in fields})
    from megatron.bridge.training import vlm_step

    from vlmpack_offline.errors import ConfigError
    from vlmpack_offline.loader.adapters import packed_seq_params
    from vlmpack_offline.loader.adapters.megatron_bridge import VlmpackDatasetProvider

    problems = []
    if not issubclass(VlmpackDatasetProvider, DatasetProvider):
        problems.append("VlmpackDatasetProvider is not a DatasetProvider")
    groups = SimpleNamespace(dp=_Group(0, 1), cp=_Group(0, args.cp), tp=_Group(0, 1))
    context = DatasetBuildContext(train_samples=100, valid_samples=4, test_samples=0, pg_collection=groups)
    provider = VlmpackDatasetProvider(packed_dir=args.packed, context_parallel_size=args.cp, num_workers=1)
    provider.finalize()
    train, valid, test = provider.build_datasets(context)
    print(f"build_datasets -> train {type(train).__name__}, val {type(valid).__name__}, test {test}")
    try:
        VlmpackDatasetProvider(packed_dir=args.packed, context_parallel_size=args.cp + 1).build_datasets(context)
        problems.append("a context_parallel_size the process groups contradict was accepted")
    except ConfigError as error:
        print(f"refused as it should: {error}")
    batches = [next(train) for _ in range(4)]
    for batch in batches:
        ours, theirs = packed_seq_params(batch), packed_seq_utils.get_packed_seq_params(batch)
        if not all(_same(getattr(ours, f), getattr(theirs, f)) for f in PARAMS):
            problems.append("get_packed_seq_params differs from vlmpack's packed_seq_params")
    torch.Tensor.cuda = lambda self, *a, **k: self  # the step's device moves, on CPU
    got = vlm_step.get_batch_from_iterator(iter(batches), is_first_pp_stage=True, is_last_pp_stage=True)
    kept = sorted(k for k, v in got.items() if v is not None)
    print(f"get_batch_from_iterator keeps: {', '.join(kept)}")
    problems += [f"get_batch_from_iterator dropped {k}" for k in KEYS if k not in kept]
    vision = got["visual_inputs"].normalized_for_model()
    print("visual_inputs.normalized_for_model():", {k: tuple(v.shape) for k, v in vision.items()} or "(text pack)")
    print(f"save_state -> {type(train.save_state()).__name__}")
    if _is_qwen25(args.packed):
        problems += _check_qwen25_positions(batches, packed_seq_params, packed_seq_utils)
    for line in problems:
        print(f"FAIL: {line}")
    print("all checks passed" if not problems else f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
