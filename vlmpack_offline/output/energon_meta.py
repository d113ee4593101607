"""The ``.nv-meta/`` files megatron-energon (>= 7) needs to load our tars, written without a second pass.

::

    packed_wds_dir/
      pretrain-000000.tar  (+ .tar.idx, written with the tar)
      .nv-meta/
        dataset.yaml   __module__: megatron.energon
                       __class__: CrudeWebdataset          (energon's own: loads without vlmpack)
                       subflavors: {sample_type: <sample.sample_type>}   (picks the trainer's cooker)
        split.yaml     split_parts: {train: [pretrain-000000.tar, ...], val: [...]}; exclude: []
        .info.json     {"shard_counts": {"pretrain-000000.tar": 812, ...}}
        .info.yaml     the same as YAML: energon 5 and 6 read only this one (the published tool's trainer
                       pins energon 5), energon >= 7 prefers .info.json

This is what the published offline-packing tool writes, so its trainer and any energon (>= 7)
install load the folder as it is. ``energon info`` cannot read a crude dataset.yaml (it looks up a
top-level ``sample_type``, which ``CrudeWebdataset`` refuses): ``vlmpack inspect`` shows the same
split counts (docs/format.md).

energon's loader reads only these and the ``.tar.idx`` files; its ``index.sqlite``
is needed only for auxiliary / joined datasets, so it is built only on request
(``write.energon_prepare``) through energon's own ``WebdatasetPreparator``.
``.info.json`` leaves out ``energon_version`` (optional in energon's schema) so the
output bytes do not depend on the installed energon.
"""

from __future__ import annotations

import json
import struct
import tarfile
from collections.abc import Iterator
from pathlib import Path

import yaml

from ..artifacts import atomic_write_text

__all__ = [
    "META_DIR",
    "write_dataset_yaml",
    "write_split_yaml",
    "write_info_json",
    "INFO_FILES",
    "read_shard_counts",
    "read_split_parts",
    "read_dataset_yaml",
    "written_layout",
    "energon_idx_offsets",
    "read_idx",
    "energon_members",
    "run_energon_prepare",
]

META_DIR = ".nv-meta"


def write_dataset_yaml(out_dir: Path, sample_type: str) -> None:
    """energon's own ``CrudeWebdataset``; the subflavor ``sample_type`` (``sample.sample_type``) picks the cooker."""
    body = {"__module__": "megatron.energon", "__class__": "CrudeWebdataset", "subflavors": {"sample_type": sample_type}}
    atomic_write_text(out_dir / META_DIR / "dataset.yaml", yaml.safe_dump(body, sort_keys=False))


def write_split_yaml(out_dir: Path, split_parts: dict[str, list[str]]) -> None:
    body = {"split_parts": split_parts, "exclude": []}
    atomic_write_text(out_dir / META_DIR / "split.yaml", yaml.safe_dump(body, sort_keys=False))


INFO_FILES = (".info.json", ".info.yaml")


def write_info_json(out_dir: Path, shard_counts: dict[str, int]) -> None:
    """``.info.json`` and ``.info.yaml`` with the same ``shard_counts`` (see the module doc)."""
    body = {"shard_counts": shard_counts}
    atomic_write_text(out_dir / META_DIR / ".info.json", json.dumps(body, indent=2) + "\n")
    atomic_write_text(out_dir / META_DIR / ".info.yaml", yaml.safe_dump(body, sort_keys=False))


def read_shard_counts(out_dir: Path) -> dict[str, int]:
    return json.loads((out_dir / META_DIR / ".info.json").read_text())["shard_counts"]


def read_dataset_yaml(out_dir: Path) -> dict | None:
    """``.nv-meta/dataset.yaml`` as data, or None when the folder has none."""
    path = Path(out_dir) / META_DIR / "dataset.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else None


def written_layout(body: dict | None) -> str | None:
    """The layout (``subflavors.sample_type``) a dataset.yaml body records."""
    return ((body or {}).get("subflavors") or {}).get("sample_type")


def read_split_parts(out_dir: Path) -> dict[str, list[str]]:
    return yaml.safe_load((out_dir / META_DIR / "split.yaml").read_text())["split_parts"]


def energon_idx_offsets(tar_path: Path) -> list[int]:
    """The offsets energon's prepare would write for ``tar_path``, read back from the tar itself.

    Same rule as ``WebdatasetPreparator._preprocess_tar``: the header offset of the
    first member of each new key, then the offset after the last member.
    """

    offsets: list[int] = []
    last_key = None
    with tarfile.open(tar_path, mode="r:") as tar:
        for member, key, _part in energon_members(tar):
            if key != last_key:
                offsets.append(member.offset)
                last_key = key
        offsets.append(tar.offset)
    return offsets


def energon_members(tar: tarfile.TarFile) -> Iterator[tuple[tarfile.TarInfo, str, str]]:
    """``(member, key, part)`` of every member energon reads (its own skip and name rules), in tar order."""
    from megatron.energon.flavors.webdataset.config import skip_meta_re, split_name_re

    for member in tar:
        if not member.isreg() or skip_meta_re.match(member.name):
            continue
        match = split_name_re.match(member.name)
        if match is not None:
            key, part = match.groups()
            yield member, key, part


def read_idx(idx_path: Path) -> list[int]:
    raw = idx_path.read_bytes()
    return list(struct.unpack(f"{len(raw) // 8}Q", raw[: len(raw) // 8 * 8]))


def run_energon_prepare(out_dir: Path, split_parts: dict[str, list[str]], workers: int) -> None:
    """Build energon's ``index.sqlite`` with its own preparator, keeping our split.yaml and .info.json.

    energon rewrites ``.tar.idx`` (same bytes) and ``.info.json`` (adds its version);
    the split it derives goes to a scratch file that is removed, then our files are restored.
    """
    from megatron.energon.flavors.webdataset.prepare import WebdatasetPreparator

    shard_counts = read_shard_counts(out_dir)
    scratch = "split.energon-prepare.yaml"
    patterns = [(name, "^$") for name in split_parts]
    WebdatasetPreparator.prepare_dataset(
        out_dir, list(shard_counts), split_parts_patterns=patterns, split_config=scratch, workers=workers
    )
    (out_dir / META_DIR / scratch).unlink(missing_ok=True)
    write_info_json(out_dir, shard_counts)
    write_split_yaml(out_dir, split_parts)
