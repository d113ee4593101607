"""The CLI is a thin, documented layer: every command has help and the shared options."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from vlmpack_offline.cli import cli

COMMANDS = sorted(cli.commands)


def test_group_help_lists_the_stages():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert name in result.output


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help_text_and_config_options(name):
    command = cli.commands[name]
    assert command.help and command.help.strip(), f"`vlmpack {name}` has no help text"
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0
    assert "--config" in result.output
    assert "--set" in result.output


@pytest.mark.parametrize("name", COMMANDS)
def test_a_missing_config_file_is_a_clear_error(name, tmp_path):
    result = CliRunner().invoke(cli, [name, "--config", str(tmp_path / "nope.yaml")])
    assert result.exit_code != 0
    assert "config file not found" in str(result.exception) + result.output
