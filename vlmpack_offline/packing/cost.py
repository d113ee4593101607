"""A pack's training cost, the quantity step balancing evens out over data-parallel ranks.

Equal token counts are not equal work: attention grows with the square of each sub-sample's
length and the vision encoder's full-attention layers with the square of each image's (frame's,
tile's) patches. The cost of a pack, in training FLOPs (forward + backward = 3 x forward, 2 FLOPs
per multiply-add)::

    cost = token * sum(L_i) + attention * sum(L_i ** 2) + patch * sum(P_j) + patch_attention * sum(B_k ** 2)
         + audio_frame * sum(A_j) + audio_attention * sum(W_k ** 2)

``L_i`` the sub-samples' (aligned) lengths, ``P_j`` the vision-encoder patches of each sample, ``B_k``
the patches of each of the encoder's full-attention blocks (a frame, a tile, an image: what the
scan records per family, ``families/``); ``A_j`` and ``W_k`` the same for the audio encoder (the
frames its layers run on, and each attention window's frames). The coefficients come from a model
``config.json`` (``from_model_config``, docs/balance.md: the text, vision and audio sub-configs; an
omni model's under its ``thinker_config``) and each can be set in ``packing.cost``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ._chunked import CHUNK, pack_chunks

__all__ = ["CostModel", "DEFAULT_SIZES", "cost_model_for", "model_sizes", "pack_costs"]

# The coefficients' names, in ``packing.cost`` and in ``CostModel``.
TERMS = ("token", "attention", "patch", "patch_attention", "audio_frame", "audio_attention")

# A Qwen2.5-VL-7B-sized model (its published config.json): used only when no model config is named,
# and then said so at plan time.
DEFAULT_SIZES = {
    "name": "Qwen2.5-VL-7B-sized defaults",
    "text": {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
             "intermediate_size": 18944, "vocab_size": 152064},
    "vision": {"hidden_size": 1280, "depth": 32, "intermediate_size": 3420, "hidden_act": "silu", "patch_size": 14,
               "temporal_patch_size": 2, "in_channels": 3, "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31]},
    # Qwen2.5-Omni-7B's audio encoder (its published config.json, thinker_config.audio_config)
    "audio": {"d_model": 1280, "encoder_layers": 32, "encoder_ffn_dim": 5120},
}


@dataclass(frozen=True, slots=True, kw_only=True)
class CostModel:
    """FLOPs per unit of each term (module doc); ``source`` says where they came from, for the plan's summary."""

    token: float
    attention: float
    patch: float
    patch_attention: float
    source: str
    audio_frame: float = 0.0  # 0: the model hears nothing (no audio_config)
    audio_attention: float = 0.0

    def record(self) -> dict:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        return (f"cost model ({self.source}): {self.token:.3g} FLOPs/token + {self.attention:.3g} x length^2 "
                f"+ {self.patch:.3g}/patch + {self.patch_attention:.3g} x block^2"
                + (f" + {self.audio_frame:.3g}/audio frame + {self.audio_attention:.3g} x window^2"
                   if self.audio_frame or self.audio_attention else ""))


def _section(config: dict, names: tuple[str, ...]) -> dict:
    for name in names:
        if isinstance(config.get(name), dict):
            return config[name]
    return config


def _get(section: dict, where: str, *names: str):
    for name in names:
        if section.get(name) is not None:
            return section[name]
    raise ConfigError(f"{where}: none of {', '.join(names)} is set; name another model config.json in "
                      f"packing.cost.model_config, or set the coefficients in packing.cost")


def model_sizes(config: dict, where: str) -> tuple[float, float, float, float, float, float]:
    """(token, attention, patch, patch_attention, audio_frame, audio_attention) FLOPs from a HF model
    ``config.json`` (module doc)."""
    if isinstance(config.get("thinker_config"), dict):  # Qwen-Omni: the model that reads the inputs (no talker)
        config = config["thinker_config"]
    return (*_text_and_vision(config, where), *_audio(config.get("audio_config"), where + " audio_config"))


def _audio(audio, where: str) -> tuple[float, float]:
    """The audio encoder's (per frame, per squared window) FLOPs: its layers' linear weights on each frame they run
    on, and full attention within each window. Whisper-style layers (Qwen-Omni: tf/models/qwen2_5_omni,
    qwen3_omni_moe ``*AudioEncoderLayer``): q, k, v, out 4 d^2 and a d -> ffn -> d MLP. Conformer layers (Gemma4:
    tf/models/gemma4/modeling_gemma4.py ``Gemma4AudioLayer``, recognised by ``subsampling_conv_channels``): two
    d -> 4d -> d feed-forwards, q, k, v, post 4 d^2 and the light conv's d -> 2d, d -> d."""
    if not isinstance(audio, dict):
        return 0.0, 0.0
    d = _get(audio, where, "d_model", "hidden_size")
    layers = _get(audio, where, "encoder_layers", "num_hidden_layers")
    if audio.get("subsampling_conv_channels") is not None:
        per_layer = 2 * (2 * d * 4 * d) + 4 * d * d + 3 * d * d
    else:
        per_layer = 4 * d * d + 2 * d * (audio.get("encoder_ffn_dim") or audio.get("intermediate_size") or 4 * d)
    return 6.0 * layers * per_layer, 12.0 * d * layers


