"""What the scan's rows depend on, by name: the scan records it, every later stage checks it.

Its own light module, so ``vlmpack bucket`` / ``plan`` / ``write`` can check a config against the
manifest without importing the scan stage (and with it torch, transformers and every family module).
The manifest's meta holds both the fingerprint (``scan_inputs``) and the settings themselves
(``scan_settings``, ``provenance.flat_settings``), so a changed setting is named, not hashed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .artifacts import fingerprint
from .config import Config, section_fingerprint_payload
from .disk_cache import file_sha256
from .errors import StaleArtifactError
from .manifest import Manifest, manifest_path
from .manifest_parts import parts_dir
from .provenance import changes, flat_settings, stale_message

__all__ = ["scan_settings", "scan_inputs_fingerprint", "check_manifest_current", "manifest_report", "RESCAN_HINT"]

RESCAN_HINT = "`vlmpack scan --rescan` counts every sample again with the new settings"


def manifest_report(config: Config) -> Path:
    """Where each scan drop's reason can be read (the drop gate's line names it): ``manifest.jsonl`` when the
    scan writes it (``data.manifest_jsonl``), else the manifest itself (in the parts layout, its parts)."""
    if config.data.writes_manifest_jsonl:
        return config.work_dir / "manifest.jsonl"
    if config.data.manifest_layout == "parts":
        return parts_dir(config.work_dir)
    return manifest_path(config.work_dir)


def _processor_hashes(directory: str) -> dict[str, str]:
    out = {}
    for path in sorted(Path(directory).rglob("*")):
        if path.is_file():
            out[path.relative_to(directory).as_posix()] = file_sha256(path).hex()[:16]
    return out


_SCANNED = ("wds_dir", "template_text_key")  # of a data.sources entry; its weight / repeat / count are not


def scan_settings(config: Config) -> dict[str, Any]:
    """Config data/model/video/loss sections + every file of the processor directory; not the mixture's rules.
    Flat (``model.processor_kwargs.max_pixels``, ``processor_files.preprocessor_config.json``, ...)."""
    payload = section_fingerprint_payload(config, "data", "model", "video", "loss")
    data = payload["data"]
    # where things go does not change the counts, nor does how much of each source a plan uses
    # nor does where the rows are kept (the layout is checked on its own: scan._open_manifest)
    for name in ("work_dir", "packed_wds_dir", "mix_by", "allow_empty_sources", "manifest_layout", "manifest_jsonl"):
        data.pop(name, None)
    data["sources"] = {source["name"]: {k: source[k] for k in _SCANNED} for source in data["sources"]}
    if not data["sources"]:
        del data["sources"]
    payload["processor_files"] = _processor_hashes(config.model.processor_path)
    payload["scan"] = {
        "decode_check": config.scan.decode_check,  # changes which samples are ok
        "sha256": config.write.check_sources == "sha256",  # the rows then carry each sample's hash
    }
    return flat_settings(payload)


def scan_inputs_fingerprint(config: Config, settings: dict[str, Any] | None = None) -> str:
    return fingerprint(scan_settings(config) if settings is None else settings)


def check_manifest_current(config: Config, manifest: Manifest) -> None:
    """Refuse a config whose counting settings are not the ones the manifest was scanned with, naming each
    changed key with its old and new value, and the scan as the first stage to rerun."""
    recorded = manifest.get_meta("scan_inputs")
    if recorded is None:  # a manifest not made by `vlmpack scan` (hand-built in tests): nothing to compare
        return
    settings = scan_settings(config)
    if scan_inputs_fingerprint(config, settings) == recorded:
        return
    found = changes(json.loads(manifest.get_meta("scan_settings") or "{}"), settings)
    raise StaleArtifactError(stale_message(
        str(manifest_path(config.work_dir)), found,
        f"the token counts depend on these; {RESCAN_HINT}, then rerun bucket, plan and write "
        "(or restore the old values)",
        unnamed="a manifest of an older vlmpack, which did not record its settings by name",
    ))
