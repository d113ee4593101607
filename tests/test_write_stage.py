"""`vlmpack write` / `vlmpack verify` on tiny real tars: determinism, resume, splitting, safety, verify."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from _packed_fixture import build_inputs

from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.errors import LengthMismatchError, ShardError, StaleArtifactError
from vlmpack_offline.inspect_pack import summarize
from vlmpack_offline.loader.cooker import cook_packed
from vlmpack_offline.manifest import Manifest, SampleRecord, ShardRecord, manifest_path
from vlmpack_offline.stages import verify, write
from vlmpack_offline.synthetic.shards import SyntheticSample, truncate, write_shard
from vlmpack_offline.tario import read_range, split_key
from vlmpack_offline.tokens import make_counter


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _packs_in(tar_path: Path) -> dict[int, dict]:
    """pack_id -> {"json": dict, parts: bytes} read with plain tarfile."""
    packs: dict[str, dict] = {}
    with tarfile.open(tar_path) as tar:
        for member in tar:
            key, part = split_key(member.name)
            data = tar.extractfile(member).read()
            packs.setdefault(key, {})[part] = json.loads(data) if part == "json" else data
    return {p["json"]["pack_id"]: p for p in packs.values()}


def test_two_writes_give_identical_bytes_whatever_the_worker_count(tmp_path):
    inputs = build_inputs(tmp_path, packed_wds={"maxcount": 2})
    first = write.run(inputs.config)
    other = tmp_path / "packed_again"
    second = write.run(inputs.with_config(data={"packed_wds_dir": str(other)}, process={"workers": 2}))
    assert first.counts["shards"] == second.counts["shards"] >= 3
    assert _hashes(inputs.config.packed_wds_dir) == _hashes(other)
    assert not any(p.name.endswith(".tmp") for p in other.rglob("*"))


def test_rerun_of_a_finished_write_is_a_no_op(tmp_path):
    inputs = build_inputs(tmp_path)
    write.run(inputs.config)
    tar = inputs.config.packed_wds_dir / "pretrain-000000.tar"
    before = tar.stat().st_mtime_ns
    again = write.run(inputs.config)
    assert again.skipped
    assert tar.stat().st_mtime_ns == before


def test_kill_9_mid_write_then_rerun_ends_byte_identical(tmp_path):
    inputs = build_inputs(tmp_path, n_shards=2, per_shard=16, pack_size=1, blob_bytes=1_500_000,
                          packed_wds={"maxcount": 1})
    reference = tmp_path / "reference"
    write.run(inputs.with_config(data={"packed_wds_dir": str(reference)}))
    config_file = inputs.config_file(tmp_path / "config.yaml")
    out = inputs.config.packed_wds_dir
    command = [sys.executable, "-c", "from vlmpack_offline.cli import main; main()", "write", "--config", str(config_file)]
    env = {**os.environ, "VLMPACK_TEST_KILL_AT": "write:shard"}  # SIGKILL once a first tar is in place (kill_points.py)
    killed = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True, timeout=300)  # fmt: skip - the timeout: a hang guard only
    assert killed.returncode == -signal.SIGKILL
    shards = sum(1 for _ in reference.glob("pretrain-*.tar"))
    done_at_kill = sum(1 for _ in out.glob("pretrain-*.tar"))
    assert 1 <= done_at_kill < shards, done_at_kill
    resumed = write.run(inputs.config)
    assert resumed.counts["shards_written"] == shards - done_at_kill
    assert _hashes(out) == _hashes(reference)


def test_a_shard_cut_short_under_its_final_name_is_rewritten_on_resume(tmp_path):
    """What a power loss can leave behind (renamed, not yet flushed): the size check catches it."""
    inputs = build_inputs(tmp_path, packed_wds={"maxcount": 2})
    out = inputs.config.packed_wds_dir
    write.run(inputs.config)
    reference = _hashes(out)
    marker = out / ".nv-meta" / write.MARKER_NAME
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "complete": False}))  # the run never finished
    truncate(out / "pretrain-000001.tar", 10240)
    resumed = write.run(inputs.config)
    assert resumed.counts["shards_written"] == 1
    assert _hashes(out) == reference


@pytest.mark.parametrize(
    ("packed_wds", "check"),
    [
        ({"maxcount": 2}, lambda n_packs, size, limit: n_packs <= 2),
        ({"maxsize": 40_000}, lambda n_packs, size, limit: size <= limit or n_packs == 1),
    ],
)
def test_output_is_split_by_maxcount_and_maxsize(tmp_path, packed_wds, check):
    inputs = build_inputs(tmp_path, blob_bytes=12_000, val_packs=0, packed_wds=packed_wds)
    result = write.run(inputs.config)
    tars = sorted(inputs.config.packed_wds_dir.glob("pretrain-*.tar"))
    assert len(tars) == result.counts["shards"] > 1
    limit = packed_wds.get("maxsize")
    seen = []
    for tar in tars:
        packs = _packs_in(tar)
        assert check(len(packs), tar.stat().st_size, limit)
        seen += sorted(packs)
    assert sorted(seen) == [p.pack_id for p in inputs.packs]
    counts = json.loads((inputs.config.packed_wds_dir / ".nv-meta/.info.json").read_text())["shard_counts"]
    assert counts == {tar.name: len(_packs_in(tar)) for tar in tars}


def test_media_bytes_equal_the_source_bytes_and_keys_carry_no_dot(tmp_path):
    inputs = build_inputs(tmp_path)
    write.run(inputs.config)
    by_id = {}
    for tar in inputs.config.packed_wds_dir.glob("pretrain-*.tar"):
        with tarfile.open(tar) as t:
            assert all("." not in split_key(name)[0] for name in t.getnames())
        for pack in _packs_in(tar).values():
            for sub in pack["json"]["samples"]:
                names = [item[item["type"]] for m in sub["messages"] for item in m["content"]
                         if item["type"] in ("image", "video")]
                by_id[sub["id"]] = [hashlib.sha256(pack[n]).hexdigest() for n in names]
    expected = {i: [hashlib.sha256(b).hexdigest() for b in media] for i, media in inputs.media_in_order.items()}
    assert by_id == expected
    assert sum(len(v) for v in expected.values()) > 5


def test_changed_source_tar_is_refused_with_its_name(tmp_path):
    inputs = build_inputs(tmp_path)
    changed = inputs.source_tars[1]
    os.utime(changed, ns=(0, 12345))
    with pytest.raises(ShardError, match=str(changed)):
        write.run(inputs.config)
    assert not list(inputs.config.packed_wds_dir.glob("pretrain-*"))


def test_stale_output_is_rebuilt_and_foreign_output_refused(tmp_path):
    inputs = build_inputs(tmp_path)
    write.run(inputs.config)
    rebuilt = write.run(inputs.with_config(packed_wds={"maxcount": 1}))
    assert not rebuilt.skipped
    tars = sorted(p.name for p in inputs.config.packed_wds_dir.glob("pretrain-*.tar"))
    assert len(tars) == len(inputs.packs) == rebuilt.counts["shards"]

    foreign = inputs.with_config(data={"packed_wds_dir": str(tmp_path / "foreign")})
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "pretrain-000000.tar").write_bytes(b"someone else's")
    with pytest.raises(StaleArtifactError, match="did not record"):
        write.run(foreign)


def _recount_with_the_scan_counter(config) -> None:
    """Replace the made-up token_len of every ok sample with the scan's real count."""
    counter = make_counter(config)
    with Manifest(manifest_path(config.work_dir)) as manifest:
        for shard in manifest.shards():
            rows = [s for s in manifest.iter_samples() if s.shard == shard.shard]
            with open(shard.path, "rb") as handle:
                fixed = []
                for row in rows:
                    raw_json = read_range(handle, *row.member("json"))
                    conversation = parse_conversation(raw_json, key=row.key, parts=[m[0] for m in row.members])
                    media = [
                        counter.probe(m.kind, read_range(handle, *row.member(m.part)), part=m.part)
                        for m in conversation.media
                    ]
                    count = counter.count(conversation, media)
                    fixed.append(dataclasses.replace(row, token_len=count.token_len, media_tokens=count.media_tokens))
            manifest.write_shard(shard, fixed)


