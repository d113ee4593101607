"""``transformers.Trainer`` trains on real packs: its own loop, sampler, workers, loss scaling and resume.

A real packed dataset (real stages, a real processor folder, images and videos) is trained on by
a real ``Trainer`` (``PackedTrainer`` = the Trainer with ``PackedTrainerMixin``) for a few steps of two
micro-batches each, DataLoader workers on, learning rate 0 so the model stays the one the oracle
runs. Oracle: each sub-sample of the step's packs encoded alone and run alone through the same HF
model (no mask, no positions given: the model's own). Per-step loss (the sum of the step's
micro-batch losses the Trainer returns) equals the oracle's: the mean over the step's sub-samples
of each one's mean token loss (``loss="sample"``), or the mean over all their scored tokens
(``loss="token"``). Then a checkpoint, and ``train(resume_from_checkpoint=...)`` continues with the
next pack. Two ranks, both losses, gradients against the samples trained unpacked, Qwen2.5-VL and
Gemma3: tests/test_trainer_gradients.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _real_packs import build_packed

from vlmpack_offline.errors import ConfigError
from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.loader.adapters import PackedTrainerMixin, TrainerPacks
from vlmpack_offline.packed_format import PackedSample
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import generate_dataset
from vlmpack_offline.synthetic.tiny_models import tiny_qwen_vl

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
from transformers import Trainer, TrainingArguments  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]  # fmt: skip

CAPACITY = 1024
GA = 2  # micro-batches per optimizer step


class RecordingTrainer(PackedTrainerMixin, Trainer):
    """The real Trainer; only records what each micro-batch's step returned and which tokens it trained on."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.micro: list[tuple[tuple[int, ...], float]] = []

    def training_step(self, model, inputs, num_items_in_batch=None):
        ids = tuple(inputs["input_ids"][0].tolist())
        loss = super().training_step(model, inputs, num_items_in_batch)
        self.micro.append((ids, loss.item()))
        return loss


@pytest.fixture(scope="module")
def qwen2_packed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("trainer_qwen2")
    processor = build_processor_dir(root / "processor", "qwen2_vl")
    generate_dataset(root / "src", seed=21, n_shards=2, samples_per_shard=24, include_faults=False)
    config = build_packed(root, root / "src", processor, capacity=CAPACITY, scan={"max_drop_ratio": 1.0})
    return config.packed_wds_dir


def _args(out: Path, **overrides) -> TrainingArguments:
    values = dict(output_dir=str(out), per_device_train_batch_size=1, gradient_accumulation_steps=GA, max_steps=3,
                  learning_rate=0.0, dataloader_num_workers=2, logging_steps=1, report_to=[], use_cpu=True,
                  save_strategy="no", seed=0, disable_tqdm=True)  # fmt: skip
    values.update(overrides)
    return TrainingArguments(**values)


def _alone(model, encoder: PackEncoder, packs, pack_index: int) -> list[tuple[float, int]]:
    """(mean token loss, scored tokens) of every sub-sample of the pack, each run alone."""
    cooked = packs.read(pack_index)
    out = []
    with torch.no_grad():
        for sub in cooked.pack.samples:
            single = encoder.encode(PackedSample(pack_id=0, capacity=1 << 20, split="train", samples=(sub,)),
                                    cooked.media)  # fmt: skip
            kwargs = {"token_type_ids": single.token_type_ids} if single.token_type_ids is not None else {}
            if encoder.rope.is_mrope:  # what the processor returns beside input_ids; the model makes its rope index
                kwargs["mm_token_type_ids"] = encoder.rope.mm_token_type_ids(single.input_ids)
            loss = model(input_ids=single.input_ids, labels=single.labels, use_cache=False, **kwargs,
                         **single.vision).loss  # fmt: skip
            out.append((loss.item(), int((single.labels[0, 1:] != -100).sum())))
    return out


def _oracle_steps(packed: Path, packs: TrainerPacks, loss: str, steps: int, model) -> list[float]:
    dataset, encoder = packs.dataset, PackEncoder.from_packed_dir(packed)
    result = []
    for step in range(steps):
        subs = [s for m in range(GA) for s in _alone(model, encoder, dataset.packs.packs,
                                                     dataset.pack_index(step * GA + m))]  # fmt: skip
        scored = [(mean, n) for mean, n in subs if n]
        if loss == "sample":
            result.append(sum(mean for mean, _ in scored) / len(scored))
        else:
            result.append(sum(mean * n for mean, n in scored) / sum(n for _, n in scored))
    return result


