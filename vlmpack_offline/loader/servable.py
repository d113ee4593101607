"""Whether the loader can serve a model type, said by the scan before it reads a shard (``check_servable``).

Everything the scan accepts must be servable: a family the loader cannot serve is refused when the
scan starts, with the reason, never at the first training step after scan, bucket, plan and write
ran. The check builds the loader's own pieces for the folder and runs them on a tiny generated
sample::

    every family        the model's rope index (``rope.RopeIndex``: the class that defines it, built on the
                        meta device from the folder's config) on a text-only sample
    processor families  the loader's processor (``AutoProcessor``; without torchvision the folder's processor
    (no module in       built from its parts, ``tokens/processor_parts.py``), then ``ProcessorPack.rows`` on a
    families/)          generated pack: one image sample, one text sample (and one 8-frame video sample where
                        the folder has a video processor; a 1-second tone, alone and beside the image, where
                        it has a feature extractor and an audio token), rendered by the folder's chat template:
                        the batch call, the labels carried through the processor's replacements, the rope index
                        on its fields (Qwen-Omni's counts an audio's tokens from its mel frames beside an
                        image), the per-row shapes; with audio, the whole pack once more (one call per
                        sub-sample, the audio fields joined: ``processor_pack.py``); with
                        ``load_audio_from_video`` the video with a two-second track of its own (the frames and
                        the track's tokens interleaved, the rope index with ``use_audio_in_video``)

A part that needs torchvision where it is missing (a video processor, Molmo2's image processor) is not
refused: the loader runs where torchvision is installed; ``vlmpack scan`` logs that it was left out.
The verdict is cached per folder (its files' sizes and times) in the process, and a yes on disk (``disk_cache.py``:
under the folder's files, the versions and the loader's deciding source), so a later scan need not import torch.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from pathlib import Path
from typing import Any

from ..disk_cache import key_of, read_json, write_json
from ..errors import ConfigError

__all__ = ["check_servable", "runs_processor", "load_processor", "processor_for_loader"]

log = logging.getLogger(__name__)


def runs_processor(model_type: str) -> bool:
    """True for a processor family: no hand-written module in ``families/`` (the loader runs its processor)."""
    from ..families import family_for

    return family_for(model_type) is None


def load_processor(path: str | Path, model_type: str, processor_kwargs: dict[str, Any]):
    """The folder's processor: ``AutoProcessor``; where that fails without torchvision (every processor with a
    video processor), the folder's processor class built from its parts, a part torchvision gates left None."""
    from transformers import AutoProcessor
    from transformers.utils import is_torchvision_available

    from ..remote_code import load_pretrained, trusted

    kwargs = {k: v for k, v in processor_kwargs.items() if k != "pretrained_model_name_or_path"}
    trust = trusted(processor_kwargs)
    try:
        return load_pretrained(AutoProcessor.from_pretrained, str(path), **{**kwargs, "trust_remote_code": trust})
    except ConfigError:
        raise
    except Exception as exc:
        if is_torchvision_available():
            raise ConfigError(f"{path}: AutoProcessor.from_pretrained failed: {type(exc).__name__}: {exc}") from None
    from ..tokens.processor_parts import build_processor

    return build_processor(path, model_type, processor_kwargs, trust_remote_code=trust).processor


def processor_for_loader(rules, config, counter, rope):
    """The ``ProcessorPack`` of a processor family: the folder's processor, the scan's chat renderer and
    ``train_on``, the model's rope index, and the inputs its trained class's ``forward`` takes by name."""
    from .model_classes import forward_inputs, trained_class
    from .processor_pack import ProcessorPack

    processor = load_processor(rules.processor_path, rules.model_type, config.model.processor_kwargs)
    trained = trained_class(rope.config)
    return ProcessorPack(processor, chat=counter.chat, train_on=counter.train_on, rope=rope,
                         model_inputs=forward_inputs(trained.cls) if trained is not None else None)  # fmt: skip


