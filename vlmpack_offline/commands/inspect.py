"""``vlmpack inspect``: a packed dataset's splits and counts, or one pack decoded as the loader sees it."""

from __future__ import annotations

import click

__all__ = ["command"]


@click.command("inspect")
@click.argument("packed_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--pack", "pack_id", type=int, default=None, metavar="N", help="Show the pack with this pack id.")
@click.option("--render", is_flag=True, help="Also print each sub-sample's chat text, media shown as <image PART>.")
@click.option("--processor", type=click.Path(file_okay=False), default=None,
              help="The processor folder on this machine, when it is not where the packs recorded it.")  # fmt: skip
def command(packed_dir: str, pack_id: int | None, render: bool, processor: str | None) -> None:
    """Look inside a packed dataset: splits, packs and settings, or one pack with its sub-samples.

    With --pack N: each sub-sample's source id, token length, media and the text it learns (decoded from
    the loader's own labels), and with --render its whole chat text.
    """
    from ..inspect_pack import describe_pack, summarize

    if pack_id is None:
        click.echo(summarize(packed_dir))
    else:
        click.echo(describe_pack(packed_dir, pack_id, processor=processor, render=render))
