"""Options every subcommand shares, and the one place that turns a stage result into an exit code."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from ..errors import MachineFault

if TYPE_CHECKING:  # loaded when a command runs, so `vlmpack --help` imports no config machinery (numpy)
    from ..config import Config
    from ..stage_result import StageResult

__all__ = ["config_options", "load_from_options", "finish", "run_stage"]


def config_options(func: Callable) -> Callable:
    """Add ``--config`` and repeatable ``--set a.b=value`` to a command."""
    func = click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="SECTION.KEY=VALUE",
        help="Override one config value (YAML syntax), e.g. --set sample.max_token_len=16384. Repeatable. "
        "A relative path given here is relative to the current directory.",
    )(func)
    func = click.option(
        "--config",
        "config_path",
        required=True,
        type=click.Path(dir_okay=False),
        help="YAML config (see configs/config.yaml for every key). Relative paths inside it are relative to "
        "the config file's folder.",
    )(func)
    return func


def load_from_options(config_path: str, overrides: tuple[str, ...]) -> Config:
    from ..config import load_config

    return load_config(config_path, overrides)


def finish(result: StageResult) -> None:
    """Print the stage summary and exit with the stage's code."""
    click.echo(result.render())
    if result.exit_code:
        sys.exit(result.exit_code)


def run_stage(run: Callable[..., StageResult], config_path: str, overrides: tuple[str, ...], **kwargs) -> None:
    """Load the config, run the stage, print its summary and exit with its code.

    Disk full, read-only folders and permission errors become one ``MachineFault`` line naming the
    path (the work and output folders when the error names none) and the fix.
    """
    config = load_from_options(config_path, overrides)
    try:
        result = run(config, **kwargs)
    except (OSError, sqlite3.OperationalError) as exc:
        fault = MachineFault.from_error(exc, f"{config.data.work_dir} or {config.data.packed_wds_dir}")
        if fault is None:
            raise
        raise fault from None
    finish(result)
