"""``vlmpack plan``: bins -> the validated, shuffled pack plan."""

from __future__ import annotations

import click

from ..stages import plan
from ._options import config_options, finish, load_from_options


@click.command("plan")
@config_options
def command(config_path: str, overrides: tuple[str, ...]) -> None:
    """Order the bins into shuffled train/val packs and check them (bins -> work_dir/pack_plan.jsonl)."""
    finish(plan.run(load_from_options(config_path, overrides)))
