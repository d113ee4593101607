"""Model-family rules for counting visual tokens, read from the processor directory.

Two folder layouts are read, with the same keys::

    hub (from_pretrained downloads)          transformers 5 save_pretrained
    preprocessor_config.json                 processor_config.json["image_processor"]
    video_preprocessor_config.json           processor_config.json["video_processor"]

    image settings   patch_size, merge_size, temporal_patch_size, min_pixels / max_pixels
                     (Qwen2/2.5-VL) or size.shortest_edge / size.longest_edge (Qwen3-VL)
    video settings   fps, min_frames, max_frames, size / min_pixels / max_pixels,
                     patch_size, merge_size, temporal_patch_size
    config.json                model_type (unless model.model_type is set; when set, it must agree)
    *_config.json              processor_class (must agree with an explicit model.model_type)
    model.processor_kwargs     min_pixels / max_pixels / size override the directory's image settings,
                               as they would in ``from_pretrained``

Video sampling (``ModelRules.video``, then ``resolve_video``), per field, first found wins::

    1. the config's ``video:`` section (a value that is not null)
    2. the processor folder's video settings: fps, min_frames, max_frames, and min/max pixels
       from size.shortest_edge / size.longest_edge (or min_pixels / max_pixels). A Qwen3-VL
       folder's also selects ``sampler: hf_processor`` (HF's Qwen3VLVideoProcessor sampling, where
       these pixel bounds cover frames * height * width), so counts equal the HF processor's;
       set ``video.sampler: qwen_vl_utils`` to follow Qwen's recipe with such a folder.
    3. the family's own recipe, qwen-vl-utils ``fetch_video`` with factor = patch * merge:
       fps 2, frames 4..768, per-frame pixels 128 * factor**2 .. 768 * factor**2,
       total 128000 * factor**2 * 0.9   (factor 28: Qwen2/2.5-VL, 100352 / 602112 / 90316800;
       factor 32: Qwen3-VL / Qwen3.5, 131072 / 786432 / 117964800)

For the families with a module in ``vlmpack_offline/families/`` (``FAST_FAMILIES``) tokens
are computed from sizes, and the family reads its own extra settings (``Family.settings``). Any
other family's folder is proven for the generic fast path the first time it is loaded
(``tokens/proof.py``: its own processor's expansion rules against the real processor on generated
media; the verdict is cached): ``ModelRules.generic`` is set when it passed, else
``ModelRules.slow_reason`` says why the folder is counted by running its HF processor (the slow path).

``model.model_type: qwenvl`` (the published tool's name) takes the folder's family and
is refused on a folder that is not Qwen-VL. ``model.model_type`` is checked before anything is loaded: a name neither family list
nor transformers knows is refused with the supported names (and the closest ones), and
a name that contradicts the folder (``qwen3_vl`` on a Qwen2.5-VL folder) is refused
naming both, since it would silently count with the wrong rules. A custom model type
is accepted when the folder's own ``config.json`` declares it (remote-code models).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import logging
from dataclasses import dataclass
from pathlib import Path

from .. import disk_cache
from .._published import QWEN_FROM_FOLDER
from ..config import ModelConfig, VideoConfig
from ..errors import ConfigError
from ..families import FAST_FAMILIES, QWEN3_FAMILIES, QWEN_FAMILIES, family_for, family_of
from ..families.generic import GenericRules, kwargs_json
from ..families.processor_frames import FrameRule, check_processor_video_fields, check_video_fields
from ..media.video import recipe_video
from ..media.video_meta import check_reader_installed
from ..model_type import read_json as _read_json
from ..model_type import resolved_model_type

__all__ = [
    "FAST_FAMILIES", "QWEN3_FAMILIES", "ModelRules", "load_model_rules", "known_model_types", "recipe_video",
    "video_fields_read",
    "resolve_video", "processor_settings",
]  # fmt: skip

log = logging.getLogger(__name__)

# Files of a processor folder that may name its processor class ("processor_class").
_PROCESSOR_CLASS_FILES = ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRules:
    model_type: str  # HF model_type, e.g. "qwen2_5_vl"
    processor_path: str  # the local processor/tokenizer directory
    text_only: bool  # model.processor_loader == "auto_tokenizer": media samples cannot be counted
    patch_size: int = 14  # vision patch edge in pixels
    merge_size: int = 2  # spatial merge: merge_size**2 patches become one LLM token
    temporal_patch_size: int = 2  # frames per temporal patch (an image counts as one)
    min_pixels: int = 56 * 56  # smart_resize lower bound for images
    max_pixels: int = 28 * 28 * 1280  # smart_resize upper bound for images
    tokens_per_image: int = 0  # fixed-token families (Gemma3: the processor's image_seq_length; InternVL: per tile)
    tile_size: tuple[int, int] = (0, 0)  # InternVL: (height, width) of one tile, the image processor's size
    min_tiles: int = 1  # InternVL: the image processor's min_patches
    max_tiles: int = 0  # InternVL: its max_patches (<= 1: one resized tile, no thumbnail)
    max_size: tuple[int, int] = (0, 0)  # Pixtral / Mistral3: (height, width) bound of the resize (size.longest_edge)
    grid_pinpoints: tuple[tuple[int, int], ...] = ()  # LLaVA-OneVision: image_grid_pinpoints (height, width)
    vision_aspect_ratio: str = ""  # LLaVA-OneVision: anyres_max_N (a lone image's grid shrinks past N tiles)
    feature_select_strategy: str = ""  # LLaVA-OneVision: vision_feature_select_strategy ("default": one token less)
    max_duration: int = 0  # GLM-4V: seconds its video processor samples at fps (longer: spread over the video)
    max_patches: int = 0  # Kimi-K2.5: the image processor's max_patches (patch budget of one image)
    max_side_patches: int = 0  # Kimi-K2.5: its size.max_height (patches along one side)
    video_max_patches: int = 0  # Kimi-K2.5: the video processor's max_patches (patch budget of one frame)
    video_max_side_patches: int = 0  # Kimi-K2.5: the video processor's size.max_height
    frame_rule: FrameRule | None = None  # InternVL, LLaVA-OneVision: their video processor's own sampling, if on
    video: VideoConfig | None = None  # video defaults: processor folder over family recipe (None = recipe)
    generic: GenericRules | None = None  # no family module, folder proven: the generic fast path counts it
    slow_reason: str = ""  # no family module, folder not proven: why (the slow path counts it)

    @property
    def fast(self) -> bool:
        """True when tokens are computed from sizes (a family module or the generic path), False for the slow path."""
        return family_for(self.model_type) is not None or self.generic is not None

    @property
    def qwen3(self) -> bool:
        """Qwen3-VL prompts carry per-temporal-patch timestamps around video tokens."""
        return self.model_type in QWEN3_FAMILIES

    @property
    def factor(self) -> int:
        """smart_resize factor: sizes are multiples of patch_size * merge_size."""
        return self.patch_size * self.merge_size


@functools.cache
def _hf_names() -> tuple[frozenset[str], frozenset[str], dict[str, str]]:
    """(every transformers model_type, its vision-language ones, model_type -> processor class).

    Read from transformers' auto tables once per install and kept (``disk_cache.installed_fact``): importing them
    pulls torch, seconds of every scan's start for three name lists."""
    every, vision, processors = disk_cache.installed_fact("auto tables", _read_hf_names)
    return frozenset(every), frozenset(vision), dict(processors)


