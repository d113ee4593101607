"""``vlmpack convert``: LLaVA-style JSON / JSONL / HF dataset / parquet + media -> WebDataset shards for ``vlmpack scan``."""

from __future__ import annotations

import click

__all__ = ["command"]


@click.command("convert")
@click.argument("source", type=click.Path(exists=True))
@click.option("--media-root", type=click.Path(file_okay=False),
              help="Folder the records' media paths are relative to (paths leaving it are refused). "
                   "Not needed when every medium is embedded (HF Image() columns).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="New or empty folder for shard-%06d.tar and convert_report.jsonl (point data.wds_dir here).")
@click.option("--split", default=None, help="The split to convert from an HF DatasetDict saved with save_to_disk.")
@click.option("--maxcount", type=click.IntRange(min=1), default=10000, show_default=True, help="Samples per shard at most.")
@click.option("--maxsize", type=click.IntRange(min=1), default=3_000_000_000, show_default=True,
              help="Bytes per shard at most.")  # fmt: skip
def command(source: str, media_root: str | None, out_dir: str, split: str | None, maxcount: int, maxsize: int) -> None:
    """Turn LLaVA-style records (JSON list, JSONL, HF save_to_disk folder or parquet) plus media into shards.

    Each record becomes one sample (its JSON with media renamed to the sample's parts), in any layout the
    scan reads: LLaVA `image`, ShareGPT / LLaMA-Factory `images` / `videos`, HF `messages` with typed items.
    Media are paths under --media-root, or embedded bytes ({"bytes", "path"}, as HF Image() columns store
    them). HF datasets and parquet need `pip install 'vlmpack-offline[hf]'`. Records that cannot be converted
    (missing media, not an object, ...) are listed with their reason in convert_report.jsonl.
    Relative paths are relative to the current directory.
    """
    from ..convert import convert_records

    result = convert_records(source, media_root, out_dir, maxcount=maxcount, maxsize=maxsize, split=split)
    click.echo(result.render())
