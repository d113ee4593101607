"""A missing optional package is one line naming the pip extra that installs it, never a traceback."""

from __future__ import annotations

import sys

import pytest

from vlmpack_offline import cli
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.optional import require


def test_a_missing_optional_package_names_its_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ModuleNotFoundError
    with pytest.raises(ConfigError) as caught:
        require("datasets", "reading an HF save_to_disk folder")
    assert str(caught.value) == ("reading an HF save_to_disk folder needs the `datasets` package, which is not "
                                 "installed: pip install 'vlmpack-offline[hf]'")


def test_an_installed_optional_package_is_returned():
    assert require("yaml", "anything").safe_load("a: 1") == {"a": 1}


def test_the_cli_turns_a_missing_module_into_one_line(monkeypatch, capsys, tmp_path):
    """A package imported where it is first needed (here: the parquet reader of `vlmpack convert`)."""
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    records = tmp_path / "data.parquet"
    records.write_bytes(b"PAR1")
    monkeypatch.setattr(sys, "argv", ["vlmpack", "convert", str(records), "--media-root", str(tmp_path),
                                      "--out", str(tmp_path / "out")])  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        cli.main()
    err = capsys.readouterr().err.strip()
    assert exited.value.code != 0 and "\n" not in err
    assert "needs the `pyarrow` package" in err and "vlmpack-offline[hf]" in err


def test_a_missing_core_dependency_is_one_line_that_says_to_reinstall(monkeypatch, capsys):
    def fails(*_, **__):
        raise ModuleNotFoundError("No module named 'webdataset'", name="webdataset")

    monkeypatch.setattr(cli.cli, "main", fails)
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 1
    assert capsys.readouterr().err == ("error: vlmpack needs the `webdataset` package, a dependency of vlmpack that "
                                       "is not installed: reinstall vlmpack (make install, or pip install "
                                       "vlmpack-offline; docs/install.md)\n")


def test_the_trainer_without_accelerate_names_the_trainer_extra(monkeypatch):
    import vlmpack_offline.loader.adapters.hf_trainer as hf_trainer

    monkeypatch.setitem(sys.modules, "accelerate", None)
    monkeypatch.setattr(hf_trainer, "_TRAINER", {})
    with pytest.raises(ConfigError, match=r"^transformers\.Trainer needs the `accelerate` package, which is not "
                                          r"installed: pip install 'vlmpack-offline\[trainer\]'$"):
        hf_trainer.PackedTrainer  # noqa: B018


def test_frameworks_no_extra_installs_name_their_own_install_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "trl", None)
    with pytest.raises(ConfigError, match=r"needs the `trl` package, which is not installed: pip install trl$"):
        require("trl", "PackedSFTTrainer")