def check_servable(rules, processor_kwargs: dict[str, Any] | None = None) -> None:
    """Raise ``ConfigError`` naming the model type and why the loader cannot serve the folder ``rules`` describe
    (module doc); return quietly when it can. ``processor_kwargs``: ``model.processor_kwargs``."""
    if rules.text_only:  # the loader gives 1-D positions and needs no processor
        return
    kwargs_json = json.dumps(dict(processor_kwargs or {}), sort_keys=True, default=str)
    key = key_of(folder=rules.processor_path, sources=_SOURCES, packages=_PACKAGES, extra=[rules.model_type, kwargs_json])
    kept = read_json("servable", key)
    if isinstance(kept, dict) and kept.get("ok") is True and isinstance(kept.get("warnings"), list):
        for line in kept["warnings"]:  # what the check left out, said again
            log.warning("%s", line)
        return
    warnings = _Warnings()
    log.addHandler(warnings)
    try:
        _check(rules.processor_path, rules.model_type, kwargs_json, _stamp(rules.processor_path))
    finally:
        log.removeHandler(warnings)
    write_json("servable", key, {"ok": True, "warnings": warnings.lines})


# what decides the verdict (disk_cache.py): a refusal is never kept, so it is said again with its reason
_SOURCES = ("loader/servable.py", "loader/rope.py", "loader/processor_pack.py", "loader/model_classes.py",
            "loader/vision_inputs.py", "tokens/processor_parts.py", "tokens/spans.py")  # fmt: skip
_PACKAGES = ("transformers", "torch", "torchvision", "tokenizers", "numpy", "pillow")


class _Warnings(logging.Handler):
    """The lines the check logs (parts left out for want of torchvision), kept with its verdict."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _stamp(path: str) -> tuple:
    """The folder's files, sizes and times: a changed folder is checked again."""
    folder = Path(path)
    return tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file())) \
        if folder.is_dir() else ()  # fmt: skip


@functools.lru_cache(maxsize=32)
def _check(path: str, model_type: str, kwargs_json: str, stamp: tuple) -> None:
    import torch

    from ..remote_code import trusted
    from .rope import RopeError, RopeIndex

    kwargs = json.loads(kwargs_json)
    what = f"model_type {model_type!r} ({path})"
    try:
        rope = RopeIndex.from_processor_dir(path, model_type=model_type, trust_remote_code=trusted(kwargs))
        rope.positions(torch.arange(1, 9)[None])  # a text-only sample: the config has what the function reads
    except RopeError as exc:
        raise ConfigError(f"{what}: the loader cannot serve it: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the model's own function failing on its config
        where = rope.source.describe() if "rope" in locals() and rope.source else "the model's rope index"
        raise ConfigError(
            f"{what}: the loader cannot serve it: {where} fails on a text-only sample with this config "
            f"({type(exc).__name__}: {exc}); put the checkpoint's own config.json in the processor folder"
        ) from None
    if not runs_processor(model_type):
        return
    try:
        processor = load_processor(path, model_type, kwargs)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"{what}: the loader cannot serve it: its processor does not load ({exc})") from None
    tracks = any(kwargs.get(key) is True for key in ("load_audio_from_video", "use_audio_in_video"))
    _check_pack(what, processor, rope, tracks=tracks)


