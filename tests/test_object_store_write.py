"""`vlmpack write` with ``data.packed_wds_dir: s3://bucket/prefix`` against a real S3-compatible server
(moto's server mode on 127.0.0.1, tests/_object_store_server.py): the objects are the bytes a local write
gives, the marker says complete only once everything is up, a killed write resumes without uploading
finished shards again, nothing under the prefix that vlmpack did not write is deleted, and every bad
setup is one line."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from _object_store_server import s3_server
from _packed_fixture import build_inputs

from vlmpack_offline.errors import ConfigError, ShardError, StaleArtifactError
from vlmpack_offline.output.object_store import ObjectStoreOutput
from vlmpack_offline.stages import verify, write

BUCKET = "vlmpack-out"
MARKER = ".nv-meta/vlmpack_write.json"


@pytest.fixture
def server(monkeypatch):
    yield from s3_server(monkeypatch)


def _local_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _under(objects: dict[str, bytes], prefix: str) -> dict[str, bytes]:
    return {key.removeprefix(prefix + "/"): data for key, data in objects.items() if key.startswith(prefix + "/")}


def test_the_bucket_holds_the_bytes_of_a_local_write_and_the_staging_folder_is_gone(tmp_path, server):
    inputs = build_inputs(tmp_path, packed_wds={"maxcount": 2})
    local = tmp_path / "local"
    write.run(inputs.with_config(data={"packed_wds_dir": str(local)}))
    server.make_bucket(BUCKET)

    result = write.run(inputs.with_config(data={"packed_wds_dir": f"s3://{BUCKET}/runs/packed"}))

    assert result.exit_code == 0 and result.counts["shards"] >= 3
    assert server.objects(BUCKET) == {f"runs/packed/{name}": data for name, data in _local_files(local).items()}
    assert json.loads(server.objects(BUCKET)[f"runs/packed/{MARKER}"])["complete"] is True
    assert result.summary[0].endswith(f"-> s3://{BUCKET}/runs/packed")
    assert not (inputs.config.work_dir / "write-staging").exists()
    assert not list(tmp_path.rglob("s3:"))  # never a local folder named after the scheme
    again = write.run(inputs.with_config(data={"packed_wds_dir": f"s3://{BUCKET}/runs/packed"}))
    assert again.skipped


def test_kill_9_mid_upload_then_rerun_uploads_only_the_missing_shards(tmp_path, server):
    inputs = build_inputs(tmp_path, n_shards=2, per_shard=12, pack_size=1, blob_bytes=200_000,
                          packed_wds={"maxcount": 1})  # fmt: skip
    local = tmp_path / "local"
    write.run(inputs.with_config(data={"packed_wds_dir": str(local)}))
    server.make_bucket(BUCKET)
    url = f"s3://{BUCKET}/packed"
    config_file = inputs.config_file(tmp_path / "config.yaml", data={"packed_wds_dir": url})
    command = [sys.executable, "-c", "from vlmpack_offline.cli import main; main()", "write", "--config", str(config_file)]
    # SIGKILL right after the second upload (a first shard's index and tar are up: kill_points.py)
    env = {**os.environ, "VLMPACK_TEST_KILL_AT": "write:upload:2"}
    killed = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True, timeout=300)  # fmt: skip - the timeout: a hang guard only
    assert killed.returncode == -signal.SIGKILL
    at_kill = _under(server.objects(BUCKET), "packed")
    shards = sum(1 for name in _local_files(local) if name.endswith(".tar"))
    done_at_kill = sum(1 for name in at_kill if name.endswith(".tar"))
    assert 1 <= done_at_kill < shards
    assert json.loads(at_kill[MARKER])["complete"] is False

    resumed = write.run(inputs.with_config(data={"packed_wds_dir": url}))

    assert resumed.counts["shards_written"] == shards - done_at_kill
    assert _under(server.objects(BUCKET), "packed") == _local_files(local)


def test_an_object_cut_short_under_a_shard_name_is_uploaded_again(tmp_path, server):
    """What a store without atomic objects could leave: the listing's size check catches it."""
    inputs = build_inputs(tmp_path, packed_wds={"maxcount": 2})
    server.make_bucket(BUCKET)
    config = inputs.with_config(data={"packed_wds_dir": f"s3://{BUCKET}/packed"})
    write.run(config)
    reference = server.objects(BUCKET)
    client = server.client()
    marker = json.loads(reference[f"packed/{MARKER}"])
    client.put_object(Bucket=BUCKET, Key=f"packed/{MARKER}", Body=json.dumps({**marker, "complete": False}).encode())
    client.put_object(Bucket=BUCKET, Key="packed/pretrain-000001.tar", Body=reference["packed/pretrain-000001.tar"][:10240])

    resumed = write.run(config)

    assert resumed.counts["shards_written"] == 1
    assert server.objects(BUCKET) == reference


