"""One config from scan to training: ``vlmpack write`` records the plan's settings, the loader is built from them.

The real stages (scan -> bucket -> plan -> write) run once on a small generated
dataset with images and videos; ``PackEncoder.from_packed_dir`` alone (no config)
must then reproduce every planned length, and any setting that contradicts the
recorded ones (config value or processor file) is refused with the field named.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from vlmpack_offline.config import Config, config_from_dict
from vlmpack_offline.errors import ConfigError, StaleArtifactError
from vlmpack_offline.loader import PackEncoder, iter_cooked_packs, packed_shards
from vlmpack_offline.packed_settings import check_against_packed_dir
from vlmpack_offline.plan_file import Pack, read_plan
from vlmpack_offline.stages import bucket, plan, scan, write
from vlmpack_offline.synthetic.shards import generate_dataset

TINY_VIDEO = {"min_pixels": 4 * 28 * 28, "max_pixels": 16 * 28 * 28, "min_frames": 4, "fps": 2.0}


@dataclass(frozen=True, slots=True, kw_only=True)
class Written:
    config: Config
    packs: dict[int, Pack]  # pack_plan.jsonl by pack_id


@pytest.fixture(scope="module")
def written(tmp_path_factory, qwen25_processor_dir) -> Written:
    root = tmp_path_factory.mktemp("packed_settings")
    generate_dataset(root / "src", seed=5, n_shards=1, samples_per_shard=10)
    config = config_from_dict(
        {
            "data": {"wds_dir": str(root / "src"), "work_dir": str(root / "work"), "packed_wds_dir": str(root / "packed")},
            "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(qwen25_processor_dir)}},
            "sample": {"max_token_len": 4096},
            "split": {"val_ratio": 0.25},
            "packed_wds": {"maxcount": 2},
            "video": TINY_VIDEO,
            "scan": {"max_drop_ratio": 1.0},  # one generated sample is longer than 4096 tokens: dropped, not the point
        },
        source="test",
    )
    for stage in (scan, bucket, plan, write):
        assert stage.run(config).exit_code == 0, stage.__name__
    return Written(config=config, packs={p.pack_id: p for p in read_plan(config.work_dir)})


def _settings(config: Config) -> dict:
    return json.loads((config.packed_wds_dir / ".nv-meta" / "vlmpack.json").read_text())


def test_settings_file_records_the_scan_sections_and_processor_hashes(written):
    stored = _settings(written.config)
    assert stored["video"] == dataclasses.asdict(written.config.video)
    assert stored["sample"] == {"max_token_len": 4096, "sample_type": "vlmpack_packed"}
    assert stored["model"]["model_type"] == "qwen2_5_vl"  # resolved from config.json
    assert {"tokenizer.json", "chat_template.jinja", "preprocessor_config.json", "config.json"} <= set(
        stored["processor"]["files"]
    )


def test_encoder_from_packed_dir_alone_reproduces_every_planned_length(written):
    encoder = PackEncoder.from_packed_dir(written.config.packed_wds_dir)
    seen, media_kinds = [], set()
    for cooked in iter_cooked_packs(packed_shards(written.config.packed_wds_dir)):
        batch = encoder.encode(cooked.pack, cooked.media)  # LengthMismatchError if any sub-sample is off
        lengths = tuple((batch.cu_seqlens[1:] - batch.cu_seqlens[:-1]).tolist())
        assert lengths == written.packs[batch.pack_id].sample_token_lens
        media_kinds |= {"image"} if int(batch.n_images_per_sample.sum()) else set()
        media_kinds |= {"video"} if int(batch.n_videos_per_sample.sum()) else set()
        seen.append(batch.pack_id)
    assert sorted(seen) == sorted(written.packs)
    assert media_kinds == {"image", "video"}


@pytest.mark.parametrize(
    ("override", "field", "packed", "given"),
    [
        ({"video": {"fps": 1.0}}, "video.fps: packed with 2.0, this config has 1.0", "2.0", "1.0"),
        ({"model": {"processor_kwargs": {"min_pixels": 1024}}}, "model.processor_kwargs.min_pixels", "(not set)", "1024"),
        ({"model": {"model_type": "qwen2_vl"}}, "model.model_type", "'qwen2_5_vl'", "'qwen2_vl'"),
    ],
)
def test_a_contradicting_setting_is_refused_naming_field_and_both_values(written, override, field, packed, given):
    with pytest.raises(ConfigError) as caught:
        PackEncoder.from_packed_dir(written.config.packed_wds_dir, **override)
    message = str(caught.value)
    assert field in message and packed.strip("'") in message and given.strip("'") in message


def test_an_encoder_built_from_another_config_is_checked_against_the_packed_dir(written):
    other = dataclasses.replace(written.config, video=dataclasses.replace(written.config.video, max_frames=8))
    with pytest.raises(ConfigError, match=r"video.max_frames: packed with None, this config has 8"):
        PackEncoder(other)
    check_against_packed_dir(written.config, written.config.packed_wds_dir)  # the scan's own config passes


def test_a_processor_dir_elsewhere_is_accepted_only_when_its_token_files_are_the_same(written, tmp_path):
    moved = Path(shutil.copytree(written.config.model.processor_path, tmp_path / "moved"))
    encoder = PackEncoder.from_packed_dir(written.config.packed_wds_dir, moved)
    assert encoder.rules.processor_path == str(moved)
    pre = moved / "preprocessor_config.json"
    pre.write_text(json.dumps({**json.loads(pre.read_text()), "max_pixels": 1_003_520}))
    with pytest.raises(ConfigError, match=r"processor file preprocessor_config.json in .*moved: sha256"):
        PackEncoder.from_packed_dir(written.config.packed_wds_dir, moved)


def test_write_refuses_a_config_that_is_not_the_scans(written):
    before = _settings(written.config)
    other = dataclasses.replace(written.config, video=dataclasses.replace(written.config.video, fps=1.0))
    with pytest.raises(StaleArtifactError, match=r"manifest.sqlite was built from other inputs \(settings that changed "
                                                 r"since: video\.fps 2\.0 -> 1\.0\).*`vlmpack scan --rescan`"):
        write.run(other)
    assert _settings(written.config) == before  # the output was left alone


def test_a_processor_dir_that_is_not_here_or_a_dataset_without_settings_is_a_clear_error(written, tmp_path):
    moved = tmp_path / "elsewhere"
    (moved / ".nv-meta").mkdir(parents=True)
    stored = _settings(written.config)
    stored["model"]["processor_kwargs"]["pretrained_model_name_or_path"] = "/nowhere/proc"
    (moved / ".nv-meta" / "vlmpack.json").write_text(json.dumps(stored))
    with pytest.raises(ConfigError, match=r"'/nowhere/proc' .* is not here: pass processor_path="):
        PackEncoder.from_packed_dir(moved)
    with pytest.raises(ConfigError, match=r"^processor_path='/typo/proc' is not a directory$"):
        PackEncoder.from_packed_dir(moved, processor_path="/typo/proc")  # the user's path, named as given
    with pytest.raises(ConfigError, match=r"vlmpack.json not found"):
        PackEncoder.from_packed_dir(tmp_path)