def _step_losses(trainer) -> list[float]:
    return [sum(loss for _, loss in trainer.micro[i : i + GA]) for i in range(0, len(trainer.micro), GA)]


def test_trainer_step_loss_equals_the_samples_run_one_by_one(qwen2_packed, tmp_path):
    loss = "sample"  # the token loss: the two-rank test below
    model = tiny_qwen_vl("qwen2_vl", "sdpa", seed=0)
    args = _args(tmp_path / "out")
    packs = TrainerPacks.for_packed_dir(qwen2_packed, args, model=model, loss=loss)
    trainer = RecordingTrainer(model=model, args=args, train_dataset=packs.dataset, data_collator=packs.collator)
    trainer.train()
    assert len(trainer.micro) == 3 * GA  # DataLoader workers on: every micro-batch came through them
    # the Trainer read the plan's order: micro-batch k is item k
    for k, (ids, _) in enumerate(trainer.micro):
        expected = packs.dataset.packs.packs.read(packs.dataset.pack_index(k))
        assert len(ids) == sum(sub.token_len for sub in expected.pack.samples)
    got = _step_losses(trainer)
    want = _oracle_steps(qwen2_packed, packs, loss, 3, model.eval())
    assert len(got) == 3
    for step, (a, b) in enumerate(zip(got, want, strict=True)):
        assert abs(a - b) < 1e-4 * max(1.0, abs(b)), (loss, step, a, b)


def test_resume_from_a_checkpoint_continues_with_the_next_pack(qwen2_packed, tmp_path):
    """Training, then a resume from the step-2 checkpoint: the same packs, weights and losses as step 3.

    The resumed model is loaded with ``from_pretrained(checkpoint)``: transformers' Trainer loads a
    checkpoint's weights without the model's key conversion (Qwen2-VL saves ``visual.*``, holds
    ``model.visual.*``: huggingface/transformers#43701), so on its own it would keep fresh weights."""
    out = tmp_path / "out"
    model = tiny_qwen_vl("qwen2_vl", "sdpa", seed=0)
    args = _args(out, max_steps=3, save_strategy="steps", save_steps=2, learning_rate=1e-2)
    packs = TrainerPacks.for_packed_dir(qwen2_packed, args, model=model)
    first = RecordingTrainer(model=model, args=args, train_dataset=packs.dataset, data_collator=packs.collator)
    first.train()
    assert (out / "checkpoint-2").is_dir()

    model = type(model).from_pretrained(out / "checkpoint-2", attn_implementation="sdpa")
    packs = TrainerPacks.for_packed_dir(qwen2_packed, args, model=model)
    second = RecordingTrainer(model=model, args=args, train_dataset=packs.dataset, data_collator=packs.collator)
    second.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    assert [ids for ids, _ in second.micro] == [ids for ids, _ in first.micro[2 * GA :]]  # the next packs
    for (_, a), (_, b) in zip(second.micro, first.micro[2 * GA :], strict=True):
        assert abs(a - b) < 1e-4 * max(1.0, abs(b))  # the same weights, optimizer state and data after resuming
    assert first.micro[2 * GA][1] != first.micro[0][1]  # the learning rate moved the weights in between


def test_a_plain_trainer_that_shuffles_is_refused_at_the_first_pack_out_of_order(qwen2_packed, tmp_path):
    model = tiny_qwen_vl("qwen2_vl", "sdpa", seed=0)
    args = _args(tmp_path / "out", dataloader_num_workers=0, max_steps=6)
    packs = TrainerPacks.for_packed_dir(qwen2_packed, args, model=model, loss="token")
    trainer = Trainer(model=model, args=args, train_dataset=packs.dataset, data_collator=packs.collator)
    with pytest.raises(ConfigError, match="train_sampling_strategy='sequential'"):
        trainer.train()  # the default sampler is random