def test_a_rebuild_deletes_only_the_objects_the_marker_lists(tmp_path, server):
    inputs = build_inputs(tmp_path)
    server.make_bucket(BUCKET)
    client = server.client()
    theirs = {"packed/pretrain-000000.tar.orig": b"the user's backup", "packed/notes.txt": b"mine",
              "elsewhere/pretrain-000000.tar": b"not under the prefix"}  # fmt: skip
    for key, data in theirs.items():
        client.put_object(Bucket=BUCKET, Key=key, Body=data)
    url = f"s3://{BUCKET}/packed"
    many = write.run(inputs.with_config(data={"packed_wds_dir": url}, packed_wds={"maxcount": 1}))
    few = write.run(inputs.with_config(data={"packed_wds_dir": url}, packed_wds={"maxcount": 100}))  # rebuilt

    assert few.counts["shards"] < many.counts["shards"]
    objects = server.objects(BUCKET)
    shards = {f"packed/pretrain-{i:06d}.tar" for i in range(few.counts["shards"])}
    ours = shards | {f"{s}.idx" for s in shards} | {f"packed/.nv-meta/{n}" for n in (
        "dataset.yaml", "split.yaml", ".info.json", ".info.yaml", "vlmpack.json", "vlmpack_write.json")}
    assert set(objects) == set(theirs) | ours
    assert all(objects[key] == data for key, data in theirs.items())


def test_a_prefix_holding_objects_named_as_ours_without_our_marker_is_refused_untouched(tmp_path, server):
    inputs = build_inputs(tmp_path)
    server.make_bucket(BUCKET)
    server.client().put_object(Bucket=BUCKET, Key="packed/pretrain-000000.tar", Body=b"someone else's shard")
    before = server.objects(BUCKET)

    with pytest.raises(StaleArtifactError, match=f"s3://{BUCKET}/packed holds objects vlmpack did not record writing "
                                                 r"\(pretrain-000000.tar\)"):  # fmt: skip
        write.run(inputs.with_config(data={"packed_wds_dir": f"s3://{BUCKET}/packed"}))
    assert server.objects(BUCKET) == before


def test_a_bucket_that_does_not_exist_is_one_line_naming_the_url(tmp_path, server):
    inputs = build_inputs(tmp_path)
    with pytest.raises(ConfigError, match="s3://vlmpack-missing/packed.*the bucket does not exist"):
        write.run(inputs.with_config(data={"packed_wds_dir": "s3://vlmpack-missing/packed"}))


def test_no_credentials_is_one_line_naming_what_to_set(tmp_path, server, monkeypatch):
    inputs = build_inputs(tmp_path)
    server.make_bucket(BUCKET)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(ConfigError, match="no credentials for s3://.*AWS_ACCESS_KEY_ID"):
        write.run(inputs.with_config(data={"packed_wds_dir": f"s3://{BUCKET}/packed"}))
    assert server.objects(BUCKET) == {}


def test_an_endpoint_gone_mid_write_is_one_line_and_nothing_is_marked_complete(tmp_path, server, monkeypatch):
    inputs = build_inputs(tmp_path, n_shards=2, per_shard=12, pack_size=1, packed_wds={"maxcount": 1})
    server.make_bucket(BUCKET)
    url = f"s3://{BUCKET}/packed"
    config_file = inputs.config_file(tmp_path / "config.yaml", data={"packed_wds_dir": url})
    command = [sys.executable, "-c", "from vlmpack_offline.cli import main; main()", "write", "--config", str(config_file)]
    env = {**os.environ, "VLMPACK_TEST_KILL_AT": "write:upload:2"}
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
                   timeout=300)  # fmt: skip
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # the discard port: nothing listens there
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    from _object_store_server import _forget_cached_filesystems

    _forget_cached_filesystems()
    with pytest.raises(ShardError, match=f"data.packed_wds_dir .{url}.: .* failed .*check the endpoint "
                                         r"\(AWS_ENDPOINT_URL is http://127.0.0.1:9; .*and the network"):
        write.run(inputs.with_config(data={"packed_wds_dir": url}))
    assert json.loads(server.objects(BUCKET)[f"packed/{MARKER}"])["complete"] is False


