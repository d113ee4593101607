"""The CLI is a thin, documented layer: every command has help and the shared options."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from vlmpack_offline.cli import cli

COMMANDS = sorted(cli.commands)
STAGES = [name for name in COMMANDS if name not in ("inspect", "convert")]  # the commands that take --config


def test_group_help_lists_every_command_with_its_whole_description():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    commands = result.output.split("Commands:")[1]
    flat = " ".join(commands.split())
    for name, command in cli.commands.items():
        first_paragraph = " ".join(command.help.split("\n\n")[0].split())
        assert f"{name} {first_paragraph}" in flat, f"`vlmpack --help` cuts or misses `{name}`"
        assert f"vlmpack {name} " in result.output  # the pipeline diagram names every stage
    listed = [line.split()[0] for line in commands.splitlines() if line.startswith("  ") and line[2] != " "]
    assert listed == ["scan", "bucket", "plan", "write", "verify", "stats", "inspect", "convert"]  # pipeline order


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help_text_and_config_options(name):
    command = cli.commands[name]
    assert command.help and command.help.strip(), f"`vlmpack {name}` has no help text"
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0
    if name in STAGES:
        assert "--config" in result.output
        assert "--set" in result.output


@pytest.mark.parametrize("name", STAGES)
def test_a_missing_config_file_is_a_clear_error(name, tmp_path):
    result = CliRunner().invoke(cli, [name, "--config", str(tmp_path / "nope.yaml")])
    assert result.exit_code != 0
    assert "config file not found" in str(result.exception) + result.output
