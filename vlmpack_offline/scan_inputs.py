"""What the scan's rows depend on, as one fingerprint: the scan records it, write checks it.

Its own light module, so ``vlmpack write`` can check a config against the manifest without
importing the scan stage (and with it torch, transformers and every family module).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .artifacts import fingerprint
from .config import Config, section_fingerprint_payload

__all__ = ["scan_inputs_fingerprint"]


def _processor_hashes(directory: str) -> dict[str, str]:
    out = {}
    for path in sorted(Path(directory).rglob("*")):
        if path.is_file():
            out[path.relative_to(directory).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


_SCANNED = ("name", "wds_dir", "template_text_key")  # of a data.sources entry; its weight / repeat / count are not


def scan_inputs_fingerprint(config: Config) -> str:
    """Config data/model/video/loss sections + every file of the processor directory; not the mixture's rules."""
    payload = section_fingerprint_payload(config, "data", "model", "video", "loss")
    data = payload["data"]
    # where things go does not change the counts, nor does how much of each source a plan uses
    for name in ("work_dir", "packed_wds_dir", "mix_by", "allow_empty_sources"):
        data.pop(name, None)
    data["sources"] = [{k: source[k] for k in _SCANNED} for source in data["sources"]]
    if not data["sources"]:
        del data["sources"]
    payload["processor_files"] = _processor_hashes(config.model.processor_path)
    payload["decode_check"] = config.scan.decode_check  # changes which samples are ok
    payload["sha256"] = config.write.check_sources == "sha256"  # the rows then carry each sample's hash
    return fingerprint(payload)
