"""The settings a packed dataset was planned with, stored next to it so the loader cannot drift.

``vlmpack write`` records in ``packed_wds_dir/.nv-meta/vlmpack.json`` the config
sections the token lengths depend on, and a content hash of the processor files
that decide tokens; the loader rebuilds its ``Config`` from them
(``PackEncoder.from_packed_dir``) or checks its own config against them
(``check_against_packed_dir``)::

    .nv-meta/vlmpack.json   (sorted keys, 2-space indent, written atomically; energon ignores it)
    {
      "format": "vlmpack.packed_settings", "version": 1,
      "fingerprint": "3f0c...",       # model/video/sample/loss (processor path left out) + processor file hashes
      "plan_fingerprint": "9a1e...",  # the plan (pack_plan.npz) the shards were written from
      "model":  {"model_type": "qwen2_5_vl",            # resolved (config.json when model.model_type is unset)
                 "processor_loader": "auto_processor",
                 "processor_kwargs": {"pretrained_model_name_or_path": "/abs/proc", "min_pixels": ...}},
      "video":  {"fps": 2.0, "min_frames": 4, ...},     # the whole `video:` section
      "sample": {"max_token_len": 8192, "sample_type": "vlmpack_packed"},
      "loss":   {"train_on": "assistant"},             # only when the config has a `loss:` section
      "alignment": {"context_parallel_size": 2, "tensor_model_parallel_size": 1, "sequence_parallel": false,
                    "align_to": null, "multiple": 4},  # the layout bucket + plan aligned sub-samples for
      "schedule": {"data_parallel_size": 8, "micro_batches_per_step": 1, "packs_per_rank": 400,
                   "loader_workers": 8, "unscheduled": 5, "step_order": "shuffle"},  # the balanced train
                                                        # split (schedule.py), or null
      "mixture": {"by": "samples", "epochs": 1, "window_steps": 100, "worst_window_deviation": 0.004,
                  "sources": [{"name": "captions", "rule": "weight", "value": 0.5, "asked_share": 0.5,
                               "train_share": 0.5001, "packed": 5000, "packed_tokens": 912345,
                               "uses": {"0": 10, "1": 4990}, ...}, ...]},  # data.sources as planned, or null
      "processor": {"sha256": "<sha256 of the files map>",
                    "files": {"chat_template.jinja": "<sha256>", "preprocessor_config.json": "<sha256>", ...}}
    }

Checked (a difference raises ``ConfigError`` naming the field and both values):
``model.model_type`` (resolved on both sides), ``model.processor_loader``, every
``model.processor_kwargs`` key except the processor path (the folder may live
elsewhere on the training machine: its files' hashes are compared instead) and the
loading-only ``cache_dir``, ``local_files_only``, ``token``, ``trust_remote_code``,
every ``video`` and ``sample`` field, and the processor files of ``PROCESSOR_FILES``
(a file present on one side only is a difference). ``loss`` is restored by
``config_from_packed_dir`` but not checked: it changes labels, never lengths. ``alignment``
is read by the training adapters (``written_alignment``): a job whose layout needs
another multiple is refused there (``loader/adapters/megatron.py``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from .artifacts import atomic_write_text, canonical_json, fingerprint
from .config import Config, config_from_dict
from .errors import ConfigError
from .model_type import resolved_model_type
from .packing.alignment import Alignment
from .schedule import Schedule
from .tario import is_url, url_fs

__all__ = [
    "SETTINGS_NAME",
    "WRITE_MARKER",
    "may_hold",
    "written_counts",
    "SETTINGS_FORMAT",
    "PROCESSOR_FILES",
    "processor_file_hashes",
    "packed_settings",
    "write_packed_settings",
    "read_packed_settings",
    "config_from_packed_dir",
    "check_against_packed_dir",
    "written_alignment",
    "written_schedule",
    "written_mixture",
]

SETTINGS_NAME = "vlmpack.json"  # in packed_wds_dir/.nv-meta/
WRITE_MARKER = "vlmpack_write.json"  # beside it: the write stage's {fingerprint, complete, shards, counts}
SETTINGS_FORMAT = "vlmpack.packed_settings"
_VERSION = 1
_META_DIR = ".nv-meta"  # energon's MAIN_FOLDER_NAME (output.energon_meta.META_DIR)
_PATH_KEY = "pretrained_model_name_or_path"
# from_pretrained kwargs that say where / how to load, not what: never compared (the file hashes are)
_WHERE_KWARGS = frozenset({_PATH_KEY, "cache_dir", "local_files_only", "token", "trust_remote_code"})
_CHECKED = ("model", "video", "sample")  # sections the token lengths depend on
_RESTORED = ("loss",)  # stored and restored, not checked
# Files of a processor directory that decide the token ids: tokenizer (BPE / sentencepiece / tiktoken),
# chat template (own file or inside tokenizer_config.json), image / video processor settings, model_type.
PROCESSOR_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "tiktoken.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
    "processor_config.json",
    "config.json",
)


def processor_file_hashes(directory: str | Path) -> dict[str, str]:
    """sha256 of each ``PROCESSOR_FILES`` entry present in ``directory`` (absent ones are left out)."""
    directory = Path(directory)
    out = {}
    for name in PROCESSOR_FILES:
        path = directory / name
        if path.is_file():
            out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _sections(config: Config) -> dict[str, dict]:
    """The stored sections as plain data, ``model.model_type`` resolved from the processor directory."""
    out = {name: dataclasses.asdict(getattr(config, name)) for name in (*_CHECKED, *_RESTORED) if hasattr(config, name)}
    if config.model.processor_kwargs.get(_PATH_KEY):
        out["model"]["model_type"] = resolved_model_type(config.model)  # the folder's config.json, as the scan
    return json.loads(json.dumps(out))  # tuples -> lists, as they come back from the file


def _processor_block(config: Config) -> dict | None:
    path = config.model.processor_kwargs.get(_PATH_KEY)
    if not path:
        return None
    files = processor_file_hashes(path)
    return {"sha256": hashlib.sha256(canonical_json(files).encode()).hexdigest(), "files": files}


def packed_settings(config: Config, plan_fingerprint: str, schedule: dict | None = None,
                    mixture: dict | None = None) -> dict:
    """The ``vlmpack.json`` document for ``config`` (see the module doc); ``schedule`` the plan's
    (``schedule.Schedule.record``), None when the plan balances nothing; ``mixture`` the plan's per-source
    record (``stages/plan.py`` ``mixture_record``), None without ``data.sources``."""
    sections = _sections(config)
    processor = _processor_block(config)
    portable = json.loads(json.dumps(sections))
    for name in _WHERE_KWARGS:  # where it lives and how it loads do not change a token
        portable["model"]["processor_kwargs"].pop(name, None)
    body = {
        "format": SETTINGS_FORMAT,
        "version": _VERSION,
        "fingerprint": fingerprint({"sections": portable, "processor": processor and processor["files"]}),
        "plan_fingerprint": plan_fingerprint,
        **sections,
        "processor": processor,
        "alignment": config.alignment.record(),
        "schedule": schedule,
        "mixture": mixture,
    }
    return body


def write_packed_settings(out_dir: Path, document: dict) -> None:
    atomic_write_text(Path(out_dir) / _META_DIR / SETTINGS_NAME, json.dumps(document, indent=2, sort_keys=True) + "\n")


def meta_location(packed_dir: str | Path, name: str) -> str:
    """Where ``.nv-meta/<name>`` of ``packed_dir`` is: a path, or the URL of a bucket-written dataset."""
    if is_url(str(packed_dir)):
        return f"{str(packed_dir).rstrip('/')}/{_META_DIR}/{name}"
    return str(Path(packed_dir) / _META_DIR / name)


def _meta_text(packed_dir: str | Path, name: str) -> str | None:
    """The text of ``.nv-meta/<name>``, None where there is none; a URL is read through fsspec, as the write
    put it there (``output/object_store.py``) and as energon reads the packs (its Multi-Storage Client)."""
    location = meta_location(packed_dir, name)
    if not is_url(location):
        path = Path(location)
        return path.read_text() if path.is_file() else None
    fs, inner = url_fs(location)
    try:
        with fs.open(inner, "rb") as handle:
            return handle.read().decode()
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - a store's own errors: one line, not its traceback
        raise ConfigError(f"{location}: cannot be read ({type(exc).__name__}: {exc}); check the URL, the "
                          "credentials and the endpoint") from None


def read_packed_settings(packed_dir: str | Path) -> dict:
    """The stored document; ``ConfigError`` when the dataset has none (written before settings were recorded)."""
    document = _settings_if_any(packed_dir)
    if document is None:
        raise ConfigError(
            f"{meta_location(packed_dir, SETTINGS_NAME)} not found: {packed_dir} was not written by a `vlmpack write` "
            "that records its settings; rerun `vlmpack write` (the shards are rebuilt) or build PackEncoder(config) "
            "from the scan's config"
        )
    return document


def _settings_if_any(packed_dir: str | Path) -> dict | None:
    """The stored document, None where there is none; read once (for a URL, one request)."""
    text = _meta_text(packed_dir, SETTINGS_NAME)
    if text is None:
        return None
    path = meta_location(packed_dir, SETTINGS_NAME)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc}); rerun `vlmpack write`") from None
    if not isinstance(document, dict) or document.get("format") != SETTINGS_FORMAT or document.get("version") != _VERSION:
        raise ConfigError(f"{path}: not a {SETTINGS_FORMAT} version {_VERSION} file; rerun `vlmpack write`")
    return document


def written_schedule(packed_dir: str | Path) -> Schedule | None:
    """The balanced schedule of the train split (``schedule.py``); None when it was planned without one."""
    settings = _settings_if_any(packed_dir)
    return Schedule.from_record(settings.get("schedule")) if settings else None


def written_mixture(packed_dir: str | Path) -> dict | None:
    """The mixture the plan drew (sources, rules, realised counts and shares); None without one."""
    settings = _settings_if_any(packed_dir)
    return settings.get("mixture") if settings else None


def written_counts(packed_dir: str | Path) -> dict | None:
    """The finished write's counts (packs, samples, shards, bytes; images, videos, audios: the media items of the
    samples it packed from); None where the write did not finish or left no marker."""
    try:
        marker = json.loads(_meta_text(packed_dir, WRITE_MARKER) or "{}")
    except json.JSONDecodeError:
        return None
    return marker.get("counts") if marker.get("complete") else None


def may_hold(packed_dir: str | Path, kind: str) -> bool:
    """False only where the finished write recorded no ``kind`` ("images", "videos", "audios"): a loader then
    needs no video reader, a trainer no audio guard. A dataset written before the counts were recorded: True."""
    return (written_counts(packed_dir) or {}).get(kind) != 0


def written_alignment(packed_dir: str | Path) -> Alignment:
    """The alignment the packed dataset was planned with (none for data written before it was recorded)."""
    return Alignment.from_record(read_packed_settings(packed_dir).get("alignment"))


def config_from_packed_dir(
    packed_dir: str | Path, processor_path: str | Path | None = None, *, check: bool = True, **overrides: dict
) -> Config:
    """A ``Config`` with the stored model/video/sample (and loss) sections and ``data.packed_wds_dir``.

    ``processor_path`` replaces the stored processor folder. ``overrides`` are config sections as
    mappings (``video={"fps": 2.0}``); a value that contradicts the stored one raises ``ConfigError``
    (from ``check_against_packed_dir``, run unless ``check=False``); other sections (``loss``,
    ``data``, ...) are taken as given.
    """
    document = read_packed_settings(packed_dir)
    source = meta_location(packed_dir, SETTINGS_NAME)
    raw: dict[str, Any] = {
        name: json.loads(json.dumps(document[name])) for name in (*_CHECKED, *_RESTORED) if name in document
    }
    if "loss" in raw and "loss" not in {f.name for f in dataclasses.fields(Config)}:
        raw.pop("loss")  # written by a vlmpack with a `loss:` section, read by one without
    raw["data"] = {"packed_wds_dir": str(packed_dir)}
    if processor_path is not None:
        raw["model"]["processor_kwargs"][_PATH_KEY] = str(processor_path)
    for section, values in overrides.items():
        if not isinstance(values, dict):
            raise ConfigError(f"from_packed_dir: override {section}= must be a mapping of keys, got {values!r}")
        target = raw.setdefault(section, {})
        for key, value in values.items():
            if key == "processor_kwargs" and isinstance(value, dict):
                target.setdefault(key, {}).update(value)
            else:
                target[key] = value
    config = config_from_dict(raw, source=source)
    folder = config.model.processor_kwargs.get(_PATH_KEY)
    if document.get("processor") and folder and not Path(folder).is_dir():
        if processor_path is not None:
            raise ConfigError(f"processor_path={str(processor_path)!r} is not a directory")
        raise ConfigError(
            f"{source}: the processor directory {folder!r} the dataset was written with is not here: "
            "pass processor_path= (a copy of that directory on this machine)"
        )
    if check:
        _check(config, document, source)
    return config


def check_against_packed_dir(config: Config, packed_dir: str | Path, *, missing_ok: bool = False) -> None:
    """Raise ``ConfigError`` listing every checked setting of ``config`` that differs from the packed dataset's.

    ``missing_ok``: return quietly when ``packed_dir`` records no settings (output of an older vlmpack).
    """
    document = _settings_if_any(packed_dir) if missing_ok else read_packed_settings(packed_dir)
    if document is not None:
        _check(config, document, meta_location(packed_dir, SETTINGS_NAME))


_UNSET = object()  # a key one side does not have


def _show(value: Any) -> str:
    return "(not set)" if value is _UNSET else repr(value)


def _same(stored: Any, given: Any) -> bool:
    if stored is _UNSET or given is _UNSET:
        return stored is given
    return json.loads(json.dumps(stored)) == json.loads(json.dumps(given))  # 2 == 2.0, tuple == list


def _check(config: Config, document: dict, source: str) -> None:
    here = _sections(config)
    problems: list[str] = []

    def compare(field: str, stored: Any, given: Any) -> None:
        if not _same(stored, given):
            problems.append(f"{field}: packed with {_show(stored)}, this config has {_show(given)}")

    for section in _CHECKED:
        stored, given = document.get(section) or {}, here[section]
        for key in sorted(set(stored) | set(given)):
            if section == "model" and key == "processor_kwargs":
                kwargs_stored, kwargs_given = stored.get(key) or {}, given.get(key) or {}
                for name in sorted((set(kwargs_stored) | set(kwargs_given)) - _WHERE_KWARGS):
                    compare(f"model.processor_kwargs.{name}", kwargs_stored.get(name, _UNSET), kwargs_given.get(name, _UNSET))
            else:
                compare(f"{section}.{key}", stored.get(key, _UNSET), given.get(key, _UNSET))
    processor = document.get("processor")
    if processor:
        path = config.model.processor_kwargs.get(_PATH_KEY)
        files = processor_file_hashes(path) if path else {}
        for name in sorted(set(processor["files"]) | set(files)):
            stored_hash, given_hash = processor["files"].get(name), files.get(name)
            if stored_hash != given_hash:
                problems.append(
                    f"processor file {name} in {path}: sha256 {(given_hash or 'absent')[:16]}, "
                    f"packed with {(stored_hash or 'absent')[:16]}"
                )
    if problems:
        raise ConfigError(
            f"the settings differ from those {Path(source).parent.parent} was planned with ({source}); "
            "token lengths would not match the plan:\n  " + "\n  ".join(problems)
            + "\nbuild the encoder with PackEncoder.from_packed_dir(...), use the scan's config and processor "
            "directory, or rerun scan -> write with the new settings"
        )
