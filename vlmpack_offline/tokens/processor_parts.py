"""A folder's HF processor built from its parts, without ``AutoProcessor`` (so without torchvision).

``AutoProcessor.from_pretrained`` fails for every processor that has a video processor when torchvision is
missing: every ``BaseVideoProcessor`` subclass is gated on it (transformers 5.24
``video_processing_utils.py``: ``@requires(backends=("vision", "torchvision"))``) and
``models/auto/video_processing_auto.py`` maps every video class to None without it. Counting needs no pixels,
so the parts are built one by one, each as ``ProcessorMixin.from_pretrained`` builds it
(``processing_utils.py``: ``get_processor_dict``, ``_get_arguments_from_pretrained``, ``from_args_and_dict``),
with ``model.processor_kwargs`` handed to each part's ``from_pretrained`` and to the processor's ``__init__``::

    tokenizer         AutoTokenizer.from_pretrained(folder, **kwargs)   (kwargs land in its init_kwargs, which
                      the processor's _merge_kwargs hands to every modality's call, as from_pretrained does)
    image_processor   AutoImageProcessor.from_pretrained(folder, backend="pil", **kwargs): the *Pil class where
                      one exists, else the class the folder names (image_processor_type), imported from its own
                      module (Molmo2ImageProcessor imports and instantiates without torchvision)
    video_processor   the class the folder names (video_processor_type), imported from its own module
                      (Qwen3VLVideoProcessor, Molmo2VideoProcessor, MiniCPMV4_6VideoProcessor ... import; the
                      modules of Gemma4, GLM-5-Next, ERNIE-4.5-VL and Qwen2-VL import torchvision: not built)
    feature_extractor AutoFeatureExtractor.from_pretrained(folder, **kwargs) (audio; numpy only)
    processor         the processor class, instantiated from these with processor_config.json's kwargs and
                      model.processor_kwargs (from_args_and_dict), its sub-processor class check left out (it
                      looks the video class up through the torchvision-gated auto mapping)

A part that cannot be built is None in the processor and named in ``ProcessorParts.missing`` with the reason
(the import error's own words): callers decide what that part's absence means (``families/generic.py``).
"""

from __future__ import annotations

import functools
import importlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..model_type import read_json
from ..remote_code import load_pretrained

__all__ = ["Part", "ProcessorParts", "audio_extractor", "build_processor", "find_class", "processor_class",
           "video_processor_name", "video_settings"]

log = logging.getLogger(__name__)

_HUB_KEYS = ("pretrained_model_name_or_path", "trust_remote_code")  # vlmpack's, not the parts' settings
_SUFFIXES = ("ImageProcessorPil", "ImageProcessor", "VideoProcessor", "FeatureExtractor", "Processor")


@dataclass(frozen=True, slots=True, kw_only=True)
class Part:
    attribute: str  # the processor's attribute: "tokenizer", "image_processor", "video_processor", ...
    class_name: str  # the class built, or the one the folder names where it could not be built
    why: str = ""  # why it was not built ("" when it was)

    @property
    def built(self) -> bool:
        return not self.why


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessorParts:
    processor: Any  # the folder's processor class, instantiated; a part that could not be built is None in it
    parts: tuple[Part, ...]  # one per attribute of the processor class, in its __init__ order

    @property
    def missing(self) -> dict[str, str]:
        """attribute -> why it could not be built."""
        return {part.attribute: part.why for part in self.parts if not part.built}

    def part(self, attribute: str) -> Part | None:
        return next((p for p in self.parts if p.attribute == attribute), None)


def processor_class(path: Path, model_type: str) -> type:
    """The processor class the folder names (``processor_class`` in its JSON files), else transformers' for
    ``model_type`` (``PROCESSOR_MAPPING_NAMES``); ``ConfigError`` when transformers has no such class."""
    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    named = next((read_json(path / name).get("processor_class") for name in
                  ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json")
                  if read_json(path / name).get("processor_class")), None)  # fmt: skip
    name = named or PROCESSOR_MAPPING_NAMES.get(model_type)
    if not name:
        raise ConfigError(f"{path}: no processor_class in the folder and transformers has no processor for "
                          f"model_type {model_type!r}; point the config at a processor folder")  # fmt: skip
    try:
        return find_class(name, model_type) if not hasattr(transformers, name) else getattr(transformers, name)
    except ImportError as exc:
        raise ConfigError(f"{path}: processor class {name} cannot be imported here ({exc}); it is not a class "
                          f"transformers {transformers.__version__} ships") from None  # fmt: skip


