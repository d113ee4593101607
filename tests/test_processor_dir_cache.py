"""``build_processor_dir`` keeps a fresh build and copies it on later calls: the same files, byte for byte, without
building again; a build into a folder that already held files is not kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlmpack_offline.synthetic import processor_dir
from vlmpack_offline.synthetic.processor_dir import build_processor_dir


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("VLMPACK_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "processor_dirs"


@pytest.mark.parametrize(("family", "layout"), [("qwen2_5_vl", "hub"), ("gemma4", "transformers5")])
def test_a_second_build_is_a_copy_of_the_first(cache, tmp_path, monkeypatch, family, layout):
    first = build_processor_dir(tmp_path / "first", family, layout=layout, video=True)
    assert len(list(cache.iterdir())) == 1

    def no_build(*args, **kwargs):
        raise AssertionError("built again")

    monkeypatch.setattr(processor_dir, "_build", no_build)
    second = build_processor_dir(tmp_path / "second", family, layout=layout, video=True)
    assert second == tmp_path / "second" and _files(second) == _files(first) and _files(first)
    with pytest.raises(AssertionError, match="built again"):  # other arguments: another entry, built
        build_processor_dir(tmp_path / "third", family, layout="hub" if layout != "hub" else "transformers5")


def test_a_build_into_a_folder_with_files_is_not_kept(cache, tmp_path):
    target = tmp_path / "busy"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    build_processor_dir(target, "qwen2_5_vl")
    assert not cache.exists() or not any(cache.iterdir())
    fresh = build_processor_dir(tmp_path / "fresh", "qwen2_5_vl")
    assert "notes.txt" not in _files(fresh) and (target / "notes.txt").read_text() == "mine"
