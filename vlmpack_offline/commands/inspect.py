"""``vlmpack inspect``: a packed dataset's splits and counts, or one pack decoded as the loader sees it."""

from __future__ import annotations

import click

__all__ = ["command"]


def _local_folder(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A bucket URL gets a line saying what inspect reads, not click's "Directory does not exist"."""
    if "://" in value:
        raise click.BadParameter(
            f"{value!r} is a URL: inspect reads a local packed folder; copy the prefix down first "
            f"(e.g. `aws s3 cp --recursive {value} ./packed`, or `vlmpack verify --config C` to check it in place)",
            ctx, param,
        )
    return click.Path(file_okay=False, exists=True).convert(value, param, ctx)


@click.command("inspect")
@click.argument("packed_dir", callback=_local_folder)
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