def test_store_token_ids_writes_ids_of_exactly_the_planned_length(tmp_path, qwen25_processor_dir):
    model = {"processor_kwargs": {"pretrained_model_name_or_path": str(qwen25_processor_dir)}}
    inputs = build_inputs(tmp_path, n_shards=1, per_shard=6, model=model)
    config = inputs.with_config(write={"store_token_ids": True})
    _recount_with_the_scan_counter(config)
    with Manifest(manifest_path(config.work_dir)) as manifest:
        lens = {s.id: s.token_len for s in manifest.iter_samples("ok")}
    write.run(config)
    n_packs = 0
    for tar in config.packed_wds_dir.glob("pretrain-*.tar"):
        for pack in _packs_in(tar).values():
            ids = np.load(io.BytesIO(pack["ids.npy"]))
            assert ids.dtype == np.int32 and ids.shape == (2, sum(lens[s["id"]] for s in pack["json"]["samples"]))
            assert 0 < ids[1].sum() < ids.shape[1]  # some assistant tokens, not all
            crude = {"__key__": "k", "__restore_key__": (), **pack, "json": json.dumps(pack["json"]).encode()}
            assert np.array_equal(cook_packed(crude).ids, ids)  # the cooker hands the same ids to the loader
            n_packs += 1
    assert n_packs == len(inputs.packs)
    assert verify.run(config).exit_code == 0