def find_class(name: str, model_type: str) -> type:
    """Class ``name`` imported from its own module in ``transformers.models`` (not through the top-level lazy
    name, which is a torchvision placeholder for every video processor without torchvision). The package is
    the one the class name spells (``Qwen3VLVideoProcessor`` -> ``qwen3_vl``), else ``model_type``'s; each
    package's lazy module lists its classes' modules (``_class_to_module``). Raises ``ImportError`` with the
    module's own error (``No module named 'torchvision'``)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES, model_type_to_module_name

    stem = next((name[: -len(s)] for s in _SUFFIXES if name.endswith(s)), name)
    packages = {model_type_to_module_name(t).replace("_", ""): model_type_to_module_name(t) for t in CONFIG_MAPPING_NAMES}
    for package in dict.fromkeys(filter(None, (packages.get(stem.lower().replace("_", "")),
                                               model_type_to_module_name(model_type)))):  # fmt: skip
        try:
            lazy = importlib.import_module(f"transformers.models.{package}")
        except ImportError:
            continue
        module = getattr(lazy, "_class_to_module", {}).get(name)
        if module:
            try:
                return getattr(importlib.import_module(f"transformers.models.{package}.{module}"), name)
            except Exception as exc:  # ModuleNotFoundError (torchvision), NameError (gemma4's tvF annotation)
                raise ImportError(f"{type(exc).__name__}: {exc}") from None
    raise ImportError(f"transformers has no class {name}")


def video_settings(path: str | Path) -> dict:
    """The video processor's saved settings as ``from_pretrained`` finds them: ``processor_config.json``'s
    ``video_processor``, else ``video_preprocessor_config.json``, else ``preprocessor_config.json`` (the hub's
    Qwen-Omni folders keep one file for every part); {} when there are none."""
    from transformers.video_processing_utils import BaseVideoProcessor

    try:
        return BaseVideoProcessor.get_video_processor_dict(str(path), local_files_only=True)[0]
    except OSError:
        return {}


def video_processor_name(path: str | Path, model_type: str) -> str:
    """The video processor class: the folder's ``video_processor_type``, else transformers' auto table for
    ``model_type`` (read from its source: without torchvision the loaded table holds None for every class,
    models/auto/video_processing_auto.py), else ""."""
    named = video_settings(path).get("video_processor_type")
    return named if isinstance(named, str) and named else _auto_video_names().get(model_type, "")


@functools.cache
def _auto_video_names() -> dict[str, str]:
    import ast
    import importlib.util

    names: dict[str, str] = {}
    for module in ("auto_mappings", "video_processing_auto"):  # read, not imported (the package's lazy
        spec = importlib.util.find_spec(f"transformers.models.auto.{module}")  # attribute is a placeholder)
        if spec is None or not spec.origin:
            continue
        for node in ast.walk(ast.parse(Path(spec.origin).read_text(encoding="utf-8"))):
            targets = [getattr(t, "id", "") for t in getattr(node, "targets", ())]
            if isinstance(node, ast.Assign) and {"VIDEO_PROCESSOR_MAPPING_NAMES", "MISSING_VIDEO_PROCESSOR_MAPPING_NAMES"} & set(targets):
                if isinstance(node.value, ast.Call) and node.value.args:
                    for model_type, classes in ast.literal_eval(node.value.args[0]):
                        name = (classes or {}).get("torchvision")
                        if name:
                            names[model_type] = name
    return names


def _settings(path: Path, section: str, hub: str) -> dict:
    """A part's saved settings, either layout (the hub file wins, as from_pretrained reads it first)."""
    return read_json(path / hub) or (read_json(path / "processor_config.json").get(section) or {})


