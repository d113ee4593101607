"""Both losses train the gradient of the same samples trained unpacked, in every Trainer we document.

Packed run: two ranks (``torch.distributed.run``, gloo on CPU) train real packs (real stages, real
processor folders, images and videos) with the real ``transformers.Trainer`` or TRL's
``SFTTrainer`` and ``PackedTrainerMixin``, gradient accumulation 2, two optimizer steps (learning
rate 0, so one unpacked run per family serves all its runs); and a plain ``Trainer`` with
``loss="token"`` for a model that takes its loss kwargs (Gemma3), the one case it is exact without
the mixin. At each step rank 0 saves the weights the step ran with and the gradients the optimizer
gets (after DDP's all-reduce).

Oracle (plain transformers, no packing): every sub-sample of the step's packs, on both ranks and
in both micro-batches, encoded alone and run alone through the same HF model (its own positions,
no mask), its loss the model's own token mean. The step's loss is
``sum_s n_s * mean_s / sum_s n_s`` (``loss="token"``: every scored token of the step weighs the
same) or ``mean_s over scored sub-samples`` (``loss="sample"``), and its gradient is what the
packed step must give: norm and every parameter within 1e-5 relative (fp32, CPU).

The model's token losses are made uneven (``_uneven_model.uneven_model``), and each test checks
that normalising each micro-batch on its own (what transformers' Trainer does for a model with
``accepts_loss_kwargs = False``, such as Qwen2.5-VL) moves the gradient by far more than the
tolerance, so a wrong normaliser fails here. Families: Qwen2.5-VL (``accepts_loss_kwargs = False``)
and Gemma3 (sliding-window layers, image blocks; it accepts the Trainer's loss kwargs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from _ddp_trainer import GA
from _real_packs import build_packed
from _uneven_model import trainable, uneven_model

from vlmpack_offline.loader import PackEncoder, PackSequence
from vlmpack_offline.packed_format import PackedSample
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import generate_dataset
from vlmpack_offline.synthetic.tiny_models import tiny_gemma3_config

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("trl")

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]  # fmt: skip

WORLD = 2
STEPS = 2
# tokens per pack: 1 to 4 sub-samples in the first packs of each family. The LM head's 152k-word softmax takes
# most of the time (about 6 ms a token on CPU), so the packs are kept short
CAPACITY = {"qwen2_5_vl": 512, "gemma3": 768}  # Gemma3's images are 256 tokens each
TOLERANCE = 1e-5  # relative, fp32 on CPU
NOISE = 1e-4  # a weight whose gradient is under this share of the whole is held to TOLERANCE of NOISE x the whole:
# some are zero in exact arithmetic (attention key biases: the softmax ignores a shift) and only float noise
RUNS = [  # (family, loss, trainer); "Trainer" is PackedTrainer's base, "plain" a Trainer without the mixin
    ("qwen2_5_vl", "token", "Trainer"),
    ("qwen2_5_vl", "sample", "Trainer"),
    ("gemma3", "token", "Trainer"),
    ("gemma3", "sample", "Trainer"),
    ("qwen2_5_vl", "token", "SFTTrainer"),  # TRL's own token loss, given the mixin's count
    ("gemma3", "token", "plain"),  # Gemma3 takes the Trainer's loss kwargs: transformers' own normalisation
]


def _name(family: str, loss: str, trainer: str) -> str:
    return f"{family}-{loss}-{trainer}"


@pytest.fixture(scope="module")
def packed(tmp_path_factory, qwen25_processor_dir) -> dict[str, tuple[Path, Path]]:
    """family -> (packed directory, processor folder)."""
    root = tmp_path_factory.mktemp("gradients")
    generate_dataset(root / "qwen_src", seed=21, n_shards=2, samples_per_shard=24, include_faults=False)
    qwen = build_packed(root / "qwen", root / "qwen_src", qwen25_processor_dir, capacity=CAPACITY["qwen2_5_vl"],
                        scan={"max_drop_ratio": 1.0})  # fmt: skip
    folder = build_processor_dir(root / "gemma3_processor", "gemma3")
    tiny_gemma3_config(folder).save_pretrained(folder)  # the loader reads the model's config.json (sliding window)
    generate_dataset(root / "gemma3_src", seed=3, n_shards=2, samples_per_shard=24, include_faults=False, video=False)
    gemma3 = build_packed(root / "gemma3", root / "gemma3_src", folder, capacity=CAPACITY["gemma3"], video=None,
                          scan={"max_drop_ratio": 1.0})  # fmt: skip
    return {"qwen2_5_vl": (qwen.packed_wds_dir, qwen25_processor_dir), "gemma3": (gemma3.packed_wds_dir, folder)}


@pytest.fixture(scope="module")
def trained(packed, tmp_path_factory) -> Path:
    """Every run of RUNS trained by two ranks, in one ``torch.distributed.run`` (one start-up for all)."""
    out = tmp_path_factory.mktemp("trained")
    runs = [{"out": str(out / _name(family, loss, trainer)), "packed": str(packed[family][0]),
             "processor": str(packed[family][1]), "family": family, "loss": loss, "trainer": trainer,
             "steps": STEPS, "lr": 0.0} for family, loss, trainer in RUNS]  # fmt: skip
    (out / "runs.json").write_text(json.dumps(runs))
    script = Path(__file__).with_name("_ddp_trainer.py")
    path = os.pathsep.join(filter(None, [str(script.parent), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={WORLD}", "--standalone",
                           str(script), str(out / "runs.json")], env=env, capture_output=True, text=True,
                          timeout=1800)  # fmt: skip
    ranks_said = [line for line in done.stderr.splitlines() if line.startswith("[rank")]  # a rank's traceback
    assert done.returncode == 0, "\n".join(ranks_said[-60:]) or done.stderr[-4000:]
    return out


@dataclass(frozen=True, slots=True)
class Alone:
    """One sub-sample run alone: its mean token loss, its scored tokens, the gradient of that mean."""

    mean: float
    n: int
    grad: dict[str, torch.Tensor]


@dataclass(frozen=True, slots=True)
class Step:
    """The oracle's view of one optimizer step: every pack of it, on every rank, its sub-samples run alone."""

    lengths: dict[tuple[int, int], int]  # (rank, micro-batch k) -> the pack's tokens
    packs: list[list[Alone]]


