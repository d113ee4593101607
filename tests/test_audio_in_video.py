"""Qwen-Omni's ``load_audio_from_video``: a video's own audio track counted and interleaved with its frames.

Turned on by ``model.processor_kwargs: {load_audio_from_video: true}`` (transformers 5.24's name) or
``use_audio_in_video: true`` (its deprecated alias, as qwen-omni-utils users pass it); a processor without the
path (``replace_video_with_audio_token``: not an omni processor) refuses it at scan start
(``families/audio_rules.audio_in_video_setting``).

Samples, on the ``synthetic/folder_qwen3_omni_moe`` and ``folder_qwen2_5_omni`` folders: a video with an audio
track (AAC in MP4, stereo 44.1 kHz), a video without an audio stream, a video beside a standalone audio, two videos
with tracks, and a video with a track beside a silent video and an audio. The tracks and the standalone audio are
one processor call (Whisper pads them together: Qwen3-Omni to the longest clip of the call).

- reference (``.venv-ref``, marked ``torchvision``): the oracle is the real processor (``AutoProcessor`` on the
  folder) fed its own ``apply_chat_template`` text, every frame of each video with its ``VideoMetadata`` (it
  samples frames itself), and one audio per slot, decoded as the loader decodes it (``media.audio.decode_audio``
  at 16 kHz), with ``audio_from_video_indices`` and ``load_audio_from_video=True`` (the callers' form
  ``_resolve_audio_from_video`` takes without torchcodec; a silent video gets no slot). Its ``len(input_ids)``
  must be ``PINNED`` and vlmpack's count (``make_counter``: the generic path, proven at folder load with tracks)
  must equal it; the deprecated ``use_audio_in_video=True`` call gives the same.
- core (``.venv``): the same samples through ``make_counter`` give ``PINNED``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from _folders_2026 import LazyFolders, every_frame

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.synthetic.audio import encode_audio, encode_video_with_audio
from vlmpack_offline.synthetic.shards import SyntheticSample, video_bytes, write_shard
from vlmpack_offline.tokens import make_counter
from vlmpack_offline.tokens.factory import counting_path
from vlmpack_offline.tokens.media_info import AudioMedia

TYPES = ("qwen3_omni_moe", "qwen2_5_omni")
RATE = 16_000  # both folders' WhisperFeatureExtractor

# seconds, rate, channels, fps, seed: a phone's stereo 44.1 kHz track, and a mono 22.05 kHz one
PARTS = {
    "talk.mp4": lambda: encode_video_with_audio(seconds=2.5, sample_rate=44_100, channels=2, fps=8),
    "hum.mp4": lambda: encode_video_with_audio(seconds=1.3, sample_rate=22_050, channels=1, fps=10, seed=2),
    "silent.mp4": lambda: video_bytes(20, 8, 64, 48, seed=1),  # no audio stream
    "note.wav": lambda: encode_audio("wav", samples=50_000, sample_rate=RATE),  # longer than either track
}
SAMPLES = {
    "video_with_audio": ("talk.mp4",),
    "video_without_audio": ("silent.mp4",),
    "audio_beside_video": ("note.wav", "talk.mp4"),
    "two_videos": ("talk.mp4", "hum.mp4"),
    "mixed": ("hum.mp4", "silent.mp4", "note.wav"),
}
ANSWER = "Someone hums over a drifting gradient."
PINNED = {
    "qwen3_omni_moe": {"video_with_audio": 1464, "video_without_audio": 1429, "audio_beside_video": 1507,
                       "two_videos": 2465, "mixed": 2473},
    "qwen2_5_omni": {"video_with_audio": 1505, "video_without_audio": 1440, "audio_beside_video": 1585,
                     "two_videos": 2522, "mixed": 2537},
}  # fmt: skip


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> LazyFolders:
    return LazyFolders(tmp_path_factory.mktemp("omni-folders"), video=lambda model_type: True)


@pytest.fixture(scope="module")
def parts() -> dict[str, bytes]:
    return {name: make() for name, make in PARTS.items()}


def _kind(part: str) -> str:
    return "audio" if part.endswith(".wav") else "video"


def _messages(name: str) -> list[dict]:
    content = [{"type": _kind(p), _kind(p): p} for p in SAMPLES[name]]
    return [{"role": "user", "content": [*content, {"type": "text", "text": "What happens, and what do you hear?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]}]  # fmt: skip


def _config(folder: Path, **setting):
    return config_from_dict({
        "data": {"wds_dir": str(folder), "work_dir": str(folder / "work"), "packed_wds_dir": str(folder / "out")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder), **setting}},
        "loss": {"train_on": "all"},
    }, source="test")  # fmt: skip


class _Counters(dict):
    """(model type, setting) -> its counter on the transformers5 folder, built on first use."""

    def __init__(self, folders: LazyFolders) -> None:
        super().__init__()
        self.folders = folders

    def __missing__(self, key: tuple[str, tuple[tuple[str, bool], ...]]):
        model_type, setting = key
        self[key] = make_counter(_config(self.folders[model_type, "transformers5"], **dict(setting)))
        return self[key]


@pytest.fixture(scope="module")
def counters(folders) -> _Counters:
    return _Counters(folders)


ON = (("load_audio_from_video", True),)


def _count(counter, parts: dict[str, bytes], name: str):
    conversation = parse_conversation(json.dumps({"messages": _messages(name)}).encode(), key="k", parts=list(SAMPLES[name]))
    media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
    return counter.count(conversation, media)


def _vlmpack(counter, parts: dict[str, bytes]) -> dict[str, int]:
    return {name: _count(counter, parts, name).token_len for name in SAMPLES}


def _real(processor, parts: dict[str, bytes], name: str, **setting) -> int:
    """The real processor's len(input_ids): each video's track decoded as the loader decodes it, one slot each."""
    from vlmpack_offline.media.audio import decode_audio

    messages = [{**m, "content": [{"type": c["type"]} if c["type"] != "text" else c for c in m["content"]]}
                for m in _messages(name)]  # fmt: skip
    text = processor.apply_chat_template(messages, tokenize=False)
    videos, audio, slots = [], [], []
    for part in SAMPLES[name]:
        if _kind(part) == "audio":
            slots.append(None)
            audio.append(decode_audio(parts[part], sampling_rate=RATE, part=part))
            continue
        if _has_audio_stream(parts[part]):  # a silent video gets no slot (the processor leaves it a plain video)
            slots.append(len(videos))
            audio.append(decode_audio(parts[part], sampling_rate=RATE, part=part))
        videos.append(every_frame(parts[part]))
    out = processor(text=[text], videos=[v for v, _ in videos], video_metadata=[m for _, m in videos],
                    audio=audio or None, audio_from_video_indices=slots, **setting)  # fmt: skip
    return len(out["input_ids"][0])


def _has_audio_stream(data: bytes) -> bool:
    import av

    with av.open(io.BytesIO(data)) as container:
        return bool(container.streams.audio)


# -- core: no torchvision ----------------------------------------------------------------------------------
@pytest.mark.parametrize("model_type", TYPES)
def test_the_counts_are_the_real_processors_pinned(counters, parts, model_type):
    counter = counters[model_type, ON]
    assert counter.expander.family.audio_in_video
    assert counting_path(counter.rules).startswith(f"{model_type}: generic fast path (proved")
    assert _vlmpack(counter, parts) == PINNED[model_type]


def test_the_deprecated_spelling_counts_the_same(counters, parts):
    counter = counters["qwen3_omni_moe", (("use_audio_in_video", True),)]
    assert counter.expander.family.audio_in_video
    assert _count(counter, parts, "audio_beside_video").token_len == PINNED["qwen3_omni_moe"]["audio_beside_video"]


def test_the_probe_reads_the_track_only_under_the_setting(counters, parts):
    on, off = counters["qwen3_omni_moe", ON], counters["qwen3_omni_moe", ()]
    assert on.probe("video", parts["talk.mp4"], part="talk.mp4").audio == AudioMedia(samples=110_592, sample_rate=44_100, channels=2)
    assert on.probe("video", parts["silent.mp4"], part="silent.mp4").audio is None
    assert off.probe("video", parts["talk.mp4"], part="talk.mp4").audio is None
    # off, the track is no part of the sample: the video counts as a video of its size without audio
    assert _count(off, parts, "video_with_audio").token_len == PINNED["qwen3_omni_moe"]["video_without_audio"]


@pytest.mark.parametrize("model_type", TYPES)
def test_the_track_costs_the_audio_encoder_what_the_same_clip_costs_alone(counters, parts, model_type):
    """The cost model: a video with its track is the video's vision work plus the track's audio-encoder work, the
    work of the same clip as an audio item (test_audio_counts.py checks that against the models' own windows)."""
    counter = counters[model_type, ON]
    family = counter.expander.family
    track = counter.probe("video", parts["talk.mp4"], part="talk.mp4").audio
    alone = family.replacement_size(counter.rules, track, len)
    with_track, silent = _count(counter, parts, "video_with_audio"), _count(counter, parts, "video_without_audio")
    assert alone.audio_frames > 0
    assert (with_track.audio_frames, with_track.audio_attention) == (alone.audio_frames, alone.audio_attention)
    assert (with_track.encoder_patches, with_track.encoder_attention) == (silent.encoder_patches, silent.encoder_attention)


def test_a_scan_counts_the_tracks_into_its_manifest(folders, parts, tmp_path):
    """``vlmpack scan`` under the setting: each sample's token_len is the real processor's (PINNED), the tracks'
    audio-encoder work is in its row."""
    from vlmpack_offline.manifest import Manifest, manifest_path
    from vlmpack_offline.stages import scan

    samples = [SyntheticSample(key=name, json={"messages": _messages(name)}, media={p: parts[p] for p in SAMPLES[name]})
               for name in SAMPLES]  # fmt: skip
    write_shard(tmp_path / "shards" / "part-000.tar", samples)
    folder = folders["qwen3_omni_moe", "transformers5"]
    config = config_from_dict({
        "data": {"wds_dir": str(tmp_path / "shards"), "work_dir": str(tmp_path / "work"),
                 "packed_wds_dir": str(tmp_path / "out")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder), "load_audio_from_video": True}},
        "loss": {"train_on": "all"}, "scan": {"decode_check": True},  # the tracks decoded to their end too
    }, source="test")  # fmt: skip
    scan.run(config)
    with Manifest(manifest_path(config.work_dir)) as manifest:
        rows = {s.key: s for s in manifest.iter_samples()}
    assert {key: row.status for key, row in rows.items()} == dict.fromkeys(SAMPLES, "ok")
    assert {key: row.token_len for key, row in rows.items()} == PINNED["qwen3_omni_moe"]
    assert rows["video_with_audio"].audio_frames > 0 and rows["video_without_audio"].audio_frames == 0