def test_a_plain_trainer_with_the_per_sample_loss_is_refused(qwen2_packed, tmp_path):
    model = tiny_qwen_vl("qwen2_vl", "sdpa", seed=0)
    args = _args(tmp_path / "out", dataloader_num_workers=0, train_sampling_strategy="sequential")
    packs = TrainerPacks.for_packed_dir(qwen2_packed, args, model=model, loss="sample")
    trainer = Trainer(model=model, args=args, train_dataset=packs.dataset, data_collator=packs.collator)
    with pytest.raises(ConfigError, match="train with PackedTrainer"):
        trainer.train()


def test_bad_settings_are_refused_naming_the_fix(qwen2_packed, tmp_path):
    model = tiny_qwen_vl("qwen2_vl", "sdpa", seed=0)
    with pytest.raises(ConfigError, match="per_device_train_batch_size=2: a pack is one micro-batch"):
        TrainerPacks.for_packed_dir(qwen2_packed, _args(tmp_path, per_device_train_batch_size=2), model=model)
    with pytest.raises(ConfigError, match="dataloader_persistent_workers=True"):
        TrainerPacks.for_packed_dir(qwen2_packed, _args(tmp_path, dataloader_persistent_workers=True))
    with pytest.raises(ConfigError, match=r"packed for model_type 'qwen2_vl' but the model is 'qwen2_5_vl'"):
        TrainerPacks.for_packed_dir(qwen2_packed, _args(tmp_path), model=tiny_qwen_vl("qwen2_5_vl"))
    packs = TrainerPacks.for_packed_dir(qwen2_packed, _args(tmp_path))
    trainer = RecordingTrainer(model=model, args=_args(tmp_path, gradient_accumulation_steps=3),
                               train_dataset=packs.dataset, data_collator=packs.collator)  # fmt: skip
    with pytest.raises(ConfigError, match="cut for gradient_accumulation_steps=2 but the Trainer runs with 3"):
        trainer.train()


def test_accelerates_sharding_gives_each_rank_its_packdataset_order(qwen2_packed):
    from accelerate.data_loader import prepare_data_loader
    from torch.utils.data import DataLoader, SequentialSampler

    from vlmpack_offline.loader import PackDataset, PackSequence

    encoder = PackEncoder.from_packed_dir(qwen2_packed, options=EncoderOptions())
    world = 2
    sequence = PackSequence(qwen2_packed, encoder, world_size=world, micro_batches_per_step=GA)
    for rank in range(world):
        loader = DataLoader(sequence, batch_size=1, sampler=SequentialSampler(sequence), collate_fn=lambda b: b[0])
        shard = prepare_data_loader(loader, num_processes=world, process_index=rank, put_on_device=False)
        got = [batch.pack_id for batch in shard]
        order = PackDataset(qwen2_packed, encoder, rank=rank, world_size=world).rank_order(0)
        ids = [PackDataset(qwen2_packed, encoder, rank=0, world_size=1).packs.read(int(i)).pack.pack_id
               for i in order[: len(got)]]  # fmt: skip
        assert len(got) == len(sequence) // world and got == ids


def test_flash_attention_batches_give_transformers_flash_path_the_sub_sample_boundaries(qwen2_packed, tmp_path):
    from transformers.modeling_flash_attention_utils import (
        _is_packed_sequence,
        prepare_fa_kwargs_from_position_ids,
    )

    model = tiny_qwen_vl("qwen2_vl", "sdpa", seed=0)
    args = _args(tmp_path, dataloader_num_workers=0)
    packs = TrainerPacks.for_packed_dir(qwen2_packed, args, model=model, loss="token",
                                        attn_implementation="flash_attention_2")  # fmt: skip
    packs.dataset.read_by_packed_trainer = True
    seen = set()
    for i in range(len(packs.dataset)):
        batch = packs.dataset[i]
        micro = packs.collator([batch])
        assert "attention_mask" not in micro  # flash-attention takes boundaries, never a mask
        text_row = micro["position_ids"][0]  # HF's Qwen-VL text models read the leading text row
        (cu_q, cu_k), (max_q, _) = prepare_fa_kwargs_from_position_ids(text_row)
        assert torch.equal(cu_q, batch.cu_seqlens) and int(max_q) == batch.max_seqlen
        assert bool(_is_packed_sequence(text_row, 1)) == (batch.n_segments > 1)
        if len(batch.vision):  # HF hands these kwargs to the vision tower too: there it derives them itself
            assert "cu_seq_lens_q" not in micro
        else:
            assert torch.equal(micro["cu_seq_lens_q"], cu_q) and micro["max_length_q"] == batch.max_seqlen
        seen.add(bool(len(batch.vision)))
    assert seen == {True, False}


