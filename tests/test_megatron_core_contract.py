"""What megatron-core's own functions take, from our Megatron batches, and the docs' loop that feeds them.

megatron-core 0.16.1's ``get_thd_batch_on_this_cp_rank`` reads ``max_seqlen[0]`` and cuts dimension 1 of
every key it is given; ``PackedSeqParams`` goes to TransformerEngine's THD attention, which reads its
``cu_seqlens`` on the GPU. Checked here, with megatron-core's own code as the oracle:

- the documented conversion (``core_thd_inputs``) goes through megatron-core's slicer unchanged, on a
  hand-checked case and on real mRoPE packs for cp 2 and 4, and agrees with ``cp_slice`` token for token,
  while the vision inputs and boundaries come back untouched;
- ``to_device`` leaves no tensor behind, ``PackedSeqParams``' boundaries included;
- the two loops of docs/training/megatron.md section 2b run as written, up to the model call (the code
  blocks are read from the page; ``cuda`` becomes the CPU, or PyTorch's ``meta`` device, which no tensor
  reaches unless it is moved there, so a boundary left on the CPU shows).

TE's CUDA-only partition is supplied on the CPU by ``_te_partition`` (megatron-core's own split per
sub-sequence, not vlmpack's code).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import torch
from _real_packs import build_packed
from _text_pack import text_pack

from vlmpack_offline.loader import PackBatch, PackDataset, PackEncoder
from vlmpack_offline.loader.adapters.megatron import (
    HOST_FIELDS,
    MegatronAdapter,
    MegatronVisualInputs,
    core_thd_inputs,
    cp_slice,
    packed_seq_params,
    to_device,
)
from vlmpack_offline.packing.alignment import Alignment
from vlmpack_offline.synthetic.shards import generate_dataset

mcore_utils = pytest.importorskip("megatron.core.utils")
from _te_partition import te_partition_on_cpu  # noqa: E402
from megatron.core import parallel_state  # noqa: E402
from megatron.core.models.gpt.gpt_model import GPTModel  # noqa: E402
from megatron.core.packed_seq_params import PackedSeqParams  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")

DOC = Path(__file__).resolve().parents[1] / "docs" / "training" / "megatron.md"
TESTED = "<!-- tested: tests/test_megatron_core_contract.py -->"
SEQUENCE_FIELDS = ("tokens", "input_ids", "labels", "loss_mask", "position_ids")
UNCUT_FIELDS = ("visual_inputs", "cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded",
                "max_seqlen_q", "max_seqlen_kv", "total_tokens", "attention_mask")


@pytest.fixture(scope="module")
def packed_dir(tmp_path_factory, qwen25_processor_dir) -> Path:
    """Qwen2.5-VL packs (mRoPE positions, images and videos), planned for cp up to 4 (align_to 8)."""
    src = tmp_path_factory.mktemp("core_src")
    generate_dataset(src, seed=5, n_shards=2, samples_per_shard=10, include_faults=False)
    config = build_packed(tmp_path_factory.mktemp("core_packed"), src, qwen25_processor_dir,
                          parallel={"context_parallel_size": 4}, packing={"align_to": 8})
    return config.packed_wds_dir


@pytest.fixture(scope="module")
def packs(packed_dir) -> list[PackBatch]:
    packs = list(PackDataset(packed_dir, PackEncoder.from_packed_dir(packed_dir), rank=0, world_size=1))
    assert any(len(p.vision) for p in packs) and packs[0].position_ids.dim() == 3  # media packs, mRoPE [3, 1, S]
    return packs


def _core_slice(batch: dict, cp: int, rank: int) -> tuple[dict, PackedSeqParams]:
    """megatron-core's slicer, called unchanged on the documented conversion, and the batch put back together."""
    core = core_thd_inputs(batch)
    with te_partition_on_cpu():
        sliced, params = mcore_utils.get_thd_batch_on_this_cp_rank(*core.args, cp_size=cp, cp_rank=rank)
    return core.merge(sliced), params


