"""Configs are validated once: unknown keys and wrong types are errors naming file and key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from vlmpack_offline.config import Config, load_config
from vlmpack_offline.errors import ConfigError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PROC = "model.processor_kwargs.pretrained_model_name_or_path=/opt/some/processor"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_unknown_key_error_names_the_key_and_the_file(tmp_path):
    path = _write(tmp_path, "sample:\n  max_token_len: 4096\n  max_tokenlen: 10\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "sample.max_tokenlen" in str(info.value)
    assert str(path) in str(info.value)


def test_unknown_section_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="packinq"):
        load_config(_write(tmp_path, "packinq:\n  seed: 1\n"))


@pytest.mark.parametrize(
    ("text", "key", "value", "expected"),
    [
        ("sample:\n  max_token_len: lots\n", "sample.max_token_len", "'lots'", "int"),
        ("process:\n  workers: true\n", "process.workers", "True", "int"),
        ("packing:\n  algorithm: random_fit\n", "packing.algorithm", "'random_fit'", "'best_fit_decreasing'"),
    ],
)
def test_mistyped_value_error_names_key_value_and_expected_type(tmp_path, text, key, value, expected):
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text))
    message = str(info.value)
    assert key in message and value in message and expected in message
    assert "<class" not in message


def test_set_override_parses_value_as_yaml_and_wins_over_file(tmp_path):
    path = _write(tmp_path, "sample:\n  max_token_len: 4096\n")
    config = load_config(path, ("sample.max_token_len=2048", "packing.max_samples_per_pack=8", "split.val_ratio=0.25"))
    assert config.sample.max_token_len == 2048
    assert config.packing.max_samples_per_pack == 8
    assert config.split.val_ratio == 0.25


def test_an_int_written_as_a_float_names_its_digits_and_digits_with_underscores_load(tmp_path):
    """YAML reads ``1e8`` as a string and ``1.0e8`` as a float: refused, with the value to write instead."""
    path = _write(tmp_path, "{}\n")
    for written in ("1e8", "1.0e8"):
        with pytest.raises(ConfigError, match=r"packing.partition_samples.*write it in digits: 100_000_000"):
            load_config(path, (f"packing.partition_samples={written}",))
    with pytest.raises(ConfigError) as info:
        load_config(path, ("packing.partition_samples=1.5",))
    assert "digits" not in str(info.value)
    assert load_config(path, ("packing.partition_samples=100_000_000",)).packing.partition_samples == 100_000_000


def test_override_of_unknown_key_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="sample.nope"):
        load_config(_write(tmp_path, "{}\n"), ("sample.nope=1",))


def test_relative_data_paths_resolve_against_the_config_folder(tmp_path):
    config = load_config(_write(tmp_path, "data:\n  wds_dir: shards\n  work_dir: ../work\n"))
    assert config.data.wds_dir == str(tmp_path / "shards")
    assert config.data.work_dir == str((tmp_path / ".." / "work").resolve())


def test_reference_config_lists_every_key_with_its_default():
    config = load_config(CONFIGS / "config.yaml", (PROC,))
    defaults = Config()
    for section in dataclasses.fields(Config):
        if section.name in ("source", "notices"):
            continue
        loaded = dataclasses.asdict(getattr(config, section.name))
        expected = dataclasses.asdict(getattr(defaults, section.name))
        if section.name == "model":
            expected["processor_kwargs"] = {"pretrained_model_name_or_path": "/opt/some/processor"}
        assert loaded == expected, section.name
    text = (CONFIGS / "config.yaml").read_text()
    for section in dataclasses.fields(Config):
        if section.name in ("source", "notices"):
            continue
        for key in dataclasses.fields(getattr(defaults, section.name)):
            assert f"  {key.name}:" in text, f"configs/config.yaml does not document {section.name}.{key.name}"


def test_demo_config_points_at_the_demo_output_next_to_configs():
    config = load_config(CONFIGS / "demo.yaml")
    root = CONFIGS.parent / "demo_out"
    assert Path(config.data.wds_dir) == root / "data"
    assert Path(config.model.processor_path) == root / "processor"
    assert config.sample.max_token_len == 4096


def test_set_paths_are_relative_to_the_current_directory_file_paths_to_the_file(tmp_path, monkeypatch):
    folder = tmp_path / "configs"
    folder.mkdir()
    path = folder / "c.yaml"
    path.write_text("data:\n  wds_dir: shards\n  work_dir: work\n")
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    config = load_config(path, ("data.work_dir=my_work", "data.packed_wds_dir=../out"))
    assert config.data.wds_dir == str(folder / "shards")  # from the file: the file's folder
    assert config.data.work_dir == str(cwd / "my_work")  # from --set: the current directory
    assert config.data.packed_wds_dir == str(tmp_path / "out")


def test_help_states_the_relative_path_rule():
    from click.testing import CliRunner

    from vlmpack_offline.cli import cli

    top = " ".join(CliRunner().invoke(cli, ["--help"]).output.split())
    assert "relative paths given with --set are relative to the current directory" in top
    assert "Relative paths inside the config file are relative to the file's folder" in top
    scan_help = " ".join(CliRunner().invoke(cli, ["scan", "--help"]).output.split())
    assert "relative to the config file's folder" in scan_help and "relative to the current directory" in scan_help


def test_published_log_level_sets_the_package_level(tmp_path):
    import logging

    logger = logging.getLogger("vlmpack_offline")
    before = logger.level
    try:
        config = load_config(_write(tmp_path, "log:\n  level: DEBUG\n  file: /tmp/x.log\n"))
        assert logger.level == logging.DEBUG
        assert [n.split("`")[1] for n in config.notices] == ["log.file"]
    finally:
        logger.setLevel(before)
    with pytest.raises(ConfigError, match="log.level"):
        load_config(_write(tmp_path, "log:\n  level: LOUD\n"))