def _build_part(attribute: str, path: Path, model_type: str, kwargs: dict, trust: bool) -> tuple[Any, Part]:
    from transformers import AutoFeatureExtractor, AutoImageProcessor, AutoTokenizer

    folder = str(path)
    if "tokenizer" in attribute:
        tokenizer = load_pretrained(AutoTokenizer.from_pretrained, folder, trust_remote_code=trust, **kwargs)
        return tokenizer, Part(attribute=attribute, class_name=type(tokenizer).__name__)
    if attribute == "image_processor":
        try:
            built = load_pretrained(AutoImageProcessor.from_pretrained, folder, trust_remote_code=trust,
                                    backend="pil", **kwargs)  # fmt: skip
            return built, Part(attribute=attribute, class_name=type(built).__name__)
        except ConfigError:
            raise
        except Exception as exc:  # no PIL class and no torchvision: the folder's class from its own module
            auto_error = exc
        return _named_part(attribute, path, model_type, kwargs, "image_processor_type", "preprocessor_config.json",
                           fallback_error=auto_error)  # fmt: skip
    if attribute == "video_processor":
        name = video_processor_name(path, model_type)
        if not name:
            return None, Part(attribute=attribute, class_name="?", why="neither the folder nor transformers names "
                              f"a video processor class for {model_type}")  # fmt: skip
        try:
            return find_class(name, model_type).from_pretrained(folder, **kwargs), Part(attribute=attribute, class_name=name)
        except Exception as exc:
            return None, Part(attribute=attribute, class_name=name, why=str(exc) or type(exc).__name__)
    if attribute == "feature_extractor":
        try:
            built = load_pretrained(AutoFeatureExtractor.from_pretrained, folder, trust_remote_code=trust, **kwargs)
        except ConfigError:
            raise
        except Exception as exc:
            return None, Part(attribute=attribute, class_name="?", why=f"{type(exc).__name__}: {exc}")
        return built, Part(attribute=attribute, class_name=type(built).__name__)
    return None, Part(attribute=attribute, class_name="?", why=f"vlmpack does not build a processor's {attribute}")


def _named_part(attribute: str, path: Path, model_type: str, kwargs: dict, type_key: str, hub: str,
                fallback_error: Exception | None = None) -> tuple[Any, Part]:  # fmt: skip
    settings = _settings(path, attribute, hub)
    name = settings.get(type_key)
    if not isinstance(name, str) or not name:
        why = f"the folder names no {type_key}" + (f" ({fallback_error})" if fallback_error else "")
        return None, Part(attribute=attribute, class_name="?", why=why)
    try:
        cls = find_class(name, model_type)
        return cls.from_pretrained(str(path), **kwargs), Part(attribute=attribute, class_name=name)
    except Exception as exc:
        return None, Part(attribute=attribute, class_name=name, why=str(exc) or type(exc).__name__)


def audio_extractor(processor):
    """The processor's feature extractor where it hears (one, and an ``audio_token`` to expand: ``ProcessorMixin``
    splices audio only then, tf/processing_utils.py ``_process_audio``), else None."""
    extractor = getattr(processor, "audio_processor", None) or getattr(processor, "feature_extractor", None)
    return extractor if extractor is not None and getattr(processor, "audio_token", None) else None


def build_processor(path: str | Path, model_type: str, processor_kwargs: dict, *, trust_remote_code: bool = False,
                    skip: frozenset[str] = frozenset()) -> ProcessorParts:  # fmt: skip
    """The folder's processor from its parts (module doc); ``skip``: attributes not to build (left None, named
    in ``missing`` as skipped). Raises ``ConfigError`` when the processor class itself cannot be made."""
    path = Path(path)
    cls = processor_class(path, model_type)
    kwargs = {k: v for k, v in processor_kwargs.items() if k not in _HUB_KEYS}
    built: dict[str, Any] = {}
    parts: list[Part] = []
    for attribute in cls.get_attributes():
        if attribute in skip:
            built[attribute], part = None, Part(attribute=attribute, class_name="?", why="not built (skipped)")
        else:
            built[attribute], part = _build_part(attribute, path, model_type, kwargs, trust_remote_code)
        parts.append(part)
    # the real class under its own name, without the check that looks sub-processor classes up via torchvision
    unchecked = type(cls.__name__, (cls,), {"check_argument_for_proper_class": lambda self, name, arg: None})
    try:
        processor_dict, init_kwargs = unchecked.get_processor_dict(str(path), local_files_only=True, **kwargs)
        processor = unchecked.from_args_and_dict([built[a] for a in cls.get_attributes()], processor_dict, **init_kwargs)
    except Exception as exc:
        absent = "; ".join(f"{p.attribute} {p.class_name}: {p.why}" for p in parts if not p.built)
        raise ConfigError(
            f"{path}: {cls.__name__} could not be built from its parts: {type(exc).__name__}: {exc}"
            + (f" (not built: {absent})" if absent else "")
        ) from None
    return ProcessorParts(processor=processor, parts=tuple(parts))
