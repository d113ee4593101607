"""Options every subcommand shares, and the one place that turns a stage result into an exit code."""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from ..config import Config, load_config
from ..stage_result import StageResult

__all__ = ["config_options", "load_from_options", "finish"]


def config_options(func: Callable) -> Callable:
    """Add ``--config`` and repeatable ``--set a.b=value`` to a command."""
    func = click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="SECTION.KEY=VALUE",
        help="Override one config value (YAML syntax), e.g. --set sample.max_token_len=16384. Repeatable.",
    )(func)
    func = click.option(
        "--config",
        "config_path",
        required=True,
        type=click.Path(dir_okay=False),
        help="YAML config (see configs/config.yaml for every key).",
    )(func)
    return func


def load_from_options(config_path: str, overrides: tuple[str, ...]) -> Config:
    return load_config(config_path, overrides)


def finish(result: StageResult) -> None:
    """Print the stage summary and exit with the stage's code."""
    click.echo(result.render())
    if result.exit_code:
        sys.exit(result.exit_code)