@pytest.fixture(scope="module")
def unpacked(packed):
    """family -> its model (as every run starts it) and the STEPS steps trained unpacked (computed once)."""
    cache: dict[str, tuple[torch.nn.Module, list[Step]]] = {}

    def steps(family: str) -> tuple[torch.nn.Module, list[Step]]:
        if family not in cache:
            folder, processor = packed[family]
            encoder = PackEncoder.from_packed_dir(folder)
            sequence = PackSequence(folder, encoder, world_size=WORLD, micro_batches_per_step=GA)
            model = uneven_model(family, str(processor)).train()
            result = []
            for step in range(STEPS):
                lengths, packs = {}, []
                for rank in range(WORLD):
                    for k in range(step * GA, (step + 1) * GA):  # this rank's k-th micro-batch is item k * W + rank
                        cooked = sequence.packs.packs.read(sequence.pack_index(k * WORLD + rank))
                        lengths[rank, k] = sum(sub.token_len for sub in cooked.pack.samples)
                        packs.append(_run_alone(model, encoder, cooked))
                result.append(Step(lengths, packs))
            cache[family] = (model, result)
        return cache[family]

    return steps


def _run_alone(model, encoder: PackEncoder, cooked) -> list[Alone]:
    out = []
    for sub in cooked.pack.samples:
        single = encoder.encode(PackedSample(pack_id=0, capacity=1 << 20, split="train", samples=(sub,)), cooked.media)
        n = int((single.labels[0, 1:] != -100).sum())
        if not n:
            out.append(Alone(0.0, 0, {}))
            continue
        kwargs = {"token_type_ids": single.token_type_ids} if single.token_type_ids is not None else {}
        if encoder.rope.is_mrope:  # what the processor returns beside input_ids; the model makes its rope index
            kwargs["mm_token_type_ids"] = encoder.rope.mm_token_type_ids(single.input_ids)
        model.zero_grad()
        loss = model(input_ids=single.input_ids, labels=single.labels, use_cache=False, **kwargs, **single.vision).loss
        loss.backward()
        grad = {name: p.grad.clone() if p.grad is not None else torch.zeros_like(p)
                for name, p in trainable(model).items()}  # fmt: skip
        out.append(Alone(loss.item(), n, grad))
    return out


def _combine(subs: list[Alone], loss: str) -> tuple[float, dict[str, torch.Tensor]]:
    """The loss and gradient of these sub-samples together: token-weighted, or the mean of their means."""
    scored = [s for s in subs if s.n]
    weights = [s.n / sum(t.n for t in scored) for s in scored] if loss == "token" else [1 / len(scored)] * len(scored)
    value = sum(w * s.mean for w, s in zip(weights, scored, strict=True))
    grad = {name: sum(w * s.grad[name] for w, s in zip(weights, scored, strict=True)) for name in scored[0].grad}
    return value, grad


def _norm(grad: dict[str, torch.Tensor]) -> float:
    return float(torch.sqrt(sum((g.double() ** 2).sum() for g in grad.values())))