def test_the_first_failed_upload_stops_the_write_and_leaves_no_shard_staged(tmp_path, server, monkeypatch):
    """The endpoint goes away once two shards are up: the shards in flight fail, no other shard is written or
    staged, the error says the uploaded ones are kept, and once the endpoint is back the rerun uploads only the
    missing ones."""
    inputs = build_inputs(tmp_path, n_shards=2, per_shard=12, pack_size=1, packed_wds={"maxcount": 1},
                          process={"workers": 2})  # fmt: skip
    local = tmp_path / "local"
    write.run(inputs.with_config(data={"packed_wds_dir": str(local)}))
    shards = sum(1 for name in _local_files(local) if name.endswith(".tar"))
    server.make_bucket(BUCKET)
    url = f"s3://{BUCKET}/packed"
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's own retries: one try per request
    real_upload = ObjectStoreOutput.upload
    tars_up, tried_after = [], []  # shards whose upload went through; uploads tried once the endpoint was gone

    def upload_then_cut(self, local_file, name):  # the trigger only: every byte goes through the real upload
        if server.stopped():
            tried_after.append(name)
        real_upload(self, local_file, name)
        if name.endswith(".tar"):
            tars_up.append(name)
            if len(tars_up) == 2:
                server.stop()

    monkeypatch.setattr(ObjectStoreOutput, "upload", upload_then_cut)

    with pytest.raises(ShardError, match=r"uploading s3://.*failed .*AWS_ENDPOINT_URL.*; the \d+ shards already "
                                         r"uploaded are kept and the rerun uploads only the missing ones") as failed:
        write.run(inputs.with_config(data={"packed_wds_dir": url}))

    assert f"the {len(tars_up)} shards already uploaded" in str(failed.value)  # a shard in flight may get through
    shards_tried_after = {name.removesuffix(".idx") for name in tried_after}
    assert len(shards_tried_after) <= 2  # process.workers: the shards in flight when the endpoint went away
    staging = inputs.config.work_dir / "write-staging"
    assert not [p.name for p in staging.rglob("pretrain-*")]  # a failed shard is not left on disk
    monkeypatch.setattr(ObjectStoreOutput, "upload", real_upload)
    back = server.restart(monkeypatch)
    try:
        resumed = write.run(inputs.with_config(data={"packed_wds_dir": url}))
        assert resumed.counts["shards_written"] == shards - len(tars_up)
        assert _under(back.objects(BUCKET), "packed") == _local_files(local)
    finally:
        back.server.stop()


def test_msc_without_its_profile_is_a_config_error_naming_the_profile_and_msc_config(tmp_path, server, monkeypatch):
    inputs = build_inputs(tmp_path)
    monkeypatch.setenv("MSC_CONFIG", str(tmp_path / "no-such-msc-config.yaml"))
    with pytest.raises(ConfigError, match=r"msc://vlmpack-nowhere/packed.*no profile 'vlmpack-nowhere' \(MSC_CONFIG is "
                                          r".*no-such-msc-config.yaml, which does not exist\)") as no_file:  # fmt: skip
        write.run(inputs.with_config(data={"packed_wds_dir": "msc://vlmpack-nowhere/packed"}))
    monkeypatch.setenv("MSC_CONFIG", str(server.msc_config(tmp_path / "msc.yaml", "vlmpack-other", BUCKET)))
    with pytest.raises(ConfigError, match=r"no profile 'vlmpack-unlisted' \(MSC_CONFIG is .*msc.yaml\): add a profile"):
        write.run(inputs.with_config(data={"packed_wds_dir": "msc://vlmpack-unlisted/packed"}))
    assert "endpoint" not in str(no_file.value) and "kept" not in str(no_file.value)


def test_msc_profile_naming_a_missing_bucket_is_the_config_error_an_s3_url_gives(tmp_path, server, monkeypatch):
    inputs = build_inputs(tmp_path)
    profile = f"vlmpack-nobucket-{tmp_path.name[-8:]}"  # MSC keeps one client per profile name
    monkeypatch.setenv("MSC_CONFIG", str(server.msc_config(tmp_path / "msc.yaml", profile, "vlmpack-missing")))
    with pytest.raises(ConfigError, match=f"msc://{profile}/packed.*the bucket does not exist.*: create it, or fix the "
                                          f"URL \\(or the base_path of MSC profile '{profile}'") as msc:  # fmt: skip
        write.run(inputs.with_config(data={"packed_wds_dir": f"msc://{profile}/packed"}))
    with pytest.raises(ConfigError, match="the bucket does not exist") as s3:
        write.run(inputs.with_config(data={"packed_wds_dir": "s3://vlmpack-missing/packed"}))
    assert msc.value.exit_code == s3.value.exit_code == 2
    assert "kept" not in str(msc.value)