def _read_hf_names() -> list:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    return [sorted(CONFIG_MAPPING_NAMES), sorted(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES), dict(PROCESSOR_MAPPING_NAMES)]


def known_model_types() -> frozenset[str]:
    """Every ``model.model_type`` accepted without a folder that declares it: fast families + transformers'."""
    return FAST_FAMILIES | _hf_names()[0]


def _missing_folder(path: Path) -> ConfigError:
    where = f"model.processor_kwargs.pretrained_model_name_or_path = {str(path)!r}"
    if path.exists():
        return ConfigError(f"{where} is a file, not a directory: point it at the processor/tokenizer folder")
    text = str(path)
    if text.count("/") == 1 and not text.startswith(
        (".", "/", "~")
    ):  # looks like a hub id, e.g. Qwen/Qwen2.5-VL-7B
        return ConfigError(
            f"{where} does not exist: vlmpack reads processors offline from a local folder; download it first "
            f"(huggingface-cli download {text} --local-dir DIR) and point the key at DIR"
        )
    return ConfigError(f"{where} does not exist: point it at a local processor/tokenizer folder")


def _unknown_model_type(model_type: str, path: Path, folder_type: str | None) -> ConfigError:
    every, vision, _ = _hf_names()
    close = difflib.get_close_matches(model_type, sorted(every | FAST_FAMILIES), n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    if folder_type:
        hint += f"; the processor folder's config.json says {folder_type!r}"
    return ConfigError(
        f"model.model_type = {model_type!r} is not a model type vlmpack or transformers knows{hint}. "
        f"Counted from sizes (fast): {', '.join(sorted(FAST_FAMILIES))}. "
        f"Counted by running the HF processor (slow): any of the {len(every)} transformers model types, "
        f"vision-language ones: {', '.join(sorted(vision - FAST_FAMILIES))}. "
        f"The published tool's names are read too: qwenvl (the folder's Qwen-VL family), kimi-k2.5 (kimi_k25). "
        f"Or leave model.model_type unset to read it from {path}/config.json"
    )


def _processor_class(path: Path) -> tuple[str, str] | None:
    """(processor class, file naming it) from the folder, or None."""
    for name in _PROCESSOR_CLASS_FILES:
        value = _read_json(path / name).get("processor_class")
        if isinstance(value, str) and value:
            return value, name
    return None


def _check_model_type(model_type: str, path: Path, folder_type: str | None) -> None:
    """Refuse an explicit ``model.model_type`` that is unknown or that the folder contradicts."""
    if folder_type != model_type and model_type not in known_model_types():
        raise _unknown_model_type(model_type, path, folder_type)
    if folder_type and folder_type != model_type:
        raise ConfigError(
            f"model.model_type = {model_type!r} contradicts the processor folder: {path}/config.json has "
            f"model_type {folder_type!r}. Remove model.model_type to use the folder's, or point "
            f"pretrained_model_name_or_path at a {model_type} processor folder"
        )
    found = _processor_class(path)
    expected = _hf_names()[2].get(model_type)
    if found and expected and found[0] != expected:
        raise ConfigError(
            f"model.model_type = {model_type!r} contradicts the processor folder: {path}/{found[1]} has "
            f"processor_class {found[0]!r}, a {model_type} folder has {expected!r}. Remove model.model_type "
            f"to use the folder's, or point pretrained_model_name_or_path at a {model_type} processor folder"
        )


def resolve_video(video: VideoConfig | None, *defaults: VideoConfig | None, factor: int) -> VideoConfig:
    """Every field set: ``video``'s own values, else the first of ``defaults`` that has one, else the recipe.

    A default made for another sampler than the one ``video`` names is skipped whole: a Qwen3-VL
    folder's pixel bounds cover all frames, the recipe's one frame, so they do not mix.
    """
    wanted = video.sampler if video is not None else None
    layers = [video] if video is not None else []
    layers += [d for d in defaults if d is not None and (wanted is None or d.sampler in (None, wanted))]
    layers.append(recipe_video(factor))
    values = {}
    for f in dataclasses.fields(VideoConfig):
        values[f.name] = next(getattr(v, f.name) for v in layers if getattr(v, f.name) is not None)
    return VideoConfig(**values)


def processor_settings(path: Path) -> tuple[dict, dict, dict[str, str]]:
    """(image processor settings, video processor settings, where each came from) for both layouts.

    Hub layout: ``preprocessor_config.json`` + ``video_preprocessor_config.json``; transformers 5
    ``save_pretrained``: ``processor_config.json`` with ``image_processor`` / ``video_processor`` dicts.
    The hub files win where both exist (``from_pretrained`` reads them first). Where: ``{"image":
    "preprocessor_config.json: ", "video": "processor_config.json: video_processor."}``, the prefix messages
    put before a key (a part with no settings has none).
    """
    nested = _read_json(path / "processor_config.json")
    found, where = {}, {}
    for part, hub, section in (("image", "preprocessor_config.json", "image_processor"),
                               ("video", "video_preprocessor_config.json", "video_processor")):  # fmt: skip
        found[part] = _read_json(path / hub)
        if found[part]:
            where[part] = f"{hub}: "
        elif isinstance(nested.get(section), dict):
            found[part], where[part] = nested[section], f"processor_config.json: {section}."
    return found["image"], found["video"], where


def _int_settings(merged: dict) -> dict:
    """patch/merge/temporal sizes and min/max pixels (min_pixels/max_pixels win over size, as in HF)."""
    settings: dict = {}
    for name in ("patch_size", "merge_size", "temporal_patch_size"):
        if merged.get(name) is not None and not isinstance(merged[name], dict):  # Pixtral: {"height", "width"}
            settings[name] = int(merged[name])
    size = dict(merged.get("size") or {})
    for name, edge in (("min_pixels", "shortest_edge"), ("max_pixels", "longest_edge")):
        value = merged.get(name) if merged.get(name) is not None else size.get(edge)
        if value is not None:
            settings[name] = int(value)
    return settings


def _folder_video(video: dict, *, qwen3: bool, frame_rule: bool = False) -> VideoConfig | None:
    """The video processor's sampling settings as a (partial) ``VideoConfig``; None when there are none.

    Qwen3-VL's video processor samples frames itself (``do_sample_frames``) and bounds frames * pixels by
    its size edges: that is ``sampler: hf_processor``. Qwen2/2.5-VL's bound each frame, as qwen-vl-utils does.
    ``frame_rule``: the family's settings hold its video processor's own sampling (``ModelRules.frame_rule``:
    InternVL, LLaVA-OneVision with ``do_sample_frames: true``), which is ``sampler: hf_processor`` too.
    """
    if not video and not frame_rule:
        return None
    pixels = _int_settings(video)
    hf = frame_rule or (qwen3 and video.get("do_sample_frames", True) is not False)
    return VideoConfig(
        fps=float(video["fps"]) if video.get("fps") is not None else None,
        min_frames=int(video["min_frames"]) if video.get("min_frames") is not None else None,
        max_frames=int(video["max_frames"]) if video.get("max_frames") is not None else None,
        min_pixels=pixels.get("min_pixels"),
        max_pixels=pixels.get("max_pixels"),
        sampler="hf_processor" if hf else None,
        cap_pixels_per_frame=bool(video["cap_pixels_per_frame"]) if video.get("cap_pixels_per_frame") is not None else None,
        max_video_tokens=int(video["max_video_tokens"]) if video.get("max_video_tokens") is not None else None,
    )


def video_fields_read(family, sampler: str | None) -> frozenset[str]:
    """The ``video:`` fields a family's count reads with this sampler: none when it takes no video, the
    ``video_fields`` it states, else every field but ``total_pixels`` under ``hf_processor`` (Qwen3-VL's
    video processor bounds frames * height * width by min / max_pixels and has no total budget)."""
    if not family.takes_video:
        return frozenset()
    stated = getattr(family, "video_fields", None)
    if stated is not None:
        return stated | {"reader"}  # every family's frames come from some reader's frame count and rate
    every = frozenset(f.name for f in dataclasses.fields(VideoConfig))
    if sampler == "hf_processor":
        return every - {"total_pixels"}
    return every - {"cap_pixels_per_frame", "max_video_tokens"}  # the Qwen3-VL video processor's own


def _check_video_fields(video: VideoConfig, family, sampler: str | None) -> None:
    """Refuse ``video:`` fields the family never reads: they would silently not apply."""
    reads = video_fields_read(family, sampler)
    ignored = [f.name for f in dataclasses.fields(VideoConfig) if getattr(video, f.name) is not None and f.name not in reads]
    if not ignored:
        return
    names, them = ", ".join(f"video.{name}" for name in ignored), "them" if len(ignored) > 1 else "it"
    if not family.takes_video:
        raise ConfigError(f"{names}: {family.name} takes no video (a video sample is dropped as unsupported_media); "
                          f"remove {them}")  # fmt: skip
    read = ", ".join(f"video.{name}" for name in sorted(reads - {"sampler"}))
    raise ConfigError(f"{names}: {family.name} never reads {them} (sampler {sampler}), its videos depend on {read} "
                      f"alone; remove {them}")  # fmt: skip


def load_model_rules(model: ModelConfig, video: VideoConfig | None = None, *, reads_video: bool = True) -> ModelRules:
    """Read the rules for ``model`` (see module doc); raises ``ConfigError`` naming what is missing.

    ``video``: the config's ``video:`` section; its set fields win over the folder's and the recipe's
    in ``rules.video`` (``probe_media`` resolves the same way when given the section later).
    ``reads_video``: False where no video will be read (a loader over a packed set without videos), so the
    video reader's library need not be installed.
    """
    path = Path(model.processor_path)
    if not path.is_dir():
        raise _missing_folder(path)
    text_only = model.processor_loader == "auto_tokenizer"
    folder_type = _read_json(path / "config.json").get("model_type")
    if model.model_type == QWEN_FROM_FOLDER:  # the published tool's one name for every Qwen-VL generation
        if folder_type not in QWEN_FAMILIES:
            raise ConfigError(
                f"model.model_type = 'qwenvl' (the published tool's name for the Qwen-VL family) needs a Qwen-VL "
                f"processor folder, but {path}/config.json has model_type {folder_type!r}; set model.model_type to "
                f"that folder's family or remove it to read it from the folder"
            )
        model = dataclasses.replace(model, model_type=folder_type)
    if model.model_type:
        _check_model_type(model.model_type, path, folder_type)
    model_type = resolved_model_type(model)
    family = family_for(str(model_type))
    pre, video_pre, _where = processor_settings(path)
    # from_pretrained merges kwargs over the file; min/max_pixels then win over size (Qwen2VLImageProcessor)
    merged = {**pre, **model.processor_kwargs}
    settings = _int_settings(merged)
    if family is not None and not text_only:  # the family's own settings, and what it refuses to count
        settings.update(family.settings(path, pre, model.processor_kwargs, _read_json(path / "processor_config.json")))
        from ..families.settings_sweep import check_settings  # every other setting: followed or refused

        check_settings(str(model_type), path, model.processor_kwargs, _read_json)
        if video is not None and "frame_rule" in settings:  # video: fields the processor's own sampling never reads
            check_video_fields(settings["frame_rule"], video, family=family.name, path=path)
    if family is None and not text_only:  # no module: the generic path, where the folder proves it (cached)
        from .proof import prove_folder

        verdict = prove_folder(model, str(model_type))
        if verdict.ok:
            settings["generic"] = GenericRules(processor_kwargs=kwargs_json(model.processor_kwargs), proof=verdict.line)
        else:
            settings["slow_reason"] = verdict.line
    rules = ModelRules(model_type=str(model_type), processor_path=str(path), text_only=text_only, **settings)
    if rules.generic is not None:
        family = family_of(rules)
    # a family with its own video recipe (GLM-4V: its processor samples frames itself; LLaVA-OneVision: 32
    # frames) gives its defaults under the folder's settings and the config's video: section
    own = family.video_defaults() if family is not None and hasattr(family, "video_defaults") else None
    samples_itself = own is not None and own.sampler == "hf_processor"
    if samples_itself:  # from_pretrained hands processor_kwargs' size / fps to that video processor too
        video_pre = {**video_pre, **{k: model.processor_kwargs[k] for k in ("size", "fps") if k in model.processor_kwargs}}
    folder = _folder_video(video_pre, qwen3=rules.qwen3 or samples_itself, frame_rule=rules.frame_rule is not None) \
        if rules.generic is None else None  # the generic path: the processor samples with its own settings
    resolved = resolve_video(video, folder, own, factor=rules.factor)
    if own is not None and own.sampler is not None and resolved.sampler != own.sampler:  # before any sample
        raise ConfigError(
            f"video.sampler = {resolved.sampler!r}: {family.name} videos are sampled as its own video processor "
            f"samples them ({own.sampler}); remove video.sampler"
        )
    if video is not None and family is not None and not text_only:
        if rules.generic is not None:  # the processor's own sampling, with the folder's settings
            check_processor_video_fields(video, model_type=str(model_type), rule=family.frame_rule)
        else:
            _check_video_fields(video, family, resolved.sampler)
    if video is not None and family is None and not text_only:  # the slow path: its processor's own frame rule
        check_processor_video_fields(video, model_type=str(model_type))
    if family is not None and family.takes_video and not text_only:
        if rules.generic is None:  # (the generic path reads the reader alone)
            _check_resolved_bounds(resolved, video)
        if reads_video:
            check_reader_installed(resolved.reader)
        if resolved.sampler == "hf_processor" and str(model_type) in QWEN_FAMILIES and not rules.qwen3:
            raise ConfigError(
                f"video.sampler = 'hf_processor' is Qwen3-VL's video processor's own sampling; {model_type} videos "
                "are sampled as qwen-vl-utils samples them: remove video.sampler"
            )
        if resolved.sampler == "qwen_vl_utils" and resolved.max_frames is not None and resolved.max_frames < 2:
            raise ConfigError(
                f"video.max_frames {resolved.max_frames}: qwen-vl-utils samples an even number of frames, at least 2 "
                "(it refuses every video below that); set video.max_frames >= 2"
            )
    return dataclasses.replace(rules, video=resolved)


def _check_resolved_bounds(resolved: VideoConfig, video: VideoConfig | None) -> None:
    """min_pixels <= max_pixels once the config, the folder and the recipe are merged: setting one bound alone
    can cross the other's default (video.max_pixels 50176 under the recipe's min_pixels 100352), which
    qwen-vl-utils and the processors resolve each their own way. (Frames need no such check: min_frames above
    max_frames is LLaVA-OneVision's fixed frame count, and config.py refuses it where both are set.)"""
    lo, hi = resolved.min_pixels, resolved.max_pixels
    if lo is not None and hi is not None and lo > hi:
        def said(name: str) -> str:
            return "set in video:" if video is not None and getattr(video, name) is not None else \
                "from the processor folder or the family's recipe"
        raise ConfigError(
            f"video.min_pixels {lo} ({said('min_pixels')}) is above video.max_pixels {hi} ({said('max_pixels')}): "
            "set both so that min_pixels <= max_pixels"
        )
