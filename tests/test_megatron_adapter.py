"""Megatron THD batches from real packs, checked with megatron-core's own code and HF's own model.

A real packed dataset is built by the real stages (scan -> bucket -> plan -> write -> verify) with a
real Qwen2.5-VL processor folder, aligned for context parallelism; the adapter's batches are then
compared with: Megatron-Bridge's published golden case, megatron-core's ``PackedSeqParams`` and its
context-parallel slicing functions (``get_batch_on_this_cp_rank``, ``get_thd_batch_on_this_cp_rank``),
the HF model's ``get_rope_index`` on each sub-sample alone, and the HF model's own loss.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from _real_packs import build_packed
from _text_pack import text_pack
from torch.utils.data import DataLoader

from vlmpack_offline.config import Config
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.loader import PackBatch, PackDataset, PackEncoder
from vlmpack_offline.loader.adapters import MegatronAdapter, cp_partition_indices, cp_slice, packed_seq_params
from vlmpack_offline.loader.adapters.megatron import core_thd_inputs
from vlmpack_offline.loader.adapters.megatron_stream import MegatronPackStream
from vlmpack_offline.packing.alignment import Alignment
from vlmpack_offline.stages import verify
from vlmpack_offline.synthetic.shards import generate_dataset
from vlmpack_offline.synthetic.tiny_models import tiny_qwen_vl

mcore_utils = pytest.importorskip("megatron.core.utils")
from _te_partition import core_rank_indices, te_partition_on_cpu  # noqa: E402
from megatron.core.packed_seq_params import PackedSeqParams  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")

CAPACITY = 4096
LAYOUTS = [  # (context_parallel_size, tensor_model_parallel_size, sequence_parallel): all divide align_to 8
    (1, 1, False), (2, 1, False), (4, 1, False), (1, 2, True), (2, 2, True), (4, 2, True), (2, 2, False),
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Packed:
    config: Config
    directory: Path
    batches: list[PackBatch]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("megatron_src")
    generate_dataset(src, seed=5, n_shards=2, samples_per_shard=10, include_faults=False)
    return src


@pytest.fixture(scope="module")
def aligned(tmp_path_factory, source, qwen25_processor_dir) -> Packed:
    root = tmp_path_factory.mktemp("megatron_aligned")
    config = build_packed(root, source, qwen25_processor_dir, parallel={"context_parallel_size": 2},
                    packing={"align_to": 8})
    encoder = PackEncoder.from_packed_dir(config.packed_wds_dir)
    batches = list(PackDataset(config.packed_wds_dir, encoder, rank=0, world_size=1))
    assert {bool(len(b.vision)) for b in batches} == {True, False}  # media packs and text packs
    return Packed(config=config, directory=config.packed_wds_dir, batches=batches)


def test_megatron_bridges_golden_case():
    # Megatron-Bridge tests/unit_tests/models/qwen_vl/data/test_energon.py: lengths [5, 4], multiple 4
    batch = MegatronAdapter(Alignment(context_parallel_size=2))(text_pack([5, 4]))
    assert batch["input_ids"].shape == (1, 12) and batch["total_tokens"] == 12
    assert batch["cu_seqlens_q"].tolist() == [0, 5, 9] and batch["cu_seqlens_q_padded"].tolist() == [0, 8, 12]
    assert int(batch["max_seqlen_q"]) == 8
    assert (batch["labels"][0, 5:8] == -100).all() and (batch["loss_mask"][0, 5:8] == 0).all()
    assert batch["position_ids"][0, 8] == 0
    # pads: input id 0, positions continuing from the sub-sample's last one
    assert batch["input_ids"][0, 5:8].tolist() == [0, 0, 0] and batch["position_ids"][0, 5:8].tolist() == [5, 6, 7]
    # next-token labels: position i predicts token i + 1; each sub-sample's last position predicts nothing
    assert batch["labels"][0].tolist() == [2, 3, 4, 5, -100, -100, -100, -100, 7, 8, 9, -100]
    assert batch["loss_mask"][0].tolist() == [1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0]
    assert batch["tokens"] is batch["input_ids"]
    dtypes = {k: batch[k].dtype for k in ("input_ids", "labels", "loss_mask", "position_ids", "cu_seqlens_q",
                                          "cu_seqlens_q_padded", "max_seqlen_q")}
    assert dtypes == {"input_ids": torch.long, "labels": torch.long, "loss_mask": torch.float32,
                      "position_ids": torch.long, "cu_seqlens_q": torch.int32, "cu_seqlens_q_padded": torch.int32,
                      "max_seqlen_q": torch.int32}


def test_packed_seq_params_is_megatron_cores_own():
    batch = MegatronAdapter(Alignment(context_parallel_size=2))(text_pack([5, 4]))
    params = packed_seq_params(batch)
    assert isinstance(params, PackedSeqParams) and params.qkv_format == "thd"
    # megatron-core builds the same parameters from the same boundaries (cp_size 1: no TE needed)
    _, theirs = mcore_utils.get_thd_batch_on_this_cp_rank(*core_thd_inputs(batch).args, cp_size=1, cp_rank=0)
    for name in ("qkv_format", "cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded",
                 "max_seqlen_q", "max_seqlen_kv"):
        ours, core = getattr(params, name), getattr(theirs, name)
        assert (torch.equal(ours, core) if isinstance(ours, torch.Tensor) else ours == core), name


def test_te_partition_rule_on_its_published_case():
    # TransformerEngine tests/pytorch/attention/test_cp_utils.py: cu_seqlens [0, 8, 16], cp 2
    cu = torch.tensor([0, 8, 16], dtype=torch.int32)
    assert cp_partition_indices(cu, 2, 0).tolist() == [0, 1, 6, 7, 8, 9, 14, 15]
    assert cp_partition_indices(cu, 2, 1).tolist() == [2, 3, 4, 5, 10, 11, 12, 13]


@pytest.mark.parametrize(("cp", "tp", "sp"), LAYOUTS)
def test_cp_slices_are_megatron_cores_and_cover_every_token_once(aligned, cp, tp, sp):
    adapter = MegatronAdapter.for_packed_dir(aligned.directory, context_parallel_size=cp,
                                             tensor_model_parallel_size=tp, sequence_parallel=sp)
    multiple = Alignment(context_parallel_size=cp, tensor_model_parallel_size=tp, sequence_parallel=sp).multiple
    for pack in aligned.batches:
        batch = adapter(pack)
        cu_padded = batch["cu_seqlens_q_padded"]
        assert ((cu_padded[1:] - cu_padded[:-1]) % multiple == 0).all()  # what TE's THD kernels require
        assert batch["total_tokens"] <= CAPACITY  # the plan already counted the padding
        held = []
        for rank in range(cp):
            ours = cp_slice(batch, cp, rank)
            held.append(core_rank_indices(cu_padded, cp, rank))
            # megatron-core's THD slicer, unchanged, on the documented conversion (TE's CUDA-only partition
            # supplied as megatron-core's per-sub-sample split)
            core = core_thd_inputs(batch)
            with te_partition_on_cpu():
                sliced, _ = mcore_utils.get_thd_batch_on_this_cp_rank(*core.args, cp_size=cp, cp_rank=rank)
            theirs = core.merge(sliced)
            for name in ("tokens", "input_ids", "labels", "loss_mask", "position_ids"):
                assert torch.equal(ours[name], theirs[name]), (name, cp, rank)
            if sp and tp > 1:
                assert ours["tokens"].shape[-1] % tp == 0  # each CP share splits evenly over the TP ranks
        assert torch.equal(torch.cat(held).sort().values, torch.arange(batch["total_tokens"]))


def test_mrope_positions_are_the_hf_models_own_for_each_sub_sample_alone(aligned):
    model = tiny_qwen_vl("qwen2_5_vl").model
    image_id, video_id = model.config.image_token_id, model.config.video_token_id
    adapter = MegatronAdapter.for_packed_dir(aligned.directory, context_parallel_size=2)
    checked = 0
    for pack in aligned.batches:
        batch = adapter(pack)
        vision = pack.vision
        images = videos = 0
        for s in range(pack.n_segments):
            start, end = int(pack.cu_seqlens[s]), int(pack.cu_seqlens[s + 1])
            padded_start = int(batch["cu_seqlens_q_padded"][s])
            ids = pack.input_ids[:, start:end]
            n_img, n_vid = int(pack.n_images_per_sample[s]), int(pack.n_videos_per_sample[s])
            types = torch.zeros_like(ids, dtype=torch.int32)
            types[ids == image_id], types[ids == video_id] = 1, 2
            kwargs = {}
            if n_img:
                kwargs["image_grid_thw"] = vision["image_grid_thw"][images : images + n_img]
            if n_vid:
                kwargs["video_grid_thw"] = vision["video_grid_thw"][videos : videos + n_vid]
                kwargs["second_per_grid_ts"] = vision["second_per_grid_ts"][videos : videos + n_vid]
            alone, _ = model.get_rope_index(ids, types, attention_mask=torch.ones_like(ids), **kwargs)
            ours = batch["position_ids"][:, :, padded_start : padded_start + end - start]
            assert torch.equal(ours, alone), (pack.pack_id, s)
            images, videos, checked = images + n_img, videos + n_vid, checked + 1
    assert checked >= 10


def test_labels_and_loss_mask_give_the_hf_models_own_loss(aligned):
    model = tiny_qwen_vl("qwen2_5_vl").eval()
    adapter = MegatronAdapter.for_packed_dir(aligned.directory, context_parallel_size=2)
    for pack in aligned.batches[:4]:
        batch = adapter(pack)
        with torch.no_grad():
            out = model(**pack.model_kwargs("sdpa"))  # HF shifts the labels itself
        cu, cu_padded = pack.cu_seqlens.long(), batch["cu_seqlens_q_padded"].long()
        segment = torch.repeat_interleave(torch.arange(pack.n_segments), cu[1:] - cu[:-1])
        dest = torch.arange(pack.seq_len) - cu[:-1][segment] + cu_padded[:-1][segment]
        labels, mask = batch["labels"][0, dest], batch["loss_mask"][0, dest]
        assert torch.equal(batch["input_ids"][0, dest], pack.input_ids[0])
        assert batch["loss_mask"].sum() == mask.sum()  # pads carry no loss
        per_token = torch.nn.functional.cross_entropy(out.logits[0].float(), labels.clamp(min=0), reduction="none")
        megatron_loss = (per_token * mask).sum() / mask.sum()  # Megatron's masked next-token loss
        assert abs(megatron_loss.item() - out.loss.item()) < 1e-4, pack.pack_id


def test_data_not_aligned_for_the_job_is_refused_naming_both_layouts(aligned, source, qwen25_processor_dir,
                                                                     tmp_path):
    with pytest.raises(ConfigError, match=r"planned for context_parallel_size=2.*align_to=8.*this job runs "
                                          r"context_parallel_size=8.*multiple of 16.*parallel\.context_parallel_size: 8"):
        MegatronAdapter.for_packed_dir(aligned.directory, context_parallel_size=8)
    plain = build_packed(tmp_path, source, qwen25_processor_dir)  # written without parallel:
    with pytest.raises(ConfigError, match=r"planned without alignment.*this job runs context_parallel_size=2.*Rerun .*"
                                          r"parallel\.context_parallel_size: 2.*packing\.align_to: 4"):
        MegatronAdapter.for_packed_dir(plain.packed_wds_dir, context_parallel_size=2)
    MegatronAdapter.for_packed_dir(plain.packed_wds_dir, tensor_model_parallel_size=4)  # no sequence parallel: fine
    with pytest.raises(ConfigError, match="context_parallel_size must be a positive integer"):
        MegatronAdapter.for_packed_dir(plain.packed_wds_dir, context_parallel_size=0)


def test_one_pack_is_one_micro_batch():
    adapter = MegatronAdapter(Alignment(context_parallel_size=2))
    batch = text_pack([5, 4])
    assert torch.equal(adapter([batch])["tokens"], adapter(batch)["tokens"])
    with pytest.raises(ValueError, match=r"2 packs to one micro-batch.*batch_size=None"):
        adapter([batch, batch])


def _tokens(batch: dict) -> tuple[int, ...]:
    return tuple(batch["tokens"][0].tolist())


def test_dataloader_workers_build_the_batches(aligned):
    adapter = MegatronAdapter.for_packed_dir(aligned.directory, context_parallel_size=2)
    dataset = PackDataset(aligned.directory, PackEncoder.from_packed_dir(aligned.directory), rank=0, world_size=1)
    loader = DataLoader(dataset, batch_size=None, num_workers=2, collate_fn=adapter)  # padding runs in the workers
    got = [_tokens(b) for b in loader]
    in_process = {_tokens(adapter(b)) for b in aligned.batches}
    assert len(got) == dataset.packs_per_rank(2) and len(set(got)) == len(got) and set(got) <= in_process


def test_energon_stream_is_endless_and_resumes_where_it_stopped(aligned):
    adapter = MegatronAdapter.for_packed_dir(aligned.directory, context_parallel_size=2)
    n = len(aligned.batches)
    stream = MegatronPackStream(aligned.directory, adapter, num_workers=1)
    first = [_tokens(next(stream)) for _ in range(3)]
    state = stream.save_state()
    rest = [_tokens(next(stream)) for _ in range(n)]  # runs past the end of the epoch
    assert sorted(first + rest[: n - 3]) == sorted(_tokens(adapter(b)) for b in aligned.batches)  # one epoch
    resumed = MegatronPackStream(aligned.directory, adapter, num_workers=1)
    resumed.restore_state(state)
    assert [_tokens(next(resumed)) for _ in range(n)] == rest


def test_without_megatron_core_one_line_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "megatron.core.packed_seq_params", None)
    batch = MegatronAdapter()(text_pack([3]))
    with pytest.raises(ConfigError, match=r"pip install 'vlmpack-offline\[megatron\]'"):
        packed_seq_params(batch)


def test_per_sample_loss_weights_travel_as_the_loss_mask():
    batch = text_pack([3, 2])  # scored tokens: 2 in the first sub-sample, 1 in the second
    weights = torch.tensor([[0.0, 0.5, 0.5, 0.0, 1.0]])  # 1 / n_label_tokens of each sub-sample, at its labels
    out = MegatronAdapter()(dataclasses.replace(batch, loss_weights=weights))
    assert out["loss_mask"][0].tolist() == [0.5, 0.5, 0.0, 1.0, 0.0]  # shifted with the labels
    assert out["labels"][0].tolist() == [2, 3, -100, 5, -100]


def test_the_megatron_bridge_provider_without_megatron_bridge_is_one_line():
    if importlib.util.find_spec("megatron.bridge") is not None:
        pytest.skip("Megatron-Bridge is installed here")
    with pytest.raises(ConfigError, match=r"plugs into Megatron-Bridge, which is not installed here.*MegatronPackStream"):
        importlib.import_module("vlmpack_offline.loader.adapters.megatron_bridge")


def test_verify_with_another_layout_says_so_in_one_line(aligned):
    other = dataclasses.replace(aligned.config, parallel=dataclasses.replace(aligned.config.parallel,
                                                                             context_parallel_size=8),
                                packing=dataclasses.replace(aligned.config.packing, align_to=None))
    result = verify.run(other)
    assert result.exit_code == 1 and len(result.summary) == 1
    assert re.search(r"was written for context_parallel_size=2.*align_to=8.*asks for context_parallel_size=8.*"
                     r"rerun `vlmpack bucket`", result.summary[0])