@pytest.mark.parametrize(("wds_dir", "packed", "how"), [
    ("s3://vlmpack-out/in", "s3://vlmpack-out/in/packed", "is inside"),
    ("s3://vlmpack-out//in/*.tar", "s3://vlmpack-out/in/packed/", "is inside"),  # a glob: its fixed part
    ("s3://vlmpack-out/in/", "s3a://vlmpack-out/in", "is the same prefix as"),
    ("s3://vlmpack-out/runs/in", "s3://vlmpack-out/runs", "contains"),
    ("msc://team/in", "msc://team/in/packed", "is inside"),
])  # fmt: skip
def test_a_bucket_output_overlapping_a_bucket_input_is_refused_untouched(tmp_path, server, wds_dir, packed, how):
    inputs = build_inputs(tmp_path)
    server.make_bucket(BUCKET)
    server.client().put_object(Bucket=BUCKET, Key="in/part-000.tar", Body=inputs.source_tars[0].read_bytes())
    before = server.objects(BUCKET)
    said = re.escape(f"data.packed_wds_dir '{packed}' {how} data.wds_dir entry '{wds_dir}'")
    with pytest.raises(ConfigError, match=f"{said}.*point them at separate prefixes"):
        write.run(inputs.with_config(data={"wds_dir": wds_dir, "packed_wds_dir": packed}))
    assert server.objects(BUCKET) == before


@pytest.mark.parametrize(("wds_dir", "packed"), [
    ("s3://vlmpack-out/in", "s3://vlmpack-out/input"),  # a longer name is not a prefix of the folder
    ("s3://vlmpack-out/in", "s3://other-bucket/in/packed"),
    ("s3://vlmpack-out/in", "gs://vlmpack-out/in/packed"),
    ("msc://team/in", "s3://team/in/packed"),  # a profile is not resolved to its bucket
])  # fmt: skip
def test_separate_bucket_prefixes_pass_the_layout_check(tmp_path, wds_dir, packed):
    from vlmpack_offline.output.layout import check_folder_layout

    inputs = build_inputs(tmp_path)
    check_folder_layout(inputs.with_config(data={"wds_dir": wds_dir, "packed_wds_dir": packed}))


@pytest.mark.parametrize("packed", ["s3://vlmpack-out", "s3://vlmpack-out/", "s3://vlmpack-out//", "msc://packed"])
def test_a_bucket_root_is_refused_by_the_config_naming_the_key_and_the_fix(tmp_path, server, packed):
    inputs = build_inputs(tmp_path)
    server.make_bucket(BUCKET)
    bucket = packed.split("://")[1].strip("/")
    with pytest.raises(ConfigError, match=f"data.packed_wds_dir = '{packed}' names a bucket root: write it as "
                                          f"{packed.split('://')[0]}://{bucket}/PREFIX"):  # fmt: skip
        write.run(inputs.with_config(data={"packed_wds_dir": packed}))
    assert server.objects(BUCKET) == {}


def test_verify_reads_the_bucket_and_finds_what_it_finds_in_a_local_folder(tmp_path, server):
    inputs = build_inputs(tmp_path, packed_wds={"maxcount": 2})
    local = inputs.with_config(data={"packed_wds_dir": str(tmp_path / "local")})
    write.run(local)
    server.make_bucket(BUCKET)
    url = f"s3://{BUCKET}/packed"
    config = inputs.with_config(data={"packed_wds_dir": url})
    write.run(config)

    good = verify.run(config)

    assert good.exit_code == 0 and good.summary[-1] == "all checks passed", good.summary
    assert good.counts == verify.run(local).counts
    client = server.client()
    shard = server.objects(BUCKET, "packed/pretrain-000000.tar")["packed/pretrain-000000.tar"]
    with tarfile.open(fileobj=io.BytesIO(shard)) as t:
        media = next(m for m in t.getmembers() if m.name.endswith(".jpg"))
    flipped = bytearray(shard)
    flipped[media.offset_data + media.size // 2] ^= 0xFF
    client.put_object(Bucket=BUCKET, Key="packed/pretrain-000000.tar", Body=bytes(flipped))
    client.delete_object(Bucket=BUCKET, Key="packed/pretrain-000001.tar")

    bad = verify.run(config)

    assert bad.exit_code == 1
    assert any(media.name in line and "sha256 differs" in line for line in bad.summary), bad.summary
    assert "  pretrain-000001.tar: listed in .info.json but missing" in bad.summary
    assert not (inputs.config.work_dir / "verify-staging").exists()  # the local copy is gone


def test_verify_of_a_prefix_never_written_names_the_url(tmp_path, server):
    inputs = build_inputs(tmp_path)
    server.make_bucket(BUCKET)
    result = verify.run(inputs.with_config(data={"packed_wds_dir": f"s3://{BUCKET}/nothing"}))
    assert result.exit_code == 1
    assert result.summary == [f"s3://{BUCKET}/nothing/.nv-meta/.info.json: missing (run `vlmpack write`)"]
