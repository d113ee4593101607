"""The training machine needs the video reader's library only where the packed set holds videos.

The write stage records the video items of the samples it packed from (``vlmpack_write.json`` counts); a
loader over a set that recorded none builds and encodes without ``av`` installed (a GPU image without PyAV
trains on image data), while a set with videos still refuses at construction with the one install line:
refused early, never at the first video pack.
"""

from __future__ import annotations

import json
import sys

import pytest

from vlmpack_offline.errors import ConfigError
from vlmpack_offline.loader import PackDataset, PackEncoder
from vlmpack_offline.packed_settings import may_hold
from vlmpack_offline.stages import bucket, plan, scan, write
from vlmpack_offline.synthetic.shards import generate_dataset

TINY_VIDEO = {"min_pixels": 4 * 28 * 28, "max_pixels": 16 * 28 * 28, "min_frames": 4, "fps": 2.0}


@pytest.fixture(scope="module", params=[False, True], ids=["images", "videos"])
def packed(request, tmp_path_factory, qwen25_processor_dir):
    from vlmpack_offline.config import config_from_dict

    root = tmp_path_factory.mktemp("reader")
    generate_dataset(root / "src", seed=5, n_shards=1, samples_per_shard=8, video=request.param)
    config = config_from_dict({
        "data": {"wds_dir": str(root / "src"), "work_dir": str(root / "work"), "packed_wds_dir": str(root / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(qwen25_processor_dir)}},
        "sample": {"max_token_len": 4096}, "video": TINY_VIDEO, "scan": {"max_drop_ratio": 1.0},
    }, source="test")  # fmt: skip
    for stage in (scan, bucket, plan, write):
        assert stage.run(config).exit_code == 0, stage.__name__
    return request.param, root / "packed"


def test_the_write_records_how_many_videos_it_packed_from(packed):
    videos, out = packed
    counts = json.loads((out / ".nv-meta" / "vlmpack_write.json").read_text())["counts"]
    assert (counts["videos"] > 0) == videos
    assert may_hold(out, "videos") == videos


def test_without_av_an_image_set_loads_and_a_video_set_refuses_at_construction(packed, monkeypatch):
    videos, out = packed
    monkeypatch.setitem(sys.modules, "av", None)  # `import av` raises ImportError, as where PyAV is not installed
    if videos:
        with pytest.raises(ConfigError, match=r"reads with av, which is not installed: pip install av$"):
            PackEncoder.from_packed_dir(out)
        return
    batch = next(iter(PackDataset(out, PackEncoder.from_packed_dir(out))))
    assert batch.input_ids.numel() > 0


def test_a_set_written_before_the_count_was_recorded_may_hold_videos(packed, tmp_path):
    _, out = packed
    marker = json.loads((out / ".nv-meta" / "vlmpack_write.json").read_text())
    del marker["counts"]["videos"]
    (tmp_path / ".nv-meta").mkdir()
    (tmp_path / ".nv-meta" / "vlmpack_write.json").write_text(json.dumps(marker))
    assert may_hold(tmp_path, "videos")
