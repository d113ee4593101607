"""The model's own classes, found through its config and sub-configs (no weights, no checkpoint).

A checkpoint's ``config.json`` names one ``model_type``, but the class that reads images and text may
sit under a sub-config: Qwen3-Omni's top type ``qwen3_omni_moe`` has no base-model entry in
transformers' ``MODEL_MAPPING_NAMES``, its ``thinker_config`` (type ``qwen3_omni_moe_thinker``) has
``Qwen3OmniMoeThinkerModel``. So every lookup walks::

    the config itself                               (gemma4, ernie4_5_vl_moe, qwen2_5_vl, ...)
    its sub-configs that are image-text-to-text     (thinker_config -> qwen3_omni_moe_thinker)
    its other sub-configs                           (talker_config, text_config, vision_config, ...)

and looks first at the classes transformers' auto mappings name for each config's type (base model,
then image-text-to-text, then multimodal LM), then, along the chain again, at the other classes of
each type's modeling module (``transformers/models/<type>/modeling_<type>.py``): a mapped class of a
sub-config (the Thinker) wins over an unmapped base class of the top type that defines the method but
is never built alone (the mixin itself). A method is looked up on each class through its
MRO, so one defined on a mixin (``Qwen3OmniMoePreTrainedModelForConditionalGeneration.get_rope_index``,
modeling_qwen3_omni_moe.py) is found on the classes that inherit it.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["ModelClass", "config_chain", "find_class", "trained_class", "forward_inputs"]


@dataclass(frozen=True, slots=True)
class ModelClass:
    """A model class and the (sub-)config it is built from."""

    cls: type  # e.g. Qwen3OmniMoeThinkerModel
    config: Any  # the PretrainedConfig it takes (the model's, or one of its sub-configs)
    path: str  # where that config sits in the model's: "" or e.g. "thinker_config"

    def describe(self) -> str:
        return self.cls.__name__ + (f" (its {self.path})" if self.path else "")


def _is_config(value: Any) -> bool:
    from transformers import PretrainedConfig

    return isinstance(value, PretrainedConfig) and bool(getattr(value, "model_type", ""))


def _mapping(name: str) -> dict[str, str]:
    from transformers.models.auto import modeling_auto

    return getattr(modeling_auto, name)


def _image_text_types() -> frozenset[str]:
    return frozenset(_mapping("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"))


def config_chain(config: Any) -> Iterator[tuple[str, Any]]:
    """``(path, config)``: the config, then its image-text-to-text sub-configs, then its other sub-configs."""
    if not _is_config(config):
        return
    yield "", config
    subs = [(name, value) for name, value in vars(config).items() if name.endswith("_config") and _is_config(value)]
    vision_language = _image_text_types()
    subs.sort(key=lambda item: item[1].model_type not in vision_language)  # stable: the config's own order within
    yield from subs


def _mapped_classes(model_type: str) -> Iterator[type]:
    """The classes transformers' auto mappings name for ``model_type``."""
    import transformers

    for mapping in ("MODEL_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
                    "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES"):  # fmt: skip
        name = _mapping(mapping).get(model_type)
        cls = getattr(transformers, name, None) if isinstance(name, str) else None
        if isinstance(cls, type):
            yield cls


def _module_classes(model_type: str) -> Iterator[type]:
    """The classes defined in ``model_type``'s modeling module, in their order there."""
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    module_name = model_type_to_module_name(model_type)
    try:
        module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    except Exception:  # noqa: BLE001 - no modeling module (a processor-only type), or one that needs a backend
        return
    for value in vars(module).values():
        if isinstance(value, type) and value.__module__ == module.__name__:
            yield value


def _takes(cls: type, config: Any) -> bool:
    """Whether ``cls(config)`` is the class's own constructor call (its ``config_class`` matches)."""
    expected = getattr(cls, "config_class", None)
    return not isinstance(expected, type) or isinstance(config, expected)


def find_class(config: Any, method: str) -> ModelClass | None:
    """The first class (mapped classes along ``config_chain``, then module classes along it) whose MRO defines
    ``method`` and that is built from that config; None when no class of the model defines it."""
    for classes in (_mapped_classes, _module_classes):
        for path, sub in config_chain(config):
            for cls in classes(sub.model_type):
                if callable(getattr(cls, method, None)) and _takes(cls, sub):
                    return ModelClass(cls=cls, config=sub, path=path)
    return None


def trained_class(config: Any) -> ModelClass | None:
    """The class a VLM is fine-tuned as: the image-text-to-text class of the first config along ``config_chain``
    that has one (``Gemma4ForConditionalGeneration``; Qwen3-Omni's ``Qwen3OmniMoeThinkerForConditionalGeneration``)."""
    import transformers

    names = _mapping("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES")
    for path, sub in config_chain(config):
        cls = getattr(transformers, names.get(sub.model_type) or "", None)
        if isinstance(cls, type) and _takes(cls, sub):
            return ModelClass(cls=cls, config=sub, path=path)
    return None


def forward_inputs(cls: type) -> frozenset[str]:
    """The named parameters of ``cls.forward`` (what ``model(**kwargs)`` passes on by name)."""
    parameters = inspect.signature(cls.forward).parameters.values()
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in parameters if p.kind in named and p.name != "self")