def _check_pack(what: str, processor, rope, *, tracks: bool = False) -> None:
    """``ProcessorPack.rows`` on a generated pack (module doc); ``ConfigError`` with the step that failed."""
    import numpy as np
    from PIL import Image
    from transformers.utils import is_torchvision_available

    from ..tokens.spans import ChatRenderer
    from .model_classes import forward_inputs, trained_class
    from .processor_pack import ProcessorPack

    tokenizer = processor.tokenizer
    template = getattr(processor, "chat_template", None) or tokenizer.chat_template
    if not template:
        raise ConfigError(f"{what}: the loader cannot serve it: the folder has no chat template")
    trained = trained_class(rope.config)
    pack = ProcessorPack(processor, chat=ChatRenderer(template, dict(tokenizer.special_tokens_map)), train_on="all",
                         rope=rope, model_inputs=forward_inputs(trained.cls) if trained is not None else None)  # fmt: skip
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 255, (96, 128, 3), dtype=np.uint8))
    samples = [_generated("text", ())]
    parts = type(processor).get_attributes()
    if not _needs_missing_torchvision(getattr(processor, "image_processor", None)):
        samples.append(_generated("image", (("image", image),)))
    elif "image_processor" in parts:  # a torchvision-backend class (Molmo2's): it loads here but cannot run
        log.warning("%s: images not checked for the loader here (its image processor needs torchvision); the "
                    "loader needs torchvision where it runs", what)  # fmt: skip
    # every video processor runs on torchvision (Molmo2's loads without it, then fails on the first video)
    if getattr(processor, "video_processor", None) is not None and is_torchvision_available():
        from transformers.video_utils import VideoMetadata

        frames = rng.integers(0, 255, (8, 96, 128, 3), dtype=np.uint8)
        metadata = VideoMetadata(total_num_frames=8, fps=4.0, duration=2.0, width=128, height=96,
                                 frames_indices=list(range(8)))  # fmt: skip
        samples.append(_generated("video", (("video", frames),), metadata))
    elif "video_processor" in parts and not is_torchvision_available():
        log.warning("%s: videos not checked for the loader here (its video processor needs torchvision); the "
                    "loader needs torchvision where it runs", what)  # fmt: skip
    if pack.sampling_rate is not None:  # it hears: a 440 Hz tone of one second, alone and beside the image
        tone = np.sin(2 * np.pi * 440 * np.arange(pack.sampling_rate) / pack.sampling_rate).astype(np.float32) / 10
        samples.append(_generated("audio", (("audio", tone),)))
        if any(s.sample_id == "image" for s in samples):
            samples.append(_generated("image+audio", (("image", image), ("audio", tone))))
        if tracks and any(s.sample_id == "video" for s in samples):  # load_audio_from_video: its own track
            track = np.tile(tone, 2)
            video = next(s for s in samples if s.sample_id == "video")
            samples.append(dataclasses.replace(video, sample_id="video+track", audios=(track,),
                                               audio_from_video_indices=(0,)))  # fmt: skip
    checked = []
    for sample in samples:
        if _checked(what, pack, [sample]):
            checked.append(sample)
    if any(s.audios for s in checked) and len(checked) > 1:
        _checked(what, pack, checked)


def _checked(what: str, pack, samples: list) -> bool:
    """``pack.rows`` on ``samples`` as one pack; False where a part needs torchvision, which is missing (logged)."""
    from transformers.utils import is_torchvision_available

    name = " + ".join(s.sample_id for s in samples)
    try:
        rows, _fields = pack.rows(0, samples, check_lengths=False)
    except Exception as exc:  # noqa: BLE001 - the processor's, the rope's, or our label mapping's refusal
        if not is_torchvision_available() and "torchvision" in f"{type(exc).__name__} {exc}".lower():
            log.warning("%s: %s samples not checked for the loader here (needs torchvision): %s", what, name, exc)
            return False
        raise ConfigError(
            f"{what}: the loader cannot serve it: a generated {name} sample fails in the loader's processor path "
            f"({type(exc).__name__}: {exc})"
        ) from None
    for sample, row in zip(samples, rows, strict=True):
        length = len(row.input_ids)
        if row.positions.shape[-1] != length or row.labels.shape != row.input_ids.shape:
            raise ConfigError(f"{what}: the loader cannot serve it: the model's positions {tuple(row.positions.shape)} "
                              f"do not cover the {length} tokens of a generated {sample.sample_id} sample")  # fmt: skip
    return True


def _needs_missing_torchvision(image_processor) -> bool:
    """True where the image processor is missing or runs on torchvision (``TorchvisionBackend``,
    transformers/image_processing_backends.py) and torchvision is not installed: it cannot run here."""
    from transformers.image_processing_backends import TorchvisionBackend
    from transformers.utils import is_torchvision_available

    return image_processor is None or (isinstance(image_processor, TorchvisionBackend) and not is_torchvision_available())


def _generated(name: str, media: tuple[tuple[str, Any], ...], metadata=None):
    """A one-turn sample named ``name`` holding ``media`` ((kind, decoded item) pairs) before its question."""
    from ..conversation import Conversation, MediaRef
    from .processor_pack import SubSampleMedia

    refs = tuple(MediaRef(kind=kind, part=f"x{index}.{kind}") for index, (kind, _) in enumerate(media))
    content = [{"type": ref.kind, ref.kind: ref.part} for ref in refs]
    messages = ({"role": "user", "content": [*content, {"type": "text", "text": "What is this?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "A test."}]})  # fmt: skip

    def of(kind: str) -> tuple:
        return tuple(item for k, item in media if k == kind)

    return SubSampleMedia(
        sample_id=name, conversation=Conversation(messages=messages, media=refs), token_len=0,
        images=of("image"), videos=of("video"), audios=of("audio"),
        video_metadata=(metadata,) if metadata is not None else (),
    )  # fmt: skip