def test_a_processor_without_the_path_refuses_the_setting_at_scan_start(folders):
    for model_type in ("lfm3_vl", "gemma4"):  # the generic path: no omni interleave (Gemma4 hears, but apart)
        for key in ("load_audio_from_video", "use_audio_in_video"):
            with pytest.raises(ConfigError, match=rf"processor_kwargs\.{key}: .* reads no audio track from a video"):
                make_counter(_config(folders[model_type, "transformers5"], **{key: True}))
    with pytest.raises(ConfigError, match=r"load_audio_from_video: qwen2_5_vl counts do not follow it"):  # a module
        make_counter(_config(folders["qwen2_5_vl", "transformers5"], load_audio_from_video=True))


def test_a_setting_that_is_no_boolean_or_disagrees_is_refused(folders):
    folder = folders["qwen3_omni_moe", "transformers5"]
    with pytest.raises(ConfigError, match=r"load_audio_from_video = 'yes': give true or false"):
        make_counter(_config(folder, load_audio_from_video="yes"))
    with pytest.raises(ConfigError, match=r"load_audio_from_video = False and use_audio_in_video = True disagree"):
        make_counter(_config(folder, load_audio_from_video=False, use_audio_in_video=True))


# -- reference: the real processor --------------------------------------------------------------------------
@pytest.mark.torchvision
@pytest.mark.parametrize("model_type", TYPES)
def test_the_counts_equal_the_real_processors(counters, folders, parts, model_type):
    from transformers import AutoProcessor

    counter = counters[model_type, ON]
    line = counting_path(counter.rules)
    assert line.startswith(f"{model_type}: generic fast path (proved: ") and "by the test suite" not in line, line
    processor = AutoProcessor.from_pretrained(folders[model_type, "transformers5"])
    real = {name: _real(processor, parts, name, load_audio_from_video=True) for name in SAMPLES}
    assert real == PINNED[model_type], f"the real processor's counts moved: {real}"
    assert _vlmpack(counter, parts) == real
    assert _real(processor, parts, "two_videos", use_audio_in_video=True) == real["two_videos"]  # its old spelling
