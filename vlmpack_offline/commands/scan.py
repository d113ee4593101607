"""``vlmpack scan``: count every sample's exact tokens into work_dir/manifest.sqlite (and its parts)."""

from __future__ import annotations

import click

from ._options import config_options, run_stage

__all__ = ["command"]


@click.command("scan")
@config_options
@click.option(
    "--limit-shards",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Dry run: scan only the first N shards (sorted by path) to try the config. They are kept in the "
    "manifest, which stays unfinished (bucket refuses it) until a run without --limit-shards scans the rest.",
)
@click.option(
    "--rescan",
    is_flag=True,
    help="Count every sample again: replace the manifest (manifest.sqlite, manifest.jsonl and manifest.parts/) "
    "instead of resuming it. Needed after a change of a setting the counts depend on (the refusal names it).",
)
def command(config_path: str, overrides: tuple[str, ...], limit_shards: int | None, rescan: bool) -> None:
    """Count exact tokens of every sample of the WebDataset shards into work_dir/manifest.sqlite
    (with data.manifest_layout: parts, each shard's rows into work_dir/manifest.parts/).

    Runs process.workers processes over shards, commits per shard and resumes after a crash:
    rerun the same command. Bad samples are recorded with a drop reason, never skipped silently.
    A setup error (processor folder, model_type, a worker that cannot start) stops it at once (exit 2).
    """
    from ..stages import scan

    run_stage(scan.run, config_path, overrides, limit_shards=limit_shards, rescan=rescan)