def test_evaluation_averages_each_packs_per_sample_loss(qwen2_packed, tmp_path):
    from torch.utils.data import Subset

    model = tiny_qwen_vl("qwen2_vl", "sdpa", seed=0)
    args = _args(tmp_path / "out", per_device_eval_batch_size=1, dataloader_num_workers=0)
    packs = TrainerPacks.for_packed_dir(qwen2_packed, args, model=model)
    trainer = RecordingTrainer(model=model, args=args, train_dataset=packs.dataset, data_collator=packs.collator)
    metrics = trainer.evaluate(eval_dataset=Subset(packs.dataset, range(2)))
    encoder = PackEncoder.from_packed_dir(qwen2_packed)
    per_pack = []
    for i in range(2):
        scored = [m for m, n in _alone(model.eval(), encoder, packs.dataset.packs.packs, packs.dataset.pack_index(i)) if n]
        per_pack.append(sum(scored) / len(scored))
    assert abs(metrics["eval_loss"] - sum(per_pack) / 2) < 1e-4 * max(1.0, metrics["eval_loss"])


def test_trls_sft_trainer_trains_on_the_packs_with_the_mixin(qwen2_packed, tmp_path):
    trl = pytest.importorskip("trl")
    from transformers import AutoTokenizer

    class PackedSFTTrainer(PackedTrainerMixin, trl.SFTTrainer):
        pass

    model = tiny_qwen_vl("qwen2_vl", "sdpa", seed=0)
    config = trl.SFTConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=1, gradient_accumulation_steps=GA,
        max_steps=1, learning_rate=0.0, dataloader_num_workers=2, report_to=[], use_cpu=True, save_strategy="no",
        seed=0, disable_tqdm=True, dataset_kwargs={"skip_prepare_dataset": True}, remove_unused_columns=False,
        padding_free=False, packing=False, max_length=None, bf16=False,  # TRL defaults to bf16: slow on CPU
    )  # fmt: skip
    packs = TrainerPacks.for_packed_dir(qwen2_packed, config, model=model)
    processor_dir = Path(PackEncoder.from_packed_dir(qwen2_packed).config.model.processor_kwargs["pretrained_model_name_or_path"])
    trainer = PackedSFTTrainer(model=model, args=config, train_dataset=packs.dataset, data_collator=packs.collator,
                               processing_class=AutoTokenizer.from_pretrained(processor_dir))  # fmt: skip
    losses = []
    trainer.training_step = _recording(trainer.training_step, losses)
    trainer.train()
    want = _oracle_steps(qwen2_packed, packs, "sample", 1, model.eval())
    assert len(losses) == GA and abs(sum(losses) - want[0]) < 1e-4 * max(1.0, want[0])


def _recording(step, losses: list[float]):
    def record(model, inputs, num_items_in_batch=None):
        loss = step(model, inputs, num_items_in_batch)
        losses.append(loss.item())
        return loss

    return record


def test_checkpointing_with_several_ranks_needs_unused_parameter_search_or_dummy_images(qwen2_packed, tmp_path,
                                                                                         monkeypatch):
    args = _args(tmp_path, gradient_checkpointing=True)
    monkeypatch.setattr(type(args), "world_size", property(lambda self: 2))
    with pytest.raises(ConfigError, match="set ddp_find_unused_parameters=True, or pass dummy_image_for_text_packs"):
        TrainerPacks.for_packed_dir(qwen2_packed, args)
    packs = TrainerPacks.for_packed_dir(qwen2_packed, args, dummy_image_for_text_packs=True)
    assert packs.dataset.packs.encoder.options.dummy_image_for_text_packs
    args = _args(tmp_path, gradient_checkpointing=True, ddp_find_unused_parameters=True)
    monkeypatch.setattr(type(args), "world_size", property(lambda self: 2))
    TrainerPacks.for_packed_dir(qwen2_packed, args)