def test_megatron_cores_slicer_takes_the_conversion_of_a_hand_checked_pack():
    # lengths [5, 4] padded for cp 2 to [8, 4]: ids 1..5 0 0 0 | 6..9; 2 * cp = 4 chunks of 2 and of 1
    batch = MegatronAdapter(Alignment(context_parallel_size=2))(text_pack([5, 4]))
    core = core_thd_inputs(batch)
    assert core.max_seqlen.shape == (1,) and core.max_seqlen.tolist() == [8]  # what the function reads as [0]
    assert list(core.batch) == ["tokens", "labels", "loss_mask", "attention_mask", "position_ids"]
    rank0, params = _core_slice(batch, 2, 0)  # chunks 0 and 3 of each sub-sample: slots 0 1 6 7 | 8 11
    rank1, _ = _core_slice(batch, 2, 1)  # chunks 1 and 2: slots 2 3 4 5 | 9 10
    assert rank0["tokens"].tolist() == [[1, 2, 0, 0, 6, 9]] and rank1["tokens"].tolist() == [[3, 4, 5, 0, 7, 8]]
    assert rank0["labels"].tolist() == [[2, 3, -100, -100, 7, -100]]
    assert rank1["labels"].tolist() == [[4, 5, -100, -100, 8, 9]]
    assert rank0["position_ids"].tolist() == [[0, 1, 6, 7, 0, 3]]
    assert rank1["loss_mask"].tolist() == [[1.0, 1.0, 0.0, 0.0, 1.0, 1.0]]
    assert params.max_seqlen_q == 8 and params.cu_seqlens_q_padded.tolist() == [0, 8, 12]
    for rank, theirs in ((0, rank0), (1, rank1)):
        ours = cp_slice(batch, 2, rank)
        assert all(torch.equal(ours[k], theirs[k]) for k in SEQUENCE_FIELDS)


@pytest.mark.parametrize("cp", [2, 4])
def test_megatron_cores_slicer_agrees_with_cp_slice_on_mrope_packs(packed_dir, packs, cp):
    adapter = MegatronAdapter.for_packed_dir(packed_dir, context_parallel_size=cp)
    compared = 0
    for pack in packs:
        batch = adapter(pack)
        ours_params = packed_seq_params(batch)
        for rank in range(cp):
            theirs, params = _core_slice(batch, cp, rank)
            ours = cp_slice(batch, cp, rank)
            for name in SEQUENCE_FIELDS:
                assert torch.equal(ours[name], theirs[name]), (pack.pack_id, cp, rank, name)
            assert theirs["position_ids"].shape == (3, 1, batch["total_tokens"] // cp)  # mRoPE kept [3, 1, T/cp]
            for name in UNCUT_FIELDS:  # never cut: the vision inputs, the whole pack's boundaries and counts
                assert theirs[name] is batch[name], name
            for name in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded",
                         "max_seqlen_q", "max_seqlen_kv", "qkv_format"):
                a, b = getattr(params, name), getattr(ours_params, name)
                assert (torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b), name
            compared += 1
    assert compared == cp * len(packs) and any(len(p.vision) for p in packs)


def test_to_device_moves_every_tensor_and_the_boundaries_params_carry(packed_dir, packs):
    adapter = MegatronAdapter.for_packed_dir(packed_dir, context_parallel_size=2)
    batch = adapter(next(p for p in packs if len(p.vision)))
    moved = to_device(batch, "meta")  # a device no tensor is on unless moved there
    assert moved.keys() == batch.keys() and moved["tokens"] is moved["input_ids"]  # one tensor, moved once
    for name, value in moved.items():
        if isinstance(value, torch.Tensor):
            assert value.device.type == ("cpu" if name in HOST_FIELDS else "meta"), name
            assert value.shape == batch[name].shape and value.dtype == batch[name].dtype, name
    vision = moved["visual_inputs"]
    assert isinstance(vision, MegatronVisualInputs) and vision.as_model_kwargs()
    assert {v.device.type for v in vision.as_model_kwargs().values()} == {"meta"}
    assert {v.device.type for v in batch["visual_inputs"].as_model_kwargs().values()} == {"cpu"}  # original kept
    params = packed_seq_params(moved)
    for name in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded"):
        assert getattr(params, name).device == moved["tokens"].device, name
    assert params.max_seqlen_q == int(batch["max_seqlen_q"])
    share = to_device(cp_slice(batch, 2, 1), "meta")
    assert share["tokens"].shape[-1] == batch["total_tokens"] // 2 and share["cu_seqlens_q_padded"].is_meta


# --- the docs' loops ---------------------------------------------------------------------------------------


