"""The generic path proves itself on a folder before it counts a sample with it.

When a folder without a family module is first loaded (``rules.load_model_rules``), the generic path
(``families/generic.py``) counts generated samples and the folder's real processor runs them; the path is
taken only when every replacement string and every whole-sample ``input_ids`` length agree::

    images   12 sizes: squares, 4:3, 16:9 and 9:16, 1:15 and 15:1, 1:300 (past Qwen-style aspect limits),
             tiny (17 x 33, 1 x 1), odd, large; plus one sample with two images
    videos   8 clips of 10 .. 200 frames at 2 .. 30 fps (below, at and above 32-frame and 2 fps rules); with
             ``load_audio_from_video`` (Qwen-Omni) each clip also with an audio track (as long as the clip, and
             one twice as long), and one clip with a track beside a standalone audio (one call, padded together)
    audios   where the family takes audio: 11 clips (in samples at the feature extractor's rate: below one frame,
             around 10 and 100 hops, around 1 s and 2 s chunks, around 30 s where Whisper-sized extractors cut
             or chunk) and two samples of several clips of different lengths in ONE call (the shorter ones padded
             to the longest); a clip the generic path refuses for giving no audio token agrees with a real
             processor that gives it none or refuses it
    sample   the folder's chat template around each item ("Describe ...", one assistant answer)
    compare  the item's replacement (processor(..., return_text_replacement_offsets=True)), the sample's
             len(input_ids) against TokenCounter.count; a size both refuse agrees, one refused by one side
             only does not

The real processor is ``AutoProcessor.from_pretrained`` where it loads, else the processor built from its
parts (``processor_parts.py``: real PIL image processors). Videos are first run as the processor's own call
takes a whole video (its ``sample_frames`` picks the frames; ``return_metadata`` hands back which); where that
call fails on an item, as the loader calls it: the sampled frames with ``do_sample_frames=False``.

**Where the real processor cannot run here.** Without torchvision no video processor runs (every
``BaseVideoProcessor`` is gated on it), and some image processors have no PIL class (Molmo2). The issue this
answers wants no family to need torchvision to scan, and a count never to be wrong. Refusing those parts here
would send the folder to the slow path, which needs torchvision too: the scan could not run at all. So a part
that cannot run here is accepted when the test suite proves the generic path equal to the real processor for
that model type and part in the torchvision environment (``tests/test_generic_path.py``, marked
``torchvision``) for the installed transformers version (``SUITE_PROVEN``, ``SUITE_TRANSFORMERS``); what can
run here (the text side, PIL image processors) is still proven here. The scan's line says which:
``gemma4: generic fast path (proved here: 13 images; videos: by the test suite for transformers 5.24.0)``.
With any other transformers version such a part is unproven and the folder takes the slow path.

The verdict is cached (JSON, ``$VLMPACK_CACHE_DIR`` else ``~/.cache/vlmpack``, ``proofs/``) under a hash of the
folder's files, ``model.processor_kwargs``, the template variables, the transformers version and the generic
path's own source, so a rerun is instant and any change proves again.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

from ..config import ModelConfig, VideoConfig
from ..conversation import Conversation, MediaRef
from ..disk_cache import key_of, read_json, write_json
from ..reasons import DropError

__all__ = ["PROOF_AUDIOS", "PROOF_AUDIO_CALLS", "PROOF_IMAGES", "PROOF_VIDEOS", "SUITE_PROVEN", "SUITE_TRANSFORMERS", "Verdict", "prove_folder"]

log = logging.getLogger(__name__)

# (height, width)
PROOF_IMAGES = ((224, 224), (480, 640), (640, 480), (1080, 1920), (1920, 1080), (60, 900), (900, 60),
                (10, 3000), (17, 33), (1, 1), (333, 517), (2000, 1500))  # fmt: skip
PROOF_PAIR = ((300, 400), (512, 256))  # one sample with two images
# (frames, fps, height, width)
PROOF_VIDEOS = ((10, 2.0, 64, 96), (16, 24.0, 120, 200), (31, 30.0, 90, 160), (32, 24.0, 240, 320),
                (48, 24.0, 144, 256), (95, 29.97, 360, 202), (150, 30.0, 120, 200), (200, 25.0, 100, 100))  # fmt: skip

# audio clips, in samples at the feature extractor's rate (Whisper and Gemma4: 16 kHz, hop 160)
PROOF_AUDIOS = (80, 1599, 1600, 1601, 15999, 16000, 16161, 32000, 32159, 479999, 480001)
PROOF_AUDIO_CALLS = ((1600, 33333, 16080), (16010, 16160))  # several clips in one sample: padded together

# load_audio_from_video: (video index in PROOF_VIDEOS, track seconds per video second, standalone audio samples)
PROOF_TRACKS = ((0, 2.0, 0), (3, 1.0, 48_000))

_CANONICAL_VIDEO = (64, 32.0, 144, 256)  # a clip every rule here takes: whether the real processor runs at all

# The model types (and parts) tests/test_generic_path.py proves against the real processor in the torchvision
# environment, for this transformers version: accepted here where the real processor cannot run (module doc).
SUITE_TRANSFORMERS = "5.24.0"
SUITE_PROVEN: dict[str, frozenset[str]] = {
    "gemma4": frozenset({"image", "video"}),
    "glm5_next": frozenset({"image", "video"}),
    "ernie4_5_vl_moe": frozenset({"image", "video"}),
    "lfm3_vl": frozenset({"image", "video"}),
    "molmo2": frozenset({"image", "video"}),
    "qwen3_omni_moe": frozenset({"image", "video"}),
    "qwen2_5_omni": frozenset({"image", "video"}),
}

_SOURCES = ("families/generic.py", "families/generic_fields.py", "families/video_rules.py",
            "families/processor_frames.py", "families/audio_rules.py", "media/audio.py", "tokens/proof.py",
            "tokens/processor_parts.py")  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    ok: bool  # the generic path counts this folder
    line: str  # ok: how it was proven ("proved: 13 images, 8 videos"); else why not, one line


class _CannotRun(Exception):
    """The real processor cannot run this part here (no torchvision ...)."""


def prove_folder(model: ModelConfig, model_type: str) -> Verdict:
    """The verdict for this folder (module doc), from the cache when it holds one."""
    key = _key(model, model_type)
    verdict = _memo(key, model, model_type)
    setting = next((k for k in ("load_audio_from_video", "use_audio_in_video") if model.processor_kwargs.get(k) is True), None)
    if setting and not verdict.ok:  # the slow path would run the processor without the tracks vlmpack reads
        from ..errors import ConfigError

        raise ConfigError(f"model.processor_kwargs.{setting}: vlmpack counts a video's own audio track on the generic "
                          f"path only, which cannot count {model.processor_path} ({verdict.line}); remove {setting}")  # fmt: skip
    return verdict


def _memo(key: str, model: ModelConfig, model_type: str) -> Verdict:
    if key in _MEMO:
        return _MEMO[key]
    cached = _read_cache(key)
    verdict = cached or _prove(model, model_type)
    if cached is None:
        _write_cache(key, verdict)
    _MEMO[key] = verdict
    return verdict


_MEMO: dict[str, Verdict] = {}


def _prove(model: ModelConfig, model_type: str) -> Verdict:
    from ..families.generic import GenericRules, Unservable, generic_family, kwargs_json
    from .rules import ModelRules

    rules = ModelRules(model_type=model_type, processor_path=model.processor_path, text_only=False,
                       generic=GenericRules(processor_kwargs=kwargs_json(model.processor_kwargs), proof="(proving)"))  # fmt: skip
    try:
        family = generic_family(rules)
    except Unservable as exc:
        return Verdict(ok=False, line=str(exc))
    try:
        oracle = _oracle(model, model_type)
    except Exception as exc:  # noqa: BLE001 - any failure to build the real processor: nothing to prove against
        return Verdict(ok=False, line=f"its real processor cannot be built here to prove the generic path against "
                                      f"({type(exc).__name__}: {exc})")  # fmt: skip
    checker = _Checker(rules, family, oracle, model)
    proven: list[str] = []
    suite: list[str] = []
    kinds = (("image", family.takes_image, checker.images), ("video", family.takes_video, checker.videos),
             ("audio", family.takes_audio, checker.audios))  # fmt: skip
    for kind, takes, run in kinds:
        if not takes:
            continue
        try:
            count, mismatch = run()
        except _CannotRun as exc:
            if not _suite_proves(model_type, kind):
                import transformers

                return Verdict(ok=False, line=(
                    f"its {kind}s cannot be proven here ({exc}) and the test suite proves no {model_type} {kind}s "
                    f"for transformers {transformers.__version__} (it does for {SUITE_TRANSFORMERS}: "
                    f"{', '.join(sorted(t for t, kinds in SUITE_PROVEN.items() if kind in kinds))})"))  # fmt: skip
            suite.append(f"{kind}s")
            continue
        if mismatch:
            return Verdict(ok=False, line=mismatch)
        proven.append(f"{count} {kind}s")
    if not proven and not suite:
        return Verdict(ok=False, line=f"{type(family.processor).__name__} takes no images, videos or audio here")
    if not suite:
        return Verdict(ok=True, line=f"proved: {', '.join(proven)}")
    by_suite = f"{' and '.join(suite)}: by the test suite for transformers {SUITE_TRANSFORMERS}"
    return Verdict(ok=True, line=f"proved here: {', '.join(proven)}; {by_suite}" if proven else f"proved {by_suite}")


def _suite_proves(model_type: str, kind: str) -> bool:
    import transformers

    return transformers.__version__ == SUITE_TRANSFORMERS and kind in SUITE_PROVEN.get(model_type, frozenset())


def _oracle(model: ModelConfig, model_type: str):
    """The real processor: ``AutoProcessor`` where it loads, else the one built from its parts (no stand-ins)."""
    from transformers import AutoProcessor

    from ..remote_code import load_pretrained, trusted
    from .processor_parts import build_processor

    kwargs = {k: v for k, v in model.processor_kwargs.items() if k not in ("pretrained_model_name_or_path", "trust_remote_code")}
    try:
        return load_pretrained(AutoProcessor.from_pretrained, model.processor_path,
                               trust_remote_code=trusted(model.processor_kwargs), **kwargs)  # fmt: skip
    except Exception:  # noqa: BLE001 - no torchvision for its video processor: its parts
        return build_processor(model.processor_path, model_type, model.processor_kwargs,
                               trust_remote_code=trusted(model.processor_kwargs)).processor  # fmt: skip


class _Checker:
    """Generated samples through the generic counter and the real processor."""

    def __init__(self, rules, family, oracle, model: ModelConfig) -> None:
        from .counter import TokenCounter

        self.family, self.oracle = family, oracle
        tokenizer = family.tokenizer
        if not tokenizer.chat_template:
            tokenizer.chat_template = getattr(family.processor, "chat_template", None)
        self.counter = TokenCounter(rules, tokenizer, VideoConfig(), train_on="all",
                                    template_kwargs=model.chat_template_kwargs)  # fmt: skip

    # -- samples ----------------------------------------------------------------------------------------
    @staticmethod
    def _conversation(kinds: tuple[str, ...]) -> Conversation:
        items = [{"type": kind, kind: f"{kind}{i}"} for i, kind in enumerate(kinds)]
        what = " and ".join(kinds)
        messages = ({"role": "user", "content": [{"type": "text", "text": f"Describe this {what}."}, *items]},
                    {"role": "assistant", "content": [{"type": "text", "text": "A plain grey test pattern."}]})  # fmt: skip
        return Conversation(messages=messages, media=tuple(MediaRef(kind=k, part=f"{k}{i}") for i, k in enumerate(kinds)))

    def _generic(self, conversation: Conversation, media) -> tuple[int, list[str]] | DropError:
        try:
            count = self.counter.count(conversation, media).token_len
            return count, [self.family.expansion(m).text for m in self.counter.expander.in_sample(media)]
        except DropError as exc:
            return exc

    def _real(self, rendered: str, **inputs) -> tuple[int, list[str]] | Exception:
        from transformers.utils import logging as hf_logging

        before = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # its warnings are about our generated items (a 1 x 1 image's channel
        try:  # axis is ambiguous), not the user's data: not for the scan's output
            out = self.oracle(text=[rendered], return_text_replacement_offsets=True, **inputs)
        except Exception as exc:  # noqa: BLE001 - the real processor's refusal (or failure), compared below
            return exc
        finally:
            hf_logging.set_verbosity(before)
        return len(out["input_ids"][0]), [r["replacement"] for r in out["text_replacement_offsets"][0]]

    @staticmethod
    def _mismatch(what: str, generic, real) -> str:
        if isinstance(generic, DropError) and isinstance(real, Exception):
            return ""  # both refuse it
        if isinstance(generic, DropError):
            return f"the generic path refuses {what} ({generic}) where the real processor takes it"
        if isinstance(real, Exception):
            return f"the real processor refuses {what} ({type(real).__name__}: {real}) where the generic path counts it"
        (count, texts), (real_count, real_texts) = generic, real
        if texts != real_texts:
            return f"{what}: the replacement differs from the real processor's ({len(texts[0])} vs {len(real_texts[0])} characters)"
        if count != real_count:
            return f"{what}: {count} tokens where the real processor gives {real_count}"
        return ""

    # -- images ----------------------------------------------------------------------------------------
    def _image_sample(self, sizes: tuple[tuple[int, int], ...]):
        from PIL import Image

        from .media_info import ImageMedia

        conversation = self._conversation(("image",) * len(sizes))
        rendered, _ = self.counter.render(conversation)
        media = [ImageMedia(width=w, height=h) for h, w in sizes]
        images = [Image.new("RGB", (w, h), (128, 128, 128)) for h, w in sizes]
        return self._generic(conversation, media), self._real(rendered, images=images)

    def images(self) -> tuple[int, str]:
        generic, real = self._image_sample(((224, 224),))
        if isinstance(real, Exception) and not isinstance(generic, DropError):
            raise _CannotRun(f"{type(real).__name__}: {str(real)[:200]}")
        checked = 0
        for sizes in [*(((h, w),) for h, w in PROOF_IMAGES), PROOF_PAIR]:
            generic, real = self._image_sample(sizes)
            what = " + ".join(f"{w}x{h}" for h, w in sizes) + " image" + ("s" if len(sizes) > 1 else "")
            if mismatch := self._mismatch(what, generic, real):
                return checked, mismatch
            checked += len(sizes)
        return checked, ""

    # -- videos ----------------------------------------------------------------------------------------
    def videos(self) -> tuple[int, str]:
        if getattr(self.oracle, "video_processor", None) is None:
            raise _CannotRun("no video processor loads here: every transformers video processor needs torchvision")
        generic, real = self._video_sample(*_CANONICAL_VIDEO)
        if isinstance(real, Exception) and not isinstance(generic, DropError):  # it builds, but cannot run here
            raise _CannotRun(f"{type(real).__name__}: {str(real)[:200]}")
        checked = 0
        for frames, fps, height, width in PROOF_VIDEOS:
            generic, real = self._video_sample(frames, fps, height, width)
            if mismatch := self._mismatch(f"a {frames}-frame {width}x{height} video at {fps:g} fps", generic, real):
                return checked, mismatch
            checked += 1
        if not getattr(self.family, "audio_in_video", False):
            return checked, ""
        rate = self.family.audio_rule.sampling_rate  # each video with its own track, and two with other clips
        tracks = [(i, 1.0, 0) for i in range(len(PROOF_VIDEOS))] + list(PROOF_TRACKS)
        for index, stretch, beside in tracks:
            frames, fps, height, width = PROOF_VIDEOS[index]
            track = round(frames / fps * stretch * rate)
            generic, real = self._video_sample(frames, fps, height, width, track=track, beside=beside)
            what = f"a {frames}-frame {width}x{height} video at {fps:g} fps with a {track}-sample audio track" + (
                f" beside a {beside}-sample audio" if beside else "")
            if mismatch := self._mismatch(what, generic, real):
                return checked, mismatch
            checked += 1
        return checked, ""

    def _video_sample(self, frames: int, fps: float, height: int, width: int, *, track: int = 0, beside: int = 0):
        """A video alone, or (``load_audio_from_video``) with a ``track``-sample audio track at the feature
        extractor's rate, after a ``beside``-sample standalone audio: the real call gets the decoded clips, one per
        slot, with ``audio_from_video_indices`` (as the loader passes them)."""
        import numpy as np
        from transformers.video_utils import VideoMetadata

        from ..media.video_meta import VideoInfo
        from .media_info import AudioMedia, VideoMedia

        kinds = ("audio", "video") if beside else ("video",)
        conversation = self._conversation(kinds)
        rendered, _ = self.counter.render(conversation)
        info = VideoInfo(n_frames=frames, native_fps=fps, height=height, width=width, backend="pyav")
        pixels = np.full((frames, height, width, 3), 128, dtype=np.uint8)
        metadata = VideoMetadata(total_num_frames=frames, fps=fps, duration=frames / fps, width=width, height=height)
        slots = {}
        if getattr(self.family, "audio_in_video", False):  # the folder's own spelling may not reach the call
            rate = self.family.audio_rule.sampling_rate
            clips = [_tone(n) for n in (beside, track) if n]
            slots = {"load_audio_from_video": True, "audio": clips or None,
                     "audio_from_video_indices": ([None] if beside else []) + ([0] if track else [])}  # fmt: skip
        try:
            sampling = self.family.sample_video(self.counter.rules, info, VideoConfig(), part="video")
        except DropError as exc:  # its rule refuses the video: so must the real processor's own call
            return exc, self._real(rendered, videos=[pixels], video_metadata=[copy.deepcopy(metadata)], **slots)
        media = [AudioMedia(samples=beside, sample_rate=rate, channels=1)] if beside else []
        audio = AudioMedia(samples=track, sample_rate=rate, channels=1) if track else None
        generic = self._generic(conversation, [*media, VideoMedia(sampling=sampling, audio=audio)])
        whole = self._real(rendered, videos=[pixels], video_metadata=[copy.deepcopy(metadata)], **slots)
        if not isinstance(whole, Exception):
            return generic, whole
        # the call on a whole video failed (Molmo2 indexes a numpy video by a one-element tensor): as the loader
        # calls it, on the frames the rule picked, with do_sample_frames=False and their indices in the metadata
        picked = list(sampling.frame_indices)
        metadata.frames_indices = picked
        return generic, self._real(rendered, videos=[pixels[picked]], video_metadata=[metadata], do_sample_frames=False,
                                   **slots)  # fmt: skip

    # -- audio ----------------------------------------------------------------------------------------
    def audios(self) -> tuple[int, str]:
        rate = self.family.audio_rule.sampling_rate
        generic, real = self._audio_sample((rate,))
        if isinstance(real, Exception) and not isinstance(generic, DropError):
            raise _CannotRun(f"{type(real).__name__}: {str(real)[:200]}")
        checked = 0
        for lengths in [*((n,) for n in PROOF_AUDIOS), *PROOF_AUDIO_CALLS]:
            generic, real = self._audio_sample(lengths)
            what = " + ".join(f"{n}-sample" for n in lengths) + f" audio at {rate} Hz"
            if mismatch := self._mismatch(what, generic, real):
                return checked, mismatch
            checked += len(lengths)
        return checked, ""

    def _audio_sample(self, lengths: tuple[int, ...]):

        from .media_info import AudioMedia

        rate = self.family.audio_rule.sampling_rate
        conversation = self._conversation(("audio",) * len(lengths))
        rendered, _ = self.counter.render(conversation)
        media = [AudioMedia(samples=n, sample_rate=rate, channels=1) for n in lengths]
        clips = [_tone(n) for n in lengths]
        real = self._real(rendered, audio=clips)
        if not isinstance(real, Exception) and not all(_holds_audio(self.family, text) for text in real[1]):
            real = ValueError("the real processor gives a clip no audio token")  # the generic path refuses such a clip
        return self._generic(conversation, media), real


def _tone(samples: int):
    """A quiet float32 tone of ``samples`` samples: a clip the real processor takes (its length is what counts)."""
    import numpy as np

    return (0.1 * np.sin(np.arange(samples, dtype=np.float32) * 0.05)).astype(np.float32)


def _holds_audio(family, text: str) -> bool:
    return any(i in family.media_ids for i in family.tokenizer(text, add_special_tokens=False)["input_ids"])


# -- the cache ------------------------------------------------------------------------------------------
def _key(model: ModelConfig, model_type: str) -> str:
    extra = [model_type, model.processor_kwargs, model.chat_template_kwargs]
    return key_of(folder=model.processor_path, sources=_SOURCES, packages=("transformers",), extra=extra)


def _read_cache(key: str) -> Verdict | None:
    data = read_json("proofs", key)
    try:
        return Verdict(ok=bool(data["ok"]), line=str(data["line"]))
    except (KeyError, TypeError):
        return None


def _write_cache(key: str, verdict: Verdict) -> None:
    """Best effort: a read-only home only costs the next run its proof."""
    write_json("proofs", key, {"ok": verdict.ok, "line": verdict.line})
