"""Is every artifact before a stage built from this config? If not: which settings changed, and what to rerun.

The chain is ``manifest.sqlite`` (scan) -> ``bins/`` (bucket) -> ``pack_plan`` (plan); each records the
settings it was built from by name (``provenance``). A stage checks the links before its own, oldest
first, so the message names the first stage to rerun: a changed ``max_pixels`` makes ``bucket`` say
"rescan", not "up to date", and ``write`` say the same instead of writing packs of stale lengths.
"""

from __future__ import annotations

from ..config import Config
from ..errors import StaleArtifactError
from ..manifest import Manifest, manifest_path
from ..plan_file import plan_path, read_plan_meta
from ..provenance import changes, stale_message
from ..scan_inputs import check_manifest_current
from ._ok_samples import manifest_fingerprint
from .bucket import bins_dir, bins_fingerprint, bins_settings, read_bins_meta

__all__ = ["check_upstream"]

def check_upstream(config: Config, stage: str) -> None:
    """Refuse (``StaleArtifactError``) when an artifact ``stage`` reads, or one before it, was built from
    other settings or from an older upstream artifact. ``stage``: bucket, plan or write."""
    path = manifest_path(config.work_dir)
    if not path.is_file():
        raise StaleArtifactError(f"no manifest at {path}: run `vlmpack scan --config {config.source}` first")
    with Manifest(path) as manifest:
        check_manifest_current(config, manifest)
    if stage == "plan":
        _check_bins(config)
    if stage == "write" and "settings" in (read_plan_meta(config.work_dir) or {}):
        # a plan made by `vlmpack plan` (one written by hand, as in tests, records no settings: nothing to compare)
        _check_bins(config)
        _check_plan(config)


def _check_bins(config: Config) -> None:
    meta = read_bins_meta(config)
    if meta is None:
        raise StaleArtifactError(f"no bins in {bins_dir(config)}: run `vlmpack bucket --config {config.source}` first")
    manifest_fp = manifest_fingerprint(config.work_dir)
    if meta.get("fingerprint") == bins_fingerprint(config, manifest_fp):
        return
    rescanned = meta.get("manifest_fingerprint", manifest_fp) != manifest_fp
    raise StaleArtifactError(stale_message(
        str(bins_dir(config)), changes(meta.get("settings", {}), bins_settings(config)),
        "rerun `vlmpack bucket`, then plan and write",
        unnamed="the manifest was scanned again since" if rescanned else "bins of an older vlmpack",
    ))


def _check_plan(config: Config) -> None:
    from .plan import plan_fingerprint, plan_settings  # plan imports the packing code: only write gets here

    meta = read_plan_meta(config.work_dir)
    if meta is None or not plan_path(config.work_dir).is_file():
        raise StaleArtifactError(f"no finished plan in {config.work_dir}: run `vlmpack plan --config {config.source}` "
                                 "first")
    bins_fp, expected = plan_fingerprint(config)
    if meta.get("fingerprint") == expected:
        return
    raise StaleArtifactError(stale_message(
        str(plan_path(config.work_dir)), changes(meta.get("settings", {}), plan_settings(config)),
        "rerun `vlmpack plan`, then write",
        unnamed=("the bins were rebuilt since (`vlmpack bucket` ran again)" if meta.get("bins_fingerprint") != bins_fp
                 else "a plan of an older vlmpack"),
    ))