def _text_and_vision(config: dict, where: str) -> tuple[float, float, float, float]:
    text = _section(config, ("text_config", "llm_config", "language_config"))
    h = _get(text, where, "hidden_size")
    layers = _get(text, where, "num_hidden_layers")
    heads = _get(text, where, "num_attention_heads")
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or h // heads
    if text.get("num_experts_per_tok") and text.get("moe_intermediate_size"):  # MoE: the active experts' MLPs
        ffn = text["num_experts_per_tok"] * text["moe_intermediate_size"] + (
            text.get("shared_expert_intermediate_size")
            or (text.get("n_shared_experts") or 0) * text["moe_intermediate_size"])
    else:
        ffn = _get(text, where, "intermediate_size")
    vocab = text.get("vocab_size") or config.get("vocab_size") or 0
    per_layer = 2 * h * heads * head_dim + 2 * h * kv_heads * head_dim + 3 * h * ffn  # q, o, k, v, gated MLP
    token = 6.0 * (layers * per_layer + h * vocab)
    attention = 6.0 * layers * heads * head_dim  # causal: QK^T + AV = 4 s^2 d, halved
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        return token, attention, 0.0, 0.0
    hv = _get(vision, where + " vision_config", "embed_dim", "hidden_size")  # Qwen2-VL: hidden_size is the output
    depth = _get(vision, where + " vision_config", "depth", "num_hidden_layers")
    ffn_v = vision.get("intermediate_size") or int(vision.get("mlp_ratio", 4) * hv)
    gated = 3 if str(vision.get("hidden_act", "")).lower() in ("silu", "swiglu") else 2
    edges = vision.get("patch_size") or 14
    height, width = (edges[0], edges[-1]) if isinstance(edges, (list, tuple)) else (edges, edges)  # InternVL: [14, 14]
    patch_dim = (vision.get("in_channels") or vision.get("num_channels") or 3) * (
        vision.get("temporal_patch_size") or 1) * height * width
    full = vision.get("fullatt_block_indexes")
    n_full = len(full) if full else depth
    window = (vision.get("window_size") or 0) // height
    patch = 6.0 * (depth * (4 * hv * hv + gated * hv * ffn_v) + patch_dim * hv)
    patch += 12.0 * hv * window * window * (depth - n_full)  # windowed layers: linear in patches
    patch_attention = 12.0 * hv * n_full  # full (non-causal) attention: 4 B^2 d forward
    return token, attention, patch, patch_attention


def _read_model_config(path: str) -> dict:
    target = Path(path)
    if target.is_dir():
        target = target / "config.json"
    if not target.is_file():
        raise ConfigError(f"packing.cost.model_config {path!r}: no such file (a model config.json or its folder)")
    try:
        return json.loads(target.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"packing.cost.model_config {target}: not valid JSON ({exc})") from None


def _has_sizes(config: dict) -> bool:
    config = config.get("thinker_config") if isinstance(config.get("thinker_config"), dict) else config
    return "hidden_size" in _section(config, ("text_config", "llm_config", "language_config"))


def cost_model_for(cost_config, processor_dir: str | None = None) -> CostModel:
    """The coefficients: ``packing.cost`` values over those of ``packing.cost.model_config``, else of the
    processor folder's ``config.json`` when it holds model sizes, else of ``DEFAULT_SIZES`` (said in ``source``)."""
    if cost_config.model_config:
        derived, source = model_sizes(_read_model_config(cost_config.model_config), cost_config.model_config), \
            f"sizes from {cost_config.model_config}"
    else:
        folder = Path(processor_dir) / "config.json" if processor_dir else None
        try:
            body = json.loads(folder.read_text()) if folder is not None and folder.is_file() else {}
        except json.JSONDecodeError:
            body = {}
        derived = None
        if _has_sizes(body):
            try:
                derived, source = model_sizes(body, str(folder)), f"sizes from {folder}"
            except (ConfigError, TypeError, ValueError) as exc:  # not named by the user: say why, use the defaults
                reason = f"{folder} has sizes this model reads no coefficients from ({exc})"
        else:
            reason = "no packing.cost.model_config and the processor folder's config.json has no model sizes"
        if derived is None:
            derived = model_sizes(DEFAULT_SIZES["text"] | {"vision_config": DEFAULT_SIZES["vision"],
                                                           "audio_config": DEFAULT_SIZES["audio"]}, "defaults")
            source = f"{DEFAULT_SIZES['name']}: {reason}"
    given = {name: getattr(cost_config, name) for name in TERMS if getattr(cost_config, name) is not None}
    values = dict(zip(TERMS, derived, strict=True)) | given
    if given:
        source += f"; {', '.join(sorted(given))} from packing.cost"
    return CostModel(**values, source=source)


def pack_costs(model: CostModel, lengths: np.ndarray, patches: np.ndarray, blocks: np.ndarray,
               indexes: np.ndarray, offsets: np.ndarray, *, audio: tuple[np.ndarray, np.ndarray] | None = None,
               chunk: int = CHUNK) -> np.ndarray:
    """float64 [P]: the cost of each pack ``indexes[offsets[p]:offsets[p + 1]]`` (per-sample arrays, aligned
    lengths; ``audio`` the per-sample audio frames and squared windows, None for none), whole packs of about
    ``chunk`` samples at a time, so a billion samples need no billion-entry temporary (each pack's sum is
    the same whatever the chunk)."""
    out = np.zeros(len(offsets) - 1, np.float64)
    mapped = (lengths, patches, blocks, indexes, *(audio or ()))  # memory-mapped columns: pages released as it goes
    for first, last in pack_chunks(offsets, chunk, mapped=mapped):
        members = indexes[offsets[first] : offsets[last]]
        if members.size:
            length = lengths[members].astype(np.float64)
            per_sample = model.token * length + model.attention * length * length
            per_sample += model.patch * patches[members] + model.patch_attention * blocks[members].astype(np.float64)
            if audio is not None:
                per_sample += (model.audio_frame * audio[0][members]
                               + model.audio_attention * audio[1][members].astype(np.float64))
            out[first:last] = np.add.reduceat(per_sample, offsets[first:last] - offsets[first])
    return out