def test_store_token_ids_refuses_a_manifest_whose_counts_do_not_match(tmp_path, qwen25_processor_dir):
    model = {"processor_kwargs": {"pretrained_model_name_or_path": str(qwen25_processor_dir)}}
    inputs = build_inputs(tmp_path, n_shards=1, per_shard=4, model=model)  # made-up token_len values
    with pytest.raises(LengthMismatchError, match="rerun `vlmpack scan`"):
        write.run(inputs.with_config(write={"store_token_ids": True}))


def test_verify_passes_on_good_output(tmp_path):
    inputs = build_inputs(tmp_path)
    write.run(inputs.config)
    result = verify.run(inputs.config)
    assert result.exit_code == 0, result.summary
    assert result.counts["samples"] == sum(len(p.sample_ids) for p in inputs.packs)


def test_verify_fails_on_a_tampered_media_byte(tmp_path):
    inputs = build_inputs(tmp_path)
    write.run(inputs.config)
    tar = inputs.config.packed_wds_dir / "pretrain-000000.tar"
    with tarfile.open(tar) as t:
        member = next(m for m in t.getmembers() if m.name.endswith(".jpg"))
    with open(tar, "r+b") as handle:
        handle.seek(member.offset_data + member.size // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))
    result = verify.run(inputs.config)
    assert result.exit_code != 0
    assert any(member.name in line and "sha256" in line for line in result.summary)


def test_verify_fails_when_an_ok_sample_is_in_no_pack(tmp_path):
    inputs = build_inputs(tmp_path)
    write.run(inputs.config)
    extra = write_shard(tmp_path / "src" / "late.tar", [SyntheticSample(key="late", json={"messages": []})])
    (raw,) = [m for m in tarfile.open(extra).getmembers()]
    with Manifest(manifest_path(inputs.config.work_dir)) as manifest:
        manifest.write_shard(
            ShardRecord(shard="late.tar", path=str(extra), size=extra.stat().st_size,
                        mtime_ns=extra.stat().st_mtime_ns, n_samples=1),
            [SampleRecord(id="late.tar/late", shard="late.tar", seq=0, key="late", media_type="text",
                          token_len=10, media_tokens=0, n_images=0, n_videos=0,
                          members=(("json", raw.offset_data, raw.size),))],
        )
    result = verify.run(inputs.config)
    assert result.exit_code != 0
    assert any("'late.tar/late'" in line and "no pack" in line for line in result.summary)


def test_verify_fails_on_a_wrong_idx(tmp_path):
    inputs = build_inputs(tmp_path)
    write.run(inputs.config)
    idx = inputs.config.packed_wds_dir / "pretrain-000000.tar.idx"
    idx.write_bytes(idx.read_bytes()[:-8])
    result = verify.run(inputs.config)
    assert result.exit_code != 0
    assert any("pretrain-000000.tar.idx" in line for line in result.summary)


def test_inspect_summarizes_what_energon_info_would(tmp_path):
    """dataset.yaml is energon's own CrudeWebdataset (loads without vlmpack); `vlmpack inspect` gives the
    split counts `energon info` would show."""
    inputs = build_inputs(tmp_path, packed_wds={"maxcount": 2})
    write.run(inputs.config)
    root = inputs.config.packed_wds_dir
    assert yaml.safe_load((root / ".nv-meta" / "dataset.yaml").read_text()) == {
        "__module__": "megatron.energon", "__class__": "CrudeWebdataset", "subflavors": {"sample_type": "vlmpack_packed"}}
    meta = root / ".nv-meta"  # energon 5 / 6 read .info.yaml, energon >= 7 .info.json: the same counts
    assert yaml.safe_load((meta / ".info.yaml").read_text()) == json.loads((meta / ".info.json").read_text())
    out = summarize(root)
    n_val = sum(p.split == "val" for p in inputs.packs)
    assert f": {len(inputs.packs)} packs in " in out and "layout (sample_type) vlmpack_packed" in out
    assert f"  val    {n_val:>8} packs in 1 shards ({100 * n_val / len(inputs.packs):.0f}%)" in out


def test_verify_fails_when_the_recorded_settings_are_not_the_configs(tmp_path):
    inputs = build_inputs(tmp_path)
    write.run(inputs.config)
    result = verify.run(inputs.with_config(video={"fps": 1.0}))
    assert result.exit_code != 0
    assert any("video.fps: packed with None, this config has 1.0" in line for line in result.summary)