def _distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return float(torch.sqrt(sum(((a[n].double() - b[n].double()) ** 2).sum() for n in b)))


@pytest.mark.parametrize(("family", "loss", "trainer"), RUNS, ids=[_name(*run) for run in RUNS])
def test_every_step_has_the_gradient_of_the_samples_trained_unpacked(trained, unpacked, family, loss, trainer):
    out = trained / _name(family, loss, trainer)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]
    model, steps = unpacked(family)
    logged = [entry["grad_norm"] for entry in ranks[0]["log"] if "grad_norm" in entry]
    assert len(logged) == STEPS
    for step, oracle in enumerate(steps):
        saved = torch.load(out / f"step{step}.pt")
        for name, p in trainable(model).items():  # the weights the oracle ran with (learning rate 0)
            assert torch.equal(saved["weights"][name], p.detach()), name
        for (rank, k), length in oracle.lengths.items():  # each rank trained the packs the oracle ran
            assert ranks[rank]["micro"][k][0] == length, (rank, k)
        want_loss, want = _combine([s for subs in oracle.packs for s in subs], loss)
        got = saved["grads"]

        # the loss the Trainer returned: each rank's micro-batches summed, the ranks averaged (as DDP does)
        got_loss = sum(loss_ for r in ranks for _, loss_ in r["micro"][step * GA : (step + 1) * GA]) / WORLD
        assert abs(got_loss - want_loss) < TOLERANCE * abs(want_loss), (step, got_loss, want_loss)
        scale = _norm(want)
        assert abs(_norm(got) - scale) < TOLERANCE * scale, (step, _norm(got), scale)
        assert abs(logged[step] - scale) < TOLERANCE * scale, (step, logged[step], scale)  # the Trainer's own norm
        for name, g in want.items():
            bound = TOLERANCE * max(_norm({name: g}), NOISE * scale)
            assert _distance({name: got[name]}, {name: g}) <= bound, (step, name)

        # the test can fail: each micro-batch normalised on its own would be measurably off
        wrong = {name: sum(_combine(subs, loss)[1][name] for subs in oracle.packs) / len(oracle.packs) for name in want}
        assert _distance(wrong, want) > 100 * TOLERANCE * scale, (step, _distance(wrong, want) / scale)


def _plain_trainer(packed, tmp_path, model, **overrides):
    from transformers import Trainer, TrainingArguments

    from vlmpack_offline.loader.adapters import TrainerPacks

    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=1, gradient_accumulation_steps=GA,
                             max_steps=1, dataloader_num_workers=0, report_to=[], use_cpu=True, save_strategy="no",
                             train_sampling_strategy="sequential", **overrides)  # fmt: skip
    packs = TrainerPacks.for_packed_dir(packed, args, model=model, loss="token")
    return Trainer(model=model, args=args, train_dataset=packs.dataset, data_collator=packs.collator)


def test_a_plain_trainer_with_the_token_loss_is_refused_for_a_model_that_takes_no_loss_kwargs(packed, tmp_path):
    """transformers' Trainer would hand Qwen2.5-VL no token count: each pack its own mean, then / accumulation."""
    from vlmpack_offline.errors import ConfigError

    trainer = _plain_trainer(packed["qwen2_5_vl"][0], tmp_path, uneven_model("qwen2_5_vl"))
    with pytest.raises(ConfigError, match="Qwen2_5_VLForConditionalGeneration sets accepts_loss_kwargs=False"):
        trainer.train()


def test_a_plain_trainer_with_the_token_loss_needs_the_model_to_check_or_the_mixin(packed, tmp_path, monkeypatch):
    from transformers import TrainingArguments

    from vlmpack_offline.errors import ConfigError
    from vlmpack_offline.loader.adapters import TrainerPacks

    folder = packed["qwen2_5_vl"][0]
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=1, gradient_accumulation_steps=GA,
                             report_to=[], use_cpu=True)  # fmt: skip
    with pytest.raises(ConfigError, match="pass model= to TrainerPacks.for_packed_dir so it can check"):
        TrainerPacks.for_packed_dir(folder, args, loss="token").dataset[0]
    # several ranks: transformers' Trainer spans them only with average_tokens_across_devices
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=1, gradient_accumulation_steps=GA,
                             report_to=[], use_cpu=True, average_tokens_across_devices=False)  # fmt: skip
    monkeypatch.setattr(type(args), "world_size", property(lambda self: 2))
    gemma3 = uneven_model("gemma3", str(packed["gemma3"][1]))
    with pytest.raises(ConfigError, match="average_tokens_across_devices=False: each rank would divide by its own"):
        TrainerPacks.for_packed_dir(packed["gemma3"][0], args, model=gemma3, loss="token").dataset[0]
