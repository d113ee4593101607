"""The ``vlmpack`` command: a thin click layer over the stages.

Each command loads the config, calls its stage's ``run``, prints the summary and
returns an exit code; every ``VlmpackError`` becomes one clear line on stderr.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from . import __version__
from .errors import VlmpackError
from .optional import missing_module_line

__all__ = ["cli", "main"]


class _PipelineGroup(click.Group):
    """Lists the commands in pipeline order (click sorts them by name)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(
    cls=_PipelineGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
)
@click.version_option(__version__, prog_name="vlmpack")
def cli() -> None:
    """Pack vision-language WebDataset shards into exact-length packs, offline.

    Run the stages in order (or all at once with scripts/pack_wds.sh):

    \b
      vlmpack scan   --config C   tars      -> work_dir/manifest.sqlite (+ manifest.parts/)
      vlmpack bucket --config C   manifest  -> work_dir/bins/
      vlmpack plan   --config C   bins      -> work_dir/pack_plan.npz
      vlmpack write  --config C   plan      -> packed_wds_dir/pretrain-*.tar
      vlmpack verify --config C   output    -> checks against manifest and plan
      vlmpack stats  --config C   plan      -> work_dir/stats.json, stats.png

    Around them:

    \b
      vlmpack inspect PACKED_DIR [--pack N]        one pack decoded, as the loader sees it
      vlmpack convert RECORDS --media-root M --out D   LLaVA-style JSON, HF dataset or parquet + media -> shards

    Every stage takes --config FILE and any number of --set SECTION.KEY=VALUE. Relative paths inside
    the config file are relative to the file's folder; relative paths given with --set are relative to
    the current directory. The published offline-packing tool's configs load as they are (keys without
    an effect here are noted once each).
    """


# One module per subcommand under vlmpack_offline/commands/, each exposing `command`; pipeline order.
_COMMANDS: tuple[str, ...] = (
    "scan",
    "bucket",
    "plan",
    "write",
    "verify",
    "stats",
    "inspect",
    "convert",
)


def _register() -> None:
    for name in _COMMANDS:
        command = importlib.import_module(f".commands.{name}", __package__).command
        if not command.short_help and command.help:  # the whole first paragraph, not click's 45 characters
            command.short_help = " ".join(command.help.split("\n\n")[0].split())
        cli.add_command(command)


_register()


def main() -> None:
    # a batch tool reads no keyboard: anything that would prompt (transformers' remote-code question) gets
    # end-of-file at once instead of waiting on a scheduler's open stdin (remote_code.py passes the flag anyway)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - for the life of the process
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except VlmpackError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except ModuleNotFoundError as exc:  # a package imported where it is first needed is missing
        click.echo(f"error: {missing_module_line(exc.name or str(exc))}", err=True)
        sys.exit(1)
