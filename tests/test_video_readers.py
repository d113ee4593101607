"""video.reader: the frame count and rate sampling uses are those of the reader the training pipeline decodes with.

The readers disagree where real corpora do: a variable-frame-rate matroska / webm clip is 30 fps to decord
(the stream's nominal rate) and ~20 fps to torchcodec (frames over the packets' time span); PyAV's header
has no frame count in matroska / webm at all. The oracle is each reader itself, through transformers' own
``load_video`` backends (what its processors and qwen-vl-utils call), run in the reference environment with
torchcodec over PyAV's bundled FFmpeg (``synthetic/torchcodec_env.py``): the metadata must be equal to the
last bit, and the frames vlmpack decodes at each index equal to the reader's own.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vlmpack_offline.config import VideoConfig
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.media import decode_frames, probe_video, sample_video
from vlmpack_offline.media.video import VideoSampling
from vlmpack_offline.reasons import DropError
from vlmpack_offline.synthetic.videos import VideoSpec, corpus, encode

READERS = ("torchcodec", "decord", "pyav")
# the benchmark's quick corpus (every container, codec, frame-rate mode, an offset, 0.2 s; its 1920x1080 clip left
# to the benchmark), a clip decord cannot decode (48x160 H.264) and an NTSC rate
CORPUS = (*(spec for spec in corpus(quick=True) if spec.width <= 640), VideoSpec(width=48, height=160, seconds=1),
          VideoSpec(fps=29.97, seconds=4, width=96, height=54), VideoSpec(rotation=90, width=96, height=64),
          VideoSpec(container="mov", rotation=270), VideoSpec(rotation=180))  # fmt: skip  # phone videos
MKV_VFR = VideoSpec(container="mkv", vfr=True, fps=30, seconds=3)  # the header says 30 fps, frames come at ~18
WEBM = VideoSpec(container="webm", codec="vp8", fps=15)
MP4 = VideoSpec()


@pytest.fixture(scope="module")
def real_readers(tmp_path_factory):
    """(folder of the corpus, what transformers' load_video reports per file and reader)."""
    from vlmpack_offline.synthetic.torchcodec_env import torchcodec_env

    folder = tmp_path_factory.mktemp("corpus")
    for spec in CORPUS:
        (folder / spec.name).write_bytes(encode(spec))
    oracle = Path(__file__).with_name("_reader_oracle.py")
    env = torchcodec_env(tmp_path_factory.mktemp("ffmpeg"))
    done = subprocess.run([sys.executable, str(oracle), str(folder)], env=env, capture_output=True, text=True,
                          timeout=600, check=True)  # fmt: skip
    return folder, json.loads(done.stdout)


@pytest.mark.torchvision
@pytest.mark.parametrize("reader", READERS)
def test_frame_count_rate_and_size_equal_the_real_reader(real_readers, reader):
    folder, reported = real_readers
    assert not any("Could not load libtorchcodec" in reported[name]["torchcodec"].get("error", "") for name in reported)
    for spec in CORPUS:
        name = spec.name
        theirs = reported[name][reader]
        data = (folder / name).read_bytes()
        if "error" in theirs and theirs["n"] in (0, None):  # the reader cannot sample it: neither may we count it
            with pytest.raises(DropError, match=f"{reader} reports 0 frames"):
                probe_video(data, reader=reader)
            continue
        ours = probe_video(data, reader=reader)
        pairs = [(ours.n_frames, theirs["n"]), (ours.native_fps, theirs["fps"]), (ours.height, theirs["height"]),
                 (ours.width, theirs["width"])]  # fmt: skip
        assert all(mine == said for mine, said in pairs if said is not None), (name, reader, pairs)  # a size
        # decord reports only from decoded frames: none when it cannot decode (a 48x160 H.264 clip)


@pytest.mark.torchvision
@pytest.mark.parametrize("reader", READERS)
def test_the_loader_decodes_the_frames_the_reader_gives_at_each_index(real_readers, reader):
    """Bit-equal frames: decord decodes where it numbers the frames as the reader does, else PyAV."""
    folder, reported = real_readers
    for spec in CORPUS:
        name = spec.name
        frames_file = folder / f"{name}.{reader}.npy"
        if not frames_file.exists():  # the reader itself failed (decord on a 48x160 H.264 clip; pyav headerless)
            continue
        theirs = np.load(frames_file)
        if theirs.shape[-1] != 3:  # decord 0.6 turns a 90-degree video into 4-channel arrays: nothing to train on
            assert reader == "decord" and spec.rotation in (90, 270), (name, reader, theirs.shape)
            continue
        data = (folder / name).read_bytes()
        info = probe_video(data, reader=reader)
        every = VideoSampling(frame_indices=tuple(range(info.n_frames)), resized_height=info.height,
                              resized_width=info.width, native_fps=info.native_fps, total_frames=info.n_frames)  # fmt: skip
        every = dataclasses.replace(every, rotation=info.rotation, upright=info.upright)  # as sample_for passes it
        assert np.array_equal(decode_frames(data, every, resize=False), theirs), (name, reader)


def test_variable_frame_rate_matroska_gets_the_frames_of_the_reader_named():
    """decord's nominal 30 fps vs torchcodec's real ~18: at qwen-vl-utils' 2 fps, fewer frames by decord's."""
    data = encode(MKV_VFR)
    by_torchcodec, by_decord = probe_video(data), probe_video(data, reader="decord")
    assert by_torchcodec.backend == "torchcodec" and by_torchcodec.n_frames == by_decord.n_frames == 90
    assert by_torchcodec.native_fps < 20 and by_decord.native_fps == 30.0
    frames = [sample_video(info, VideoConfig(), factor=28).n_frames for info in (by_torchcodec, by_decord)]
    assert frames[0] > frames[1] == 6


def test_a_headerless_container_is_recorded_as_unreadable_by_pyav_and_read_by_the_others():
    data = encode(WEBM)
    with pytest.raises(DropError, match="pyav reports 0 frames.*matroska / webm") as caught:
        probe_video(data, reader="pyav")
    assert caught.value.reason == "corrupt_media"
    assert probe_video(data, reader="torchcodec").n_frames == probe_video(data, reader="decord").n_frames == 30


def test_the_probe_decodes_no_frame(monkeypatch):
    """Header and packet index only: a decoder that fails on every frame does not stop the probe."""
    import av

    real_open = av.open

    def no_decoding(*args, **kwargs):
        container = real_open(*args, **kwargs)
        for stream in container.streams.video:
            stream.codec_context.skip_frame = "ALL"  # every frame would decode to nothing
        return container

    monkeypatch.setattr(av, "open", no_decoding)
    for spec in CORPUS[:4]:
        info = probe_video(encode(spec))
        assert info.n_frames >= 2 and info.width == spec.width


def test_a_reader_that_is_not_installed_is_one_config_error(tmp_path, make_config, monkeypatch):
    from vlmpack_offline.synthetic.processor_dir import build_processor_dir
    from vlmpack_offline.tokens import load_model_rules

    monkeypatch.setitem(sys.modules, "decord", None)  # import decord -> ImportError
    config = make_config(wds_dir="unused", processor_dir=build_processor_dir(tmp_path, "qwen2_5_vl"),
                         video={"reader": "decord"})  # fmt: skip
    with pytest.raises(ConfigError, match=r"^video.reader = 'decord' reads with decord, which is not installed: "
                                          r"pip install decord \(decord has wheels for x86_64 only"):  # fmt: skip
        load_model_rules(config.model, config.video)


def test_an_unknown_reader_is_a_config_error(tmp_path, make_config):
    with pytest.raises(ConfigError, match="video.reader"):
        make_config(wds_dir="unused", processor_dir=tmp_path, video={"reader": "opencv"})


def test_scan_counts_each_reader_and_records_what_one_cannot_read(tmp_path, make_config):
    """One shard of a VFR matroska clip, a webm and an mp4 clip: the token counts follow the reader named;
    the matroska / webm clips pyav cannot count are recorded drops and the run goes on."""
    from vlmpack_offline.stages import scan
    from vlmpack_offline.synthetic.processor_dir import build_processor_dir
    from vlmpack_offline.synthetic.shards import SyntheticSample, write_shard

    samples = []
    for name, spec in (("mkv_vfr", MKV_VFR), ("webm_vp8", WEBM), ("mp4_cfr", MP4)):
        chat = {"messages": [{"role": "user", "content": [{"type": "video", "video": f"clip.{spec.suffix}"},
                                                          {"type": "text", "text": "What?"}]},
                             {"role": "assistant", "content": "A gradient."}]}  # fmt: skip
        samples.append(SyntheticSample(key=name, json=chat, media={f"clip.{spec.suffix}": encode(spec)}))
    write_shard(tmp_path / "wds" / "shard-000000.tar", samples)
    processor = build_processor_dir(tmp_path / "proc", "qwen2_5_vl", video=True)
    lengths = {}
    for reader in READERS:
        work = tmp_path / f"work_{reader}"
        result = scan.run(make_config(wds_dir=tmp_path / "wds", processor_dir=processor,
                                      data={"work_dir": str(work)}, video={"reader": reader}))  # fmt: skip
        lengths[reader] = _lengths(work)
        assert any(f"reader {reader}" in line for line in result.summary), result.summary
    assert lengths["torchcodec"]["mkv_vfr"] > lengths["decord"]["mkv_vfr"]  # 8 frames vs 6
    assert lengths["torchcodec"]["mp4_cfr"] == lengths["decord"]["mp4_cfr"] == lengths["pyav"]["mp4_cfr"]
    assert _drops(tmp_path / "work_pyav") == {"mkv_vfr": "corrupt_media", "webm_vp8": "corrupt_media"}
    assert "pyav reports 0 frames" in _rows(tmp_path / "work_pyav")["webm_vp8"]["error"]
    assert not _drops(tmp_path / "work_torchcodec") and not _drops(tmp_path / "work_decord")


def _rows(work: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in (work / "manifest.jsonl").read_text().splitlines()]
    return {row["id"].rsplit("/", 1)[-1]: row for row in rows}


def _lengths(work: Path) -> dict[str, int]:
    return {key: row["token_len"] for key, row in _rows(work).items() if row["status"] == "ok"}


def _drops(work: Path) -> dict[str, str]:
    return {key: row["reason"] for key, row in _rows(work).items() if row["status"] != "ok"}


@pytest.mark.parametrize(
    ("family", "spec", "dropped"),
    [
        ("glm4v", VideoSpec(seconds=0.2, fps=25), True),  # GLM samples frame 0 twice: 1 distinct
        ("llava_onevision", VideoSpec(seconds=1.0, fps=10), True),  # 32 fixed frames of 10
        ("qwen3_vl", VideoSpec(seconds=1.4, fps=5), False),
        ("qwen2_5_vl", VideoSpec(seconds=2.0, fps=10), False),
    ],
)
def test_pyav_hands_each_frame_once_so_a_sampling_that_repeats_frames_is_a_recorded_drop(
    tmp_path, make_config, family, spec, dropped
):
    """transformers' read_video_pyav keeps an index once; padding to the temporal patch is the processor's own."""
    from vlmpack_offline.synthetic.processor_dir import build_processor_dir
    from vlmpack_offline.tokens import load_model_rules
    from vlmpack_offline.tokens.media_info import probe_media

    config = make_config(wds_dir="unused", processor_dir=build_processor_dir(tmp_path, family, video=True),
                         video={"reader": "pyav"})  # fmt: skip
    rules = load_model_rules(config.model, config.video)
    data = encode(spec)
    if dropped:
        with pytest.raises(DropError, match="pyav reader hands each frame once") as caught:
            probe_media("video", data, rules=rules, video=config.video)
        assert caught.value.reason == "unsupported_media"
        by_torchcodec = load_model_rules(config.model, VideoConfig(reader="torchcodec"))
        assert probe_media("video", data, rules=by_torchcodec, video=VideoConfig(reader="torchcodec"))
    else:
        assert probe_media("video", data, rules=rules, video=config.video).sampling.n_frames >= 2


@pytest.mark.parametrize(
    ("family", "video", "error"),
    [
        ("qwen2_5_vl", {"sampler": "hf_processor"}, "video.sampler = 'hf_processor' is Qwen3-VL's"),
        ("qwen2_5_vl", {"max_frames": 1}, "video.max_frames 1: qwen-vl-utils samples an even number of frames"),
        ("qwen2_5_vl", {"fps": -1}, "video.fps must be > 0"),
    ],
)
def test_settings_the_pipeline_cannot_run_are_config_errors(tmp_path, make_config, family, video, error):
    from vlmpack_offline.synthetic.processor_dir import build_processor_dir
    from vlmpack_offline.tokens import load_model_rules

    with pytest.raises(ConfigError, match=error):
        config = make_config(wds_dir="unused", processor_dir=build_processor_dir(tmp_path, family), video=video)
        load_model_rules(config.model, config.video)


def test_a_one_frame_video_is_the_samplers_to_take_or_refuse(tmp_path, make_config):
    """GLM-4V pads one frame to its temporal patch (its processor takes it); qwen-vl-utils needs 2 frames."""
    from vlmpack_offline.synthetic.processor_dir import build_processor_dir
    from vlmpack_offline.tokens import load_model_rules
    from vlmpack_offline.tokens.media_info import probe_media

    one = encode(VideoSpec(seconds=0.1, fps=10))
    assert probe_video(one).n_frames == 1
    glm = make_config(wds_dir="unused", processor_dir=build_processor_dir(tmp_path / "glm", "glm4v", video=True))
    assert probe_media("video", one, rules=load_model_rules(glm.model), video=glm.video).sampling.frame_indices == (0, 0)
    qwen = make_config(wds_dir="unused", processor_dir=build_processor_dir(tmp_path / "qwen", "qwen2_5_vl"))
    with pytest.raises(DropError, match="cannot sample 2..1 frames"):
        probe_media("video", one, rules=load_model_rules(qwen.model), video=qwen.video)


def test_a_phone_video_is_upright_for_torchcodec_and_decord_and_as_coded_for_pyav():
    """A 96x64 clip with a 90-degree display rotation: torchcodec and decord hand 64-wide, 96-high frames (the
    count's resize and the loader's frames follow), transformers' pyav reader the coded 96x64."""
    from vlmpack_offline.config import VideoConfig as Settings

    data = encode(VideoSpec(rotation=90, width=96, height=64))
    for reader, size in (("torchcodec", (96, 64)), ("decord", (96, 64)), ("pyav", (64, 96))):
        info = probe_video(data, reader=reader)
        assert (info.rotation, (info.height, info.width)) == (90, size), reader
        sampling = dataclasses.replace(sample_video(info, Settings(), factor=28), rotation=info.rotation,
                                       upright=info.upright)  # fmt: skip
        frames = decode_frames(data, sampling)
        assert frames.shape[1:3] == (sampling.resized_height, sampling.resized_width), reader
        assert (sampling.resized_height > sampling.resized_width) == (reader != "pyav"), reader


def test_a_wrong_reader_or_frame_bound_says_the_choices_and_the_values_set(tmp_path, make_config):
    with pytest.raises(ConfigError, match=r"`video.reader` = 'opencv' is not a valid choice of 'torchcodec' \| 'decord' "
                                          r"\| 'pyav' or null"):  # fmt: skip
        make_config(wds_dir="unused", processor_dir=tmp_path, video={"reader": "opencv"})
    with pytest.raises(ConfigError, match=r"need 1 <= video.min_frames <= video.max_frames, got video.min_frames 0$"):
        make_config(wds_dir="unused", processor_dir=tmp_path, video={"min_frames": 0})