def _doc_blocks() -> list[str]:
    text = DOC.read_text()
    blocks = re.findall(re.escape(TESTED) + r"\s*\n```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == text.count(TESTED) == 2, f"section 2b marks its two loops {TESTED}"
    return blocks


def _on_this_machine(block: str, packed_dir: Path, device: str) -> str:
    """The block with the two lines a user edits: the packed folder, and the GPU replaced by ``device``."""
    for pattern, line in ((r'^packed_dir = "/data/packed".*$', f"packed_dir = {str(packed_dir)!r}"),
                          (r'^device = torch\.device\("cuda", torch\.cuda\.current_device\(\)\)$',
                           f"device = torch.device({device!r})")):
        if re.search(pattern, block, flags=re.M):
            block, n = re.subn(pattern, line, block, flags=re.M)
            assert n == 1, pattern
    return block


class RecordingGPTModel:
    """Stands in for megatron-core's ``GPTModel``: every call must bind to its real ``forward``'s signature;
    the bound arguments are recorded."""

    signature = inspect.signature(GPTModel.forward)

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, *args, **kwargs) -> torch.Tensor:
        bound = self.signature.bind(self, *args, **kwargs).arguments
        self.calls.append(bound)
        return torch.zeros_like(bound["labels"], dtype=torch.float32)  # a per-token loss, as GPTModel returns


def _run_doc_loops(packed_dir: Path, device: str, cp: int, rank: int, blocks: list[str],
                   monkeypatch) -> list[RecordingGPTModel]:
    """Exec the blocks in order in one namespace, as one script; one recording model per block."""
    for name, value in (("get_context_parallel_world_size", cp), ("get_context_parallel_rank", rank),
                        ("get_data_parallel_rank", 0), ("get_data_parallel_world_size", 1)):
        monkeypatch.setattr(parallel_state, name, lambda value=value: value)
    namespace: dict = {}
    models = []
    for i, block in enumerate(blocks):
        namespace["model"] = model = RecordingGPTModel()
        exec(compile(_on_this_machine(block, packed_dir, device), f"{DOC}:2b[{i}]", "exec"), namespace)  # noqa: S102
        models.append(model)
    return models


def _check_calls(model: RecordingGPTModel, expected: dict[tuple, dict], device: str) -> None:
    """Each call: one pack's share as cp_slice makes it, once each, and PackedSeqParams on the tokens' device."""
    seen = set()
    for call in model.calls:
        tokens, params = call["input_ids"], call["packed_seq_params"]
        assert isinstance(params, PackedSeqParams) and params.qkv_format == "thd"
        assert tokens.device.type == device and tokens.dim() == 2 and tokens.shape[0] == 1
        for name in ("position_ids", "labels", "loss_mask"):
            assert call[name].device == tokens.device, name
        for name in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded"):
            assert getattr(params, name).device == tokens.device, name  # TE's attention reads them there
        assert isinstance(params.max_seqlen_q, int) and call["attention_mask"] is None
        if device == "cpu":
            key = tuple(tokens[0].tolist())
            share = expected[key]
            for ours, theirs in (("position_ids", "position_ids"), ("labels", "labels"), ("loss_mask", "loss_mask")):
                assert torch.equal(call[ours], share[theirs]), ours
            assert torch.equal(params.cu_seqlens_q_padded, share["cu_seqlens_q_padded"])
            seen.add(key)
    assert len(model.calls) == len(expected)
    if device == "cpu":
        assert seen == set(expected)  # every pack once


@pytest.mark.parametrize(("device", "cp", "rank"), [("cpu", 2, 0), ("cpu", 4, 3), ("meta", 2, 1)])
def test_the_docs_megatron_core_loops_run_as_written(packed_dir, packs, device, cp, rank, monkeypatch):
    adapter = MegatronAdapter.for_packed_dir(packed_dir, context_parallel_size=cp)
    expected = {}
    for pack in packs:
        share = cp_slice(adapter(pack), cp, rank)
        expected[tuple(share["tokens"][0].tolist())] = share
    assert len(expected) == len(packs)
    # the second loop cuts with megatron-core's slicer on the tokens' device: TE's partition (here its CPU
    # substitute) runs where the boundaries are, so it runs on the CPU only; the first runs on meta too
    blocks = _doc_blocks() if device == "cpu" else _doc_blocks()[:1]
    with te_partition_on_cpu():
        models = _run_doc_loops(packed_dir, device, cp, rank, blocks, monkeypatch)
    for model in models:
        _check_calls(model, expected, device)
