"""The published offline-packing tool's config keys, read as vlmpack's.

vlmpack replaces the offline packer of LLaVA-OneVision-1.5 (``examples_offline_packing``,
later ``offline_packing`` / LoongForge ``tools/data_preprocess/vlm/offline_packing``). Its
configs (``config.yaml``, ``config_256k.yaml``, ``packed_vqa_demo.yaml``, its CI config)
load here with only their paths changed. Every key of theirs is either ours already,
mapped to ours, or accepted with one notice saying why it has no effect::

    theirs                                   here
    data.packed_json_dir                     data.work_dir when that is unset; without packed_wds_dir
                                             too: work_dir <it>/work, packed_wds_dir <it>/packed_wds
                                             (the tool's own output place; the two must not nest)
    model.model_type: kimi-k2.5              kimi_k25
    model.model_type: qwenvl                 the Qwen-VL family named by the processor folder
                                             (tokens/rules.py; refused on a non-Qwen folder)
    model.chat_template_kwargs               ours: variables for the chat template, scan and loader
    model.chat_template_path                 checked: must hold the processor folder's own template
    model.use_hf_chat_template               notice: the HF template is always the one used
    packing.algorithm: bfd                   best_fit_decreasing
    packing.validate_pack_plan               notice: the plan is always checked
    process.chunk_size / merge_batch_size /  notice: one task per shard, per-shard commits
      time_out / max_shards
    artifacts.*                              notice: work_dir keeps only small artifacts
    media_preprocess.*                       notice: media bytes are never altered
    log.level                                the level of the ``vlmpack_offline`` loggers
    log.<other>                              notice

``translate_published`` runs on the raw dict before validation; the keys it maps or
notes are removed, so everything left is checked against vlmpack's schema as usual.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = ["PATH_KEYS", "MODEL_TYPE_ALIASES", "QWEN_FROM_FOLDER", "translate_published"]

# Keys whose values are local paths (resolved against the config file's folder, or the current directory for --set).
PATH_KEYS: frozenset[tuple[str, ...]] = frozenset(
    {
        ("data", "wds_dir"),
        ("data", "work_dir"),
        ("data", "packed_wds_dir"),
        ("data", "packed_json_dir"),
        ("model", "processor_kwargs", "pretrained_model_name_or_path"),
        ("model", "chat_template_path"),
        ("packing", "cost", "model_config"),
    }
)

QWEN_FROM_FOLDER = "qwenvl"  # the published tool's one name for every Qwen-VL generation
MODEL_TYPE_ALIASES = {"kimi-k2.5": "kimi_k25", "kimi_k2.5": "kimi_k25"}
_ALGORITHM_ALIASES = {"bfd": "best_fit_decreasing", "ffd": "first_fit_decreasing"}

_PROCESS_NOTES = {
    "chunk_size": "the scan works one shard per task and commits each shard, so there are no sample chunks",
    "merge_batch_size": "token lengths go straight into manifest.sqlite; there is no sorted-file merge to batch",
    "time_out": "there is no global timeout; a killed or stopped scan resumes at the first unfinished shard",
    "max_shards": "every shard is scanned; for a trial on the first N use `vlmpack scan --limit-shards N`",
}
_SECTION_NOTES = {
    "artifacts": "work_dir keeps only what the next stage reads (manifest.sqlite, manifest.jsonl with every "
    "drop and its reason, bins/, pack_plan.npz); there are no debug or intermediate files to switch",
    "media_preprocess": "vlmpack copies media bytes unchanged and counts the tokens the model's own processor "
    "makes of them; set resizing in model.processor_kwargs (min_pixels / max_pixels)",
}
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _notice(key: str, why: str) -> str:
    return f"config key `{key}` (from the published offline-packing tool) has no effect in vlmpack: {why}"


def translate_published(raw: dict, source: str) -> tuple[dict, list[str], int | None]:
    """(raw with published keys mapped or removed, one notice per key without effect, log level or None)."""
    if not isinstance(raw, dict):
        return raw, [], None
    notices: list[str] = []
    _data(raw.get("data"), notices)
    _model(raw.get("model"), source, notices)
    packing = raw.get("packing")
    if isinstance(packing, dict):
        if "validate_pack_plan" in packing:
            packing.pop("validate_pack_plan")
            notices.append(_notice("packing.validate_pack_plan", "the plan stage always checks the plan (every "
                                   "ok sample in exactly one pack, every pack within sample.max_token_len)"))
        if packing.get("algorithm") in _ALGORITHM_ALIASES:
            packing["algorithm"] = _ALGORITHM_ALIASES[packing["algorithm"]]
    process = raw.get("process")
    if isinstance(process, dict):
        for key, why in _PROCESS_NOTES.items():
            if key in process:
                process.pop(key)
                notices.append(_notice(f"process.{key}", why))
    for section, why in _SECTION_NOTES.items():
        values = raw.pop(section, None)
        if isinstance(values, dict):
            notices.extend(_notice(f"{section}.{key}", why) for key in values)
        elif values is not None:
            notices.append(_notice(section, why))
    return raw, notices, _log_level(raw.pop("log", None), source, notices)


def _data(data: Any, notices: list[str]) -> None:
    if not isinstance(data, dict) or "packed_json_dir" not in data:
        return
    packed_json = data.pop("packed_json_dir")
    if not packed_json:
        return
    if data.get("work_dir"):
        notices.append(_notice("data.packed_json_dir", "data.work_dir is set and holds every artifact"))
        return
    if data.get("packed_wds_dir"):
        data["work_dir"] = packed_json
    else:  # the tool wrote <packed_json_dir>/packed_wds; the work folder must not hold the output, so beside it
        data["work_dir"] = str(Path(packed_json) / "work")
        data["packed_wds_dir"] = str(Path(packed_json) / "packed_wds")


def _model(model: Any, source: str, notices: list[str]) -> None:
    if not isinstance(model, dict):
        return
    if isinstance(model.get("model_type"), str):
        model["model_type"] = MODEL_TYPE_ALIASES.get(model["model_type"].lower(), model["model_type"])
    if "use_hf_chat_template" in model:
        model.pop("use_hf_chat_template")
        notices.append(_notice("model.use_hf_chat_template", "scan and loader always render with the processor "
                               "folder's own HF chat template (there are no handwritten templates), so counts "
                               "and training inputs agree"))
    template_path = model.pop("chat_template_path", None)
    if template_path:
        _check_template_path(str(template_path), model, source, notices)


def _check_template_path(template_path: str, model: dict, source: str, notices: list[str]) -> None:
    """Accept ``chat_template_path`` only when it holds the processor folder's own template.

    The loader renders with the folder's template (its files are hashed into the packed dataset's
    settings), so a different file would make the scan count for one template and training use another.
    """
    path = Path(template_path)
    if not path.is_file():
        raise ConfigError(f"{source}: model.chat_template_path = {template_path!r} is not a file")
    kwargs = model.get("processor_kwargs")
    folder = Path(str(kwargs.get("pretrained_model_name_or_path"))) if isinstance(kwargs, dict) else None
    own = _folder_template(folder) if folder is not None and folder.is_dir() else None
    if own is None:
        notices.append(_notice("model.chat_template_path", "the processor folder's own chat template is used; "
                               "it could not be read now to compare with this file"))
    elif own.strip() != path.read_text().strip():
        raise ConfigError(
            f"{source}: model.chat_template_path = {template_path!r} differs from the chat template of the "
            f"processor folder {folder}: vlmpack renders with the folder's template in scan and loader alike; "
            f"copy this file to {folder}/chat_template.jinja and remove model.chat_template_path"
        )
    else:
        notices.append(_notice("model.chat_template_path", f"it holds the same template as {folder}, "
                               "which is the one used"))


def _folder_template(folder: Path) -> str | None:
    """The chat template a processor folder carries (``chat_template.jinja``, ``.json``, tokenizer config)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    for name in ("chat_template.json", "tokenizer_config.json"):
        try:
            value = json.loads((folder / name).read_text()).get("chat_template")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, str):
            return value
        if isinstance(value, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
            if isinstance(named.get("default"), str):
                return named["default"]
    return None


def _log_level(log_section: Any, source: str, notices: list[str]) -> int | None:
    if log_section is None:
        return None
    if not isinstance(log_section, dict):
        raise ConfigError(f"{source}: `log` must be a mapping, got {type(log_section).__name__}")
    level = None
    for key, value in log_section.items():
        if key == "level":
            name = str(value).upper()
            if name not in _LOG_LEVELS:
                raise ConfigError(f"{source}: `log.level` = {value!r} is not one of {', '.join(_LOG_LEVELS)}")
            level = logging.getLevelName(name)
        else:
            notices.append(_notice(f"log.{key}", "vlmpack writes its messages to the terminal and its reports "
                                   "to work_dir; set log.level for the level"))
    return level
