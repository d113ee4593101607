"""The documentation site builds in strict mode, and a broken link or anchor fails that build.

``make docs`` runs ``mkdocs build --strict`` without ``--quiet``: quiet sets the ``mkdocs`` logger to
errors only, so strict mode's warning counter never sees a broken anchor and the build passes. These
build the site through mkdocs' own API, with its logger at its default level, as ``make docs`` does.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

mkdocs_build = pytest.importorskip("mkdocs.commands.build")  # the docs extra: .venv has it, .venv-ref does not
from mkdocs.config import load_config  # noqa: E402
from mkdocs.exceptions import Abort  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _site(tmp_path: Path) -> Path:
    """A copy of mkdocs.yml and docs/ to change and build."""
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    return tmp_path / "mkdocs.yml"


def _build(config_file: Path, site: Path) -> None:
    logging.getLogger("mkdocs").setLevel(logging.WARNING)  # what the CLI sets without --quiet (and with --strict)
    mkdocs_build.build(load_config(str(config_file), site_dir=str(site), strict=True))


def test_the_docs_build_in_strict_mode(tmp_path):
    _build(_site(tmp_path), tmp_path / "site")
    assert (tmp_path / "site" / "switch" / "index.html").is_file()


@pytest.mark.parametrize("link", ["format.md#no-such-heading", "no_such_page.md"])
def test_a_broken_anchor_or_link_fails_the_build(tmp_path, link):
    config_file = _site(tmp_path)
    page = tmp_path / "docs" / "switch.md"
    page.write_text(page.read_text() + f"\nSee [this]({link}).\n")
    with pytest.raises(Abort, match="strict mode"):
        _build(config_file, tmp_path / "site")


def test_make_docs_does_not_hide_the_warnings_strict_mode_counts():
    recipe = (REPO / "Makefile").read_text().split("\ndocs:", 1)[1].split("\n\n", 1)[0]
    assert "mkdocs build --strict" in recipe and "--quiet" not in recipe and " -q" not in recipe
