"""Shards given as URLs are read through fsspec by byte range, with the locators a local path gives."""

from __future__ import annotations

import os
from pathlib import Path

import fsspec
import pytest

from vlmpack_offline.stages import bucket, plan, scan, verify, write
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, truncate, write_shard
from vlmpack_offline.tario import iter_samples, open_source, read_range, source_stat


@pytest.fixture
def shard(tmp_path) -> Path:
    samples = [SyntheticSample(key=f"sub/k{i}", json={"messages": [{"role": "user", "content": f"q{i}"}]},
                               media={"img0.jpg": image_bytes(20 + i, 16, seed=i)}) for i in range(3)]  # fmt: skip
    return write_shard(tmp_path / "wds" / "a.tar", samples)


@pytest.fixture
def memory_url(shard):
    """The same bytes at ``memory://<unique>/wds/a.tar``, removed afterwards."""
    fs = fsspec.filesystem("memory")
    root = f"/vlmpack-test-{os.getpid()}-{shard.parent.parent.name}"
    fs.pipe(f"{root}/wds/a.tar", shard.read_bytes())
    yield f"memory://{root}/wds/a.tar"
    fs.rm(root, recursive=True)


def _read_all(path) -> list[tuple[str, str, int, int, bytes]]:
    with open_source(path) as handle:
        return [(s.key, m.part, m.offset, m.size, read_range(handle, m.offset, m.size))
                for s in iter_samples(path) for m in s.members]  # fmt: skip


def test_memory_and_file_urls_give_the_local_members_and_bytes(shard, memory_url):
    local = _read_all(shard)
    assert len(local) == 6 and local[1][4][:2] == b"\xff\xd8"  # 3 samples x (json, jpg); JPEG bytes
    assert _read_all(memory_url) == local
    assert _read_all(shard.as_uri()) == local  # file:///...


def test_source_stat_of_urls(shard, memory_url):
    assert source_stat(shard) == (os.stat(shard).st_size, os.stat(shard).st_mtime_ns)
    assert source_stat(memory_url)[0] == source_stat(shard.as_uri())[0] == shard.stat().st_size
    with pytest.raises(FileNotFoundError):
        source_stat(memory_url + ".missing")


def test_a_truncated_shard_behind_a_url_keeps_the_samples_before_the_cut(shard, memory_url):
    truncate(shard, shard.stat().st_size - 3000)  # cuts into the last sample
    fsspec.filesystem("memory").pipe(memory_url.removeprefix("memory://"), shard.read_bytes())
    problems = [s.problem for s in iter_samples(memory_url)]
    assert problems == [s.problem for s in iter_samples(shard)]
    assert problems[0] is None and problems[-1] == "truncated_shard"


def test_url_folders_are_discovered_with_the_local_names(shard, memory_url):
    local = scan.discover_shards(str(shard.parent.parent))
    remote = scan.discover_shards(memory_url.rsplit("/", 2)[0])
    assert [t.shard for t in remote] == [t.shard for t in local] == ["wds/a.tar"]
    assert remote[0].path == memory_url


def test_scan_of_file_urls_equals_the_scan_of_paths(tmp_path, shard, make_config):
    by_path = scan.run(make_config(wds_dir=shard.parent))
    config = make_config(wds_dir=shard.parent.as_uri(), data={"work_dir": str(tmp_path / "work_url")})
    by_url = scan.run(config)
    assert by_url.counts == by_path.counts
    assert (tmp_path / "work_url" / "manifest.jsonl").read_bytes() == (tmp_path / "work" / "manifest.jsonl").read_bytes()


def _pipeline(config) -> dict[str, bytes]:
    """scan -> bucket -> plan -> write -> verify; the packed folder's files by name."""
    for stage in (scan, bucket, plan, write, verify):
        result = stage.run(config)
        assert result.exit_code == 0, (stage.__name__, result.summary)
    out = config.packed_wds_dir
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture
def two_shards(tmp_path) -> Path:
    """Two shards with images, text-only samples and a two-image sample: several packs and shards."""
    root = tmp_path / "wds"
    for n in range(2):
        samples = [
            SyntheticSample(
                key=f"k{n}_{i}",
                json={"messages": [{"role": "user", "content": [{"type": "image", "image": "img0.jpg"},
                                                                 {"type": "text", "text": f"q{i}"}]},
                                   {"role": "assistant", "content": f"a{i}"}]},
                media={"img0.jpg": image_bytes(30 + 7 * i, 20 + 3 * i, seed=n * 10 + i)},
            )
            for i in range(5)
        ] + [SyntheticSample(key=f"t{n}", json={"messages": [{"role": "user", "content": "hi"},
                                                              {"role": "assistant", "content": "yo"}]})]  # fmt: skip
        write_shard(root / f"part-{n}.tar", samples)
    return root


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_write_and_verify_from_urls_give_the_bytes_of_local_paths(tmp_path, two_shards, make_config, scheme):
    settings = {"sample": {"max_token_len": 128}, "packed_wds": {"maxcount": 1}}
    local = _pipeline(make_config(wds_dir=two_shards, **settings))
    if scheme == "memory":
        fs = fsspec.filesystem("memory")
        root = f"/vlmpack-test-{os.getpid()}-{tmp_path.name}/wds"
        for tar in sorted(two_shards.glob("*.tar")):
            fs.pipe(f"{root}/{tar.name}", tar.read_bytes())
        url = f"memory://{root}"
    else:
        url = two_shards.as_uri()
    data = {"work_dir": str(tmp_path / "work_url"), "packed_wds_dir": str(tmp_path / "packed_url")}
    try:
        remote = _pipeline(make_config(wds_dir=url, data=data, **settings))
    finally:
        if scheme == "memory":
            fsspec.filesystem("memory").rm(root.rsplit("/", 1)[0], recursive=True)
    assert sum(name.endswith(".tar") for name in local) >= 3
    differ = [name for name in local if remote.get(name) != local[name]]
    # vlmpack.json records the source folder and the write marker that file's hash; shards, indexes,
    # dataset.yaml, split.yaml and .info.json must be the same bytes
    assert set(differ) <= {".nv-meta/vlmpack.json", ".nv-meta/vlmpack_write.json"}, differ
    assert set(remote) == set(local)
