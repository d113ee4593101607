"""``vlmpack write``: the plan -> packed ``pretrain-*.tar`` shards megatron-energon loads."""

from __future__ import annotations

import click

from ._options import config_options, run_stage

__all__ = ["command"]


@click.command("write")
@config_options
def command(config_path: str, overrides: tuple[str, ...]) -> None:
    """Write one packed sample per planned pack into data.packed_wds_dir/pretrain-%06d.tar.

    Also writes each tar's .tar.idx and .nv-meta/ (dataset.yaml, split.yaml, .info.json).
    Resumable: a rerun after a crash writes only the missing shards.
    """
    from ..stages import write  # imported when the command runs: --help loads no stage

    run_stage(write.run, config_path, overrides)
