"""NeMo Automodel batches from real packs, checked against Automodel's own neat-packing code.

A real packed dataset (real stages, real Qwen2.5-VL processor folder, images and videos) is read by
the loader; every pack's sub-samples are also encoded one by one, as Automodel tokenizes them, and
fed through Automodel's own functions: ``_compute_mrope_position_ids`` with the HF model's own
``get_rope_index``, ``_shift_sample``, ``_build_packed_vlm_sample``, then ``neat_packed_vlm_collater`` /
``packed_sequence_thd_vlm_collater``. The adapter's batch must equal that field by field; Automodel's
mask and THD helpers run on it; the HF model's logits on it give each sample's own loss. And
Automodel's own step normalisation on the adapter's batches (two ranks, two micro-batches) has the
gradient of the same samples trained unpacked by plain transformers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _real_packs import build_packed
from _uneven_model import trainable, uneven_model
from torch.utils.data import DataLoader, DistributedSampler

from vlmpack_offline.errors import ConfigError
from vlmpack_offline.loader import EncoderOptions, PackDataset, PackEncoder, PackSequence
from vlmpack_offline.loader.adapters import AutomodelAdapter
from vlmpack_offline.loader.attention import block_causal_mask
from vlmpack_offline.packed_format import PackedSample
from vlmpack_offline.synthetic.shards import generate_dataset
from vlmpack_offline.synthetic.tiny_models import tiny_qwen_vl

neat = pytest.importorskip("nemo_automodel.components.datasets.vlm.neat_packing_vlm")
from nemo_automodel.components.datasets.utils import _indexed_mask_to_4d_block_causal  # noqa: E402
from nemo_automodel.components.datasets.vlm.collate_fns import (  # noqa: E402
    neat_packed_vlm_collater,
    packed_sequence_thd_vlm_collater,
)
from nemo_automodel.components.distributed.thd_utils import process_input_for_thd  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")


@pytest.fixture(scope="module")
def packed(tmp_path_factory, qwen25_processor_dir) -> Path:
    src = tmp_path_factory.mktemp("automodel_src")
    generate_dataset(src, seed=11, n_shards=2, samples_per_shard=10, include_faults=False)
    return build_packed(tmp_path_factory.mktemp("automodel"), src, qwen25_processor_dir).packed_wds_dir


@pytest.fixture(scope="module")
def model():
    return tiny_qwen_vl("qwen2_5_vl", "sdpa", seed=0).eval()


def _automodel_sample(encoder: PackEncoder, sub, media, model) -> dict:
    """One sub-sample as Automodel's PreTokenizedDatasetWrapper hands it on: ids, labels, the processor's
    mm_token_type_ids and media; then Automodel's own mRoPE positions (the HF model's get_rope_index)."""
    alone = encoder.encode(PackedSample(pack_id=0, capacity=1 << 20, split="train", samples=(sub,)), media)
    ids = alone.input_ids[0]
    config = model.config
    mm = (ids == config.image_token_id).long() + 2 * (ids == config.video_token_id).long()  # HF's 1 / 2
    sample = {"input_ids": ids, "labels": alone.labels[0], "attention_mask": torch.ones_like(ids),
              "mm_token_type_ids": mm, **alone.vision}  # fmt: skip
    sample["position_ids"] = neat._compute_mrope_position_ids(sample, model.model.get_rope_index)
    return sample


def _oracle(dataset: PackDataset, index: int, model, encoder: PackEncoder) -> dict:
    cooked = dataset.packs.read(index)
    samples = [_automodel_sample(encoder, sub, cooked.media, model) for sub in cooked.pack.samples]
    shifted = [neat._shift_sample(sample, has_mrope=True) for sample in samples]
    return neat._build_packed_vlm_sample(shifted, pack_size=1 << 20, padding_idx=0, has_mrope=True)


def _same(ours, theirs, key: str) -> None:
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, torch.Tensor), key
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (key, ours.shape, theirs.shape)
        assert torch.equal(ours, theirs), key
    else:
        assert ours == theirs, key


def test_each_pack_is_automodels_own_packed_item_and_batch(packed, model):
    encoder = PackEncoder.from_packed_dir(packed)
    adapter = AutomodelAdapter.for_packed_dir(packed, model=model)
    dataset = PackDataset(packed, encoder, rank=0, world_size=1)
    kinds = set()
    for index in range(len(dataset.packs)):
        batch = dataset.encode_cooked(dataset.packs.read(index), position=None)
        ours, theirs = adapter.pack(batch), _oracle(dataset, index, model, encoder)
        assert set(ours) >= set(theirs)
        for key in theirs:
            _same(ours[key], theirs[key], key)
        # Automodel's length of a pack: the plan's token_len less one per sub-sample
        assert ours["input_ids"].numel() == batch.seq_len - batch.n_segments
        collated, expected = adapter([batch]), neat_packed_vlm_collater([theirs], padding_idx=0)
        assert set(collated) == set(expected)
        for key in expected:
            _same(collated[key], expected[key], key)
        kinds.add(tuple(sorted(k for k in ("image_grid_thw", "video_grid_thw") if k in batch.vision)))
    assert ("image_grid_thw",) in kinds or ("image_grid_thw", "video_grid_thw") in kinds
    assert () in kinds and any("video_grid_thw" in k for k in kinds)  # text-only packs and video packs too


def test_automodels_mask_and_thd_helpers_read_the_sub_samples(packed):
    adapter = AutomodelAdapter.for_packed_dir(packed)
    dataset = PackDataset(packed, adapter.encoder, rank=0, world_size=1)
    batch = next(iter(dataset))
    item = adapter.pack(batch)
    shifted_cu = torch.tensor([0, *torch.tensor(item["seq_lens"]).cumsum(0).tolist()], dtype=torch.int32)
    mask = _indexed_mask_to_4d_block_causal(item["attention_mask"][None])
    assert torch.equal(mask, block_causal_mask(shifted_cu))
    thd = process_input_for_thd(packed_sequence_thd_vlm_collater([item], padding_idx=0))
    assert torch.equal(thd["cu_seqlens"].int(), shifted_cu)
    assert torch.equal(thd["input_ids"], item["input_ids"])


def test_the_hf_models_logits_on_the_batch_give_each_samples_own_loss(packed, model):
    encoder = PackEncoder.from_packed_dir(packed)
    adapter = AutomodelAdapter(encoder)
    dataset = PackDataset(packed, encoder, rank=0, world_size=1)
    cooked = next(c for c in map(dataset.packs.read, range(len(dataset.packs)))
                  if len(c.pack.samples) > 1 and c.media)  # fmt: skip
    batch = dataset.encode_cooked(cooked, None)
    micro = adapter(batch)
    inputs = {k: micro[k] for k in ("input_ids", "position_ids", "attention_mask")}
    vision = {k: v.float() if v.is_floating_point() else v for k, v in batch.vision.items()}
    with torch.no_grad():
        logits = model(**inputs, **vision, use_cache=False).logits
        packed_sum = torch.nn.functional.cross_entropy(logits[0], micro["labels"][0], reduction="sum")
        alone_sum = torch.zeros(())
        for sub in cooked.pack.samples:
            single = encoder.encode(PackedSample(pack_id=0, capacity=1 << 20, split="train", samples=(sub,)),
                                    cooked.media)
            out = model(input_ids=single.input_ids, labels=single.labels, **single.vision)
            alone_sum += out.loss * (single.labels[0, 1:] != -100).sum()
    # Automodel's pixels are bfloat16: the sums agree to bfloat16's precision of the vision tower's input
    assert abs(packed_sum.item() - alone_sum.item()) < 1e-3 * max(1.0, alone_sum.item())


def test_several_packs_per_micro_batch_are_rows_never_one_sequence(packed):
    adapter = AutomodelAdapter.for_packed_dir(packed)
    dataset = PackDataset(packed, adapter.encoder, rank=0, world_size=1)
    batches = [b for _, b in zip(range(3), dataset, strict=False)]
    micro = adapter(batches)
    assert micro["input_ids"].shape[0] == 3
    for row, batch in enumerate(batches):
        length = batch.seq_len - batch.n_segments
        assert torch.equal(micro["input_ids"][row, :length], adapter.pack(batch)["input_ids"])
        assert (micro["labels"][row, length:] == -100).all()


def test_automodels_sampler_gives_each_rank_the_packs_packdataset_gives_it(packed):
    encoder = PackEncoder.from_packed_dir(packed)
    adapter = AutomodelAdapter(encoder)
    world = 2
    sequence = PackSequence(packed, encoder, world_size=world, transform=adapter.pack)
    for rank in range(world):
        sampler = DistributedSampler(sequence, num_replicas=world, rank=rank, shuffle=False)
        loader = DataLoader(sequence, sampler=sampler, batch_size=1, num_workers=2,
                            collate_fn=adapter.collater())  # Automodel's own collate function on pack dicts
        got = [tuple(micro["input_ids"][0].tolist()) for micro in loader]
        expected = PackDataset(packed, encoder, rank=rank, world_size=world).rank_order(0)
        assert len(got) == len(sequence) // world
        want = [tuple(adapter.pack(PackDataset(packed, encoder, rank=0, world_size=1)
                                   .encode_cooked(sequence.packs.packs.read(int(i)), None))["input_ids"].tolist())
                for i in expected[: len(got)]]  # fmt: skip
        assert got == want


def test_a_model_of_another_family_is_refused_naming_both(packed):
    other = tiny_qwen_vl("qwen3_vl", "sdpa")
    with pytest.raises(ConfigError, match=r"packed for model_type 'qwen2_5_vl' but the model is 'qwen3_vl'"):
        AutomodelAdapter.for_packed_dir(packed, model=other)


def test_a_dummy_image_segment_is_refused(packed):
    encoder = PackEncoder.from_packed_dir(packed, options=EncoderOptions(dummy_image_for_text_packs=True))
    dataset = PackDataset(packed, encoder, rank=0, world_size=1)
    text_pack = next(b for b in dataset if b.n_dummy_segments)
    with pytest.raises(ConfigError, match="dummy image segment"):
        AutomodelAdapter(encoder).pack(text_pack)


def test_without_automodel_one_line_says_how_to_install(monkeypatch, packed):
    import sys

    monkeypatch.setitem(sys.modules, "nemo_automodel.components.datasets.vlm.collate_fns", None)
    monkeypatch.setitem(sys.modules, "nemo_automodel", None)
    with pytest.raises(ConfigError, match=r"pip install --no-deps nemo-automodel==0\.7\.0"):
        AutomodelAdapter.for_packed_dir(packed).collater()


def test_the_sampler_hands_each_epoch_to_the_packs(packed):
    from vlmpack_offline.loader import PackSequenceSampler

    encoder = PackEncoder.from_packed_dir(packed)
    sequence = PackSequence(packed, encoder, world_size=2)
    sampler = PackSequenceSampler(sequence, num_replicas=2, rank=1)
    orders = []
    for epoch in range(2):
        sampler.set_epoch(epoch)  # what Automodel's StepScheduler calls
        orders.append([sequence.pack_index(i) for i in sampler])
    assert orders[0] != orders[1]
    assert orders[1] == list(PackDataset(packed, encoder, rank=1, world_size=2).rank_order(1)[: len(orders[1])])
    with pytest.raises(ConfigError, match="cut for world_size=2; build it with world_size=4"):
        PackSequenceSampler(sequence, num_replicas=4, rank=0)
    with pytest.raises(ConfigError, match="shuffle=True would undo"):
        PackSequenceSampler(sequence, num_replicas=2, rank=0, shuffle=True)


@pytest.mark.slow
def test_automodels_step_loss_on_the_batches_has_the_gradient_of_the_samples_trained_unpacked(tmp_path,
                                                                                             qwen25_processor_dir):
    """Automodel's VLM step (``recipes/vlm/finetune.py``: ``_run_train_optim_step``, ``_forward_backward_step``):
    the step's scored tokens counted by ``_count_label_tokens`` over its micro-batches and summed over the
    data-parallel ranks (``_dp_allreduce``), each micro-batch's ``MaskedCrossEntropy`` sum divided by that count
    (``calculate_loss``), ``local_loss * dp_size`` backpropagated and the ranks' gradients averaged (FSDP / DDP).
    Two ranks of two micro-batches, in one process. Oracle: every sub-sample alone through the HF model, its own
    loss, weighted by its scored tokens over the step's; pixels through bfloat16 as Automodel's collater casts
    them. Gradient within 1e-5 (norm and every weight), on a model whose token losses differ."""
    from nemo_automodel.components.loss.masked_ce import MaskedCrossEntropy
    from nemo_automodel.components.loss.utils import _count_label_tokens, calculate_loss
    from nemo_automodel.components.utils.model_utils import filter_forward_kwargs

    world, micro_batches, tolerance = 2, 2, 1e-5
    generate_dataset(tmp_path / "src", seed=21, n_shards=2, samples_per_shard=24, include_faults=False)
    packed = build_packed(tmp_path, tmp_path / "src", qwen25_processor_dir, capacity=768,
                          scan={"max_drop_ratio": 1.0}).packed_wds_dir  # fmt: skip
    encoder = PackEncoder.from_packed_dir(packed)
    adapter = AutomodelAdapter(encoder)
    sequence = PackSequence(packed, encoder, world_size=world, micro_batches_per_step=micro_batches)
    items = range(world * micro_batches)  # item k * W + r: rank r's k-th micro-batch
    batches = [adapter(sequence[i]) for i in items]
    model = uneven_model("qwen2_5_vl").train()

    step_tokens = sum(_count_label_tokens(batch["labels"], -100) for batch in batches)  # all ranks' (all-reduce)
    model.zero_grad()
    for batch in batches:
        labels = batch.pop("labels")
        out = model(**filter_forward_kwargs(model, batch))
        local_loss = calculate_loss(MaskedCrossEntropy(), logits=out.logits, labels=labels,
                                    num_label_tokens=step_tokens)  # fmt: skip
        (local_loss * world).backward()
    got = {name: p.grad / world for name, p in trainable(model).items()}  # the ranks' gradients averaged

    model.zero_grad()
    per_pack = []  # (its scored tokens, its share of the oracle's gradient)
    for i in items:
        cooked = sequence.packs.packs.read(sequence.pack_index(i))
        before = {name: p.grad.clone() if p.grad is not None else torch.zeros_like(p)
                  for name, p in trainable(model).items()}  # fmt: skip
        tokens = 0
        for sub in cooked.pack.samples:
            single = encoder.encode(PackedSample(pack_id=0, capacity=1 << 20, split="train", samples=(sub,)),
                                    cooked.media)  # fmt: skip
            n = int((single.labels[0, 1:] != -100).sum())
            if not n:
                continue
            vision = {k: v.to(torch.bfloat16) if k.startswith("pixel_values") else v for k, v in single.vision.items()}
            loss = model(input_ids=single.input_ids, labels=single.labels,
                         mm_token_type_ids=encoder.rope.mm_token_type_ids(single.input_ids), **vision).loss
            (loss * n / step_tokens).backward()
            tokens += n
        per_pack.append((tokens, {name: p.grad - before[name] for name, p in trainable(model).items()}))
    assert sum(n for n, _ in per_pack) == step_tokens  # the same scored tokens, one for one
    want = {name: p.grad for name, p in trainable(model).items()}

    def norm(grad) -> float:
        return float(torch.sqrt(sum((g.double() ** 2).sum() for g in grad.values())))

    scale = norm(want)
    assert abs(norm(got) - scale) < tolerance * scale
    for name, g in want.items():  # a weight with a float-noise gradient (zero in exact arithmetic): 1e-4 of the whole
        assert norm({name: got[name] - g}) <= tolerance * max(norm({name: g}), 1e-4 * scale), name
    # the test can fail: each micro-batch normalised by its own tokens, then averaged, is measurably off
    wrong = {name: sum(share[name] * step_tokens / n for n, share in per_pack) / len(per_pack) for name in want}
    assert norm({name: wrong[name] - want[name] for name in want}) > 100 * tolerance * scale
