"""``vlmpack convert``: LLaVA-style JSON / JSONL + a media folder -> WebDataset shards for ``vlmpack scan``."""

from __future__ import annotations

import click

__all__ = ["command"]


@click.command("convert")
@click.argument("source", type=click.Path(dir_okay=False))
@click.option("--media-root", required=True, type=click.Path(file_okay=False),
              help="Folder the records' media paths are relative to (paths leaving it are refused).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="New or empty folder for shard-%06d.tar and convert_report.jsonl (point data.wds_dir here).")
@click.option("--maxcount", type=click.IntRange(min=1), default=10000, show_default=True, help="Samples per shard at most.")
@click.option("--maxsize", type=click.IntRange(min=1), default=3_000_000_000, show_default=True,
              help="Bytes per shard at most.")  # fmt: skip
def command(source: str, media_root: str, out_dir: str, maxcount: int, maxsize: int) -> None:
    """Turn a LLaVA-style JSON list or JSONL file plus a media folder into WebDataset shards.

    Each record becomes one sample (its JSON with media paths renamed to the sample's parts), in any layout the
    scan reads: LLaVA `image`, ShareGPT / LLaMA-Factory `images` / `videos`, HF `messages` with typed items.
    Records that cannot be converted (missing media, not an object, ...) are listed with their reason in
    convert_report.jsonl. Relative paths are relative to the current directory.
    """
    from ..convert import convert_records

    result = convert_records(source, media_root, out_dir, maxcount=maxcount, maxsize=maxsize)
    click.echo(result.render())
