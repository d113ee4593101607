"""``vlmpack plan``: bins -> the validated, shuffled pack plan."""

from __future__ import annotations

import click

from ._options import config_options, run_stage


@click.command("plan")
@config_options
def command(config_path: str, overrides: tuple[str, ...]) -> None:
    """Order the bins into shuffled train/val packs and check them (bins -> work_dir/pack_plan.npz; python -m vlmpack_offline.plan_file WORK_DIR exports JSONL)."""
    from ..stages import plan  # imported when the command runs: --help loads no stage

    run_stage(plan.run, config_path, overrides)
