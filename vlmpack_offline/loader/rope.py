"""Position ids of one sub-sample, computed by the model's own rope-index function.

Qwen-VL models use 3D (temporal, height, width) "mRoPE" positions; the model
computes them in ``<Model>.get_rope_index`` from the token ids and the media
grids. We call that very function (bound to a tiny host object that holds only
the model config: no weights) once per sub-sample, so every sub-sample gets
exactly the positions it would get if it were run alone. Models without such a
function get plain ``arange`` positions.

The config is ``AutoConfig.from_pretrained(processor_dir)``: a real checkpoint
folder carries the full ``config.json``; a folder holding only ``model_type``
gets HF's defaults for that family (``spatial_merge_size``, ``tokens_per_second``),
which must then also be what the trained model uses.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig
from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

from ..remote_code import load_pretrained

__all__ = ["RopeIndex", "MM_TEXT", "MM_IMAGE", "MM_VIDEO"]

# HF's mm_token_type_ids values (ProcessorMixin.create_mm_token_type_ids).
MM_TEXT, MM_IMAGE, MM_VIDEO = 0, 1, 2


class _Host:
    """Stands in for the model: ``get_rope_index`` reads only ``self.config`` and calls helper methods."""

    def __init__(self, config) -> None:
        self.config = config


class RopeIndex:
    """``positions(input_ids, ...) -> [3, 1, L]`` (mRoPE) or ``[1, L]`` for one sub-sample."""

    def __init__(self, config) -> None:
        self.config = config
        self.model_type = config.model_type
        model_cls = getattr(transformers, MODEL_MAPPING_NAMES.get(self.model_type, ""), None)
        fn = getattr(model_cls, "get_rope_index", None) if model_cls is not None else None
        self._host = None
        if fn is not None:
            methods = {name: getattr(model_cls, name) for name in dir(model_cls) if name.startswith("get_")}
            host_cls = type(f"{model_cls.__name__}RopeHost", (_Host,), methods)
            self._host = host_cls(config)
        self.image_token_id = getattr(config, "image_token_id", None)
        self.video_token_id = getattr(config, "video_token_id", None)
        # GLM-4V: video frames are <|image|> tokens between <|begin_of_video|> and <|end_of_video|>
        glm = str(self.model_type).startswith("glm")
        self.video_start_token_id = getattr(config, "video_start_token_id", None) if glm else None
        self.video_end_token_id = getattr(config, "video_end_token_id", None) if glm else None

    @classmethod
    def from_processor_dir(cls, path: str | Path, *, model_type: str | None = None,
                           trust_remote_code: bool = False) -> RopeIndex:
        """The folder's ``config.json``; HF's defaults for ``model_type`` when the folder has none."""
        if (Path(path) / "config.json").is_file():
            config = load_pretrained(AutoConfig.from_pretrained, str(path), trust_remote_code=trust_remote_code)
            if model_type is None or config.model_type == model_type:
                return cls(config)
        if model_type is None:
            raise ValueError(f"{path} has no config.json: pass model_type")
        return cls(AutoConfig.for_model(model_type))

    @property
    def uses_seconds(self) -> bool:
        """Whether the rope index spaces video frames in time by ``second_per_grid_ts`` (Qwen2.5-VL)."""
        return self._host is not None and "second_per_grid_ts" in inspect.signature(self._host.get_rope_index).parameters

    @property
    def is_mrope(self) -> bool:
        return self._host is not None

    @property
    def has_linear_attention(self) -> bool:
        """Whether the text model has linear-attention (recurrent) layers (Qwen3.5's Gated DeltaNet).

        Such a layer carries its state from one token to the next and sees sub-sample boundaries only
        through ``cu_seq_lens_q``: a block mask or restarting positions do not stop it.
        """
        text = getattr(self.config, "text_config", None) or self.config
        return "linear_attention" in (getattr(text, "layer_types", None) or ())

    @property
    def sliding_window(self) -> int | None:
        """The window of the text model's sliding-window layers (Gemma3), or None when it has none."""
        text = getattr(self.config, "text_config", None) or self.config
        if "sliding_attention" not in (getattr(text, "layer_types", None) or ()):
            return None
        return int(text.sliding_window)

    def mm_token_type_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """HF's per-token modality ids: 0 text, 1 image placeholder, 2 video placeholder."""
        types = torch.zeros_like(input_ids, dtype=torch.int32)
        if self.image_token_id is not None:
            types[input_ids == self.image_token_id] = MM_IMAGE
        if self.video_token_id is not None:
            types[input_ids == self.video_token_id] = MM_VIDEO
        if self.image_token_id is not None and self.video_start_token_id is not None and self.video_end_token_id is not None:
            # Glm4vProcessor.create_mm_token_type_ids: image tokens inside a video segment are video tokens
            inside = (input_ids == self.video_start_token_id).cumsum(-1) > (input_ids == self.video_end_token_id).cumsum(-1)
            types[(input_ids == self.image_token_id) & inside] = MM_VIDEO
        return types

    def positions(
        self,
        input_ids: torch.Tensor,
        *,
        image_grid_thw: torch.Tensor | None = None,
        video_grid_thw: torch.Tensor | None = None,
        second_per_grid_ts: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Positions of ONE sub-sample (``input_ids`` ``[1, L]``), starting at 0."""
        length = input_ids.shape[-1]
        if self._host is None:
            return torch.arange(length, dtype=torch.long)[None]
        kwargs = {}
        if second_per_grid_ts is not None:
            kwargs["second_per_grid_ts"] = second_per_grid_ts
        with torch.no_grad():
            positions, _ = self._host.get_rope_index(
                input_ids,
                mm_token_type_ids=self.mm_token_type_ids(input_ids),
                image_grid_thw=image_grid_thw,
                video_grid_thw=None if video_grid_thw is None else video_grid_thw.clone(),
                **kwargs,
            )
        return positions
