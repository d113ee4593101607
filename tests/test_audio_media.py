"""``media.audio``: the probe's sample count is what PyAV's decoder hands out, the loader's decode is exactly
``resampled_length`` of it, and a broken file is a recorded reason naming the part, never a count.

The oracle is a plain PyAV decode loop with FFmpeg's default settings (``_decoded``): the number of samples its
frames hold. Clips are real files from PyAV's encoders (``synthetic.audio``) in every container it writes, at
the rates each encoder takes, mono and stereo, from one sample to seconds. Values are checked against the
standard library's ``wave`` reader and against the signal's own tones.
"""

from __future__ import annotations

import io
import wave

import av
import numpy as np
import pytest
from _audio_oracle import probed

from vlmpack_offline.media import decode_audio, probe_audio, resampled_length
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.audio import (
    CONTAINERS,
    encode_audio,
    encode_video_with_audio,
    garbage,
    lying_wav,
    rates_taken,
    truncated,
)
from vlmpack_offline.synthetic.videos import VideoSpec, encode

RATES = (8000, 11025, 16000, 22050, 44100, 48000)
TARGETS = (16000, 24000)  # Whisper's / Qwen-Omni's and Gemma's feature extractors; 24 kHz: a rate neither is
HEADERLESS = ("aac",)  # raw ADTS frames: no length anywhere, a cut one is only seen failing to decode


def _decoded(data: bytes) -> tuple[int, int | None]:
    """(samples, rate) PyAV's decoder yields for the first audio stream, FFmpeg's defaults throughout."""
    with av.open(io.BytesIO(data)) as container:
        samples, rate = 0, None
        for frame in container.decode(audio=0):
            samples, rate = samples + frame.samples, frame.sample_rate
        return samples, rate


def _rates(container: str) -> list[int]:
    taken = rates_taken(container)
    return [rate for rate in RATES if taken is None or rate in taken]


def _lengths(rate: int) -> tuple[int, ...]:
    """0.1 s, one sample, a few odd lengths around codec frame sizes (576, 1024, 1152, 4096, 4608) and 1.3 s."""
    return (rate // 10, 1, 7, 1153, 4097, 13 * rate // 10 + 3)


@pytest.mark.parametrize("container", sorted(CONTAINERS))
def test_probe_counts_what_the_decoder_yields_and_decode_is_that_long(container):
    """Every clip: the probe's samples and rate are the decoder's; decode_audio at 16 and 24 kHz is float32 mono of
    exactly resampled_length. A clip the decoder yields nothing from (an AAC frame of priming only, an ADTS file
    too short for FFmpeg to recognise) is dropped as corrupt_media, never counted."""
    wrong = []
    for rate in _rates(container):
        for channels in (1, 2):
            for length in _lengths(rate):
                data = encode_audio(container, samples=length, sample_rate=rate, channels=channels, seed=length)
                part = f"{container}-{rate}-{channels}ch-{length}"
                try:
                    oracle = _decoded(data)
                except av.error.FFmpegError:
                    oracle = (0, None)
                got = probed(data, part)
                if oracle[0] == 0:
                    if not (isinstance(got, DropError) and got.reason == Reason.CORRUPT_MEDIA):
                        wrong.append((part, "decoder yields nothing", got))
                    continue
                if isinstance(got, DropError) or (got.samples, got.sample_rate) != oracle:
                    wrong.append((part, oracle, got))
                    continue
                assert got.channels == channels and got.container and got.codec
                for target in TARGETS:
                    audio = decode_audio(data, sampling_rate=target, part=part)
                    expected = resampled_length(oracle[0], oracle[1], target)
                    if audio.dtype != np.float32 or audio.ndim != 1 or len(audio) != expected:
                        wrong.append((part, target, expected, audio.dtype, audio.shape))
    assert not wrong, wrong


@pytest.mark.parametrize(
    ("container", "codec"),
    [("wav", "pcm_s16le"), ("flac", "flac"), ("mp3", "mp3"), ("ogg", "opus"), ("m4a", "aac"), ("alac", "alac")],
)
def test_probe_names_codec_and_container(container, codec):
    data = encode_audio(container, samples=4800, sample_rate=48000, channels=2)
    info = probe_audio(data, part="clip")
    assert info.codec == codec
    with av.open(io.BytesIO(data)) as opened:
        assert info.container == opened.format.name


def test_opus_is_counted_at_48khz_whatever_it_was_encoded_at():
    """libopus encodes a 16 kHz signal; every Opus decoder outputs 48 kHz (RFC 7845), three samples per input one."""
    info = probe_audio(encode_audio("ogg", samples=16000, sample_rate=16000), part="speech.opus")
    assert (info.sample_rate, info.samples) == (48000, 48000)


def test_wav_decode_is_the_channel_average_of_the_stored_samples():
    """At the stream's own rate nothing is resampled: the output is the mean of the channels of the int16 samples the
    standard library's wave module reads, scaled by 1/32768."""
    data = encode_audio("wav", samples=12345, sample_rate=22050, channels=2, seed=3)
    with wave.open(io.BytesIO(data)) as reader:
        stored = np.frombuffer(reader.readframes(reader.getnframes()), dtype="<i2").reshape(-1, 2)
    expected = (stored.astype(np.float32) / 32768).mean(axis=1)
    np.testing.assert_allclose(decode_audio(data, sampling_rate=22050, part="a.wav"), expected, atol=1e-7)


@pytest.mark.parametrize("container", ["wav", "flac", "mp3", "m4a"])
def test_resampled_decode_keeps_the_tones(container):
    """The signal is a 220 Hz tone in channel 0 and a 330 Hz one in channel 1: after mixing to mono and resampling
    44.1 kHz -> 16 kHz, the two strongest frequencies of the output are still 220 and 330 Hz, of equal strength."""
    data = encode_audio(container, samples=44100 * 2, sample_rate=44100, channels=2)
    audio = decode_audio(data, sampling_rate=16000, part="tones")
    spectrum = np.abs(np.fft.rfft(audio[:32000]))  # 2 s at 16 kHz: bins of 0.5 Hz
    strongest = sorted(np.argsort(spectrum)[-2:] / 2.0)
    assert strongest == [220.0, 330.0]
    assert spectrum[440] == pytest.approx(spectrum[660], rel=0.1)


def test_audio_track_of_a_video_is_probed():
    """An MP4 whose first stream is video: the probe counts its audio stream, as the decoder sees it."""
    data = encode_video_with_audio(seconds=1.5, sample_rate=44100, channels=2)
    info = probe_audio(data, part="clip.mp4")
    assert (info.samples, info.sample_rate) == _decoded(data)
    assert len(decode_audio(data, sampling_rate=16000, part="clip.mp4")) == resampled_length(info.samples, 44100, 16000)


def test_video_without_audio_is_corrupt_media_naming_the_streams():
    with pytest.raises(DropError, match=r"^clip\.mp4: no audio stream in this .* file \(its streams: video\)") as exc:
        probe_audio(encode(VideoSpec(seconds=0.5)), part="clip.mp4")
    assert exc.value.reason == Reason.CORRUPT_MEDIA


@pytest.mark.parametrize("container", ["wav", "flac"])
def test_clip_of_zero_samples_holds_no_audio(container):
    data = encode_audio(container, samples=0, sample_rate=16000)
    with pytest.raises(DropError, match=r"^empty\.\w+: the \w+ stream holds no audio \(0 samples\)") as exc:
        probe_audio(data, part=f"empty.{container}")
    assert exc.value.reason == Reason.CORRUPT_MEDIA


@pytest.mark.parametrize("container", sorted(set(CONTAINERS) - {"wav", "flac"}))
def test_clip_of_zero_samples_is_dropped(container):
    """The encoders write no playable file for no samples (an ID3 tag alone, Ogg headers without an end-of-stream
    page, an MP4 with no track): a drop, whichever reason its bytes earn."""
    rate = 16000 if container != "alac" else 44100
    with pytest.raises(DropError, match=r"^empty: ") as exc:
        probe_audio(encode_audio(container, samples=0, sample_rate=rate), part="empty")
    assert exc.value.reason in (Reason.CORRUPT_MEDIA, Reason.TRUNCATED_MEDIA)


def test_wav_header_claiming_more_than_its_data_is_truncated():
    data = lying_wav(samples=4800, sample_rate=48000, claimed=9600)
    with pytest.raises(DropError, match=r"^a\.wav: WAV cut short: the header says 9600 samples, the data holds "
                                        r"4800") as exc:  # fmt: skip
        probe_audio(data, part="a.wav")
    assert exc.value.reason == Reason.TRUNCATED_MEDIA


@pytest.mark.parametrize("data", [garbage(), b"", b"RIFF\x00\x00"], ids=["garbage", "empty", "riff-stub"])
def test_unreadable_bytes_are_corrupt_media(data):
    with pytest.raises(DropError, match=r"^x\.wav: ") as exc:
        probe_audio(data, part="x.wav")
    assert exc.value.reason == Reason.CORRUPT_MEDIA
    with pytest.raises(DropError, match=r"^x\.wav: "):
        decode_audio(data, sampling_rate=16000, part="x.wav")


@pytest.mark.parametrize("container", sorted(set(CONTAINERS) - set(HEADERLESS)))
def test_every_cut_of_a_clip_is_truncated_or_corrupt(container):
    """The same clip cut at 12 offsets through it and 1, 5 and 50 bytes before its end (inside the last frame or page):
    each is dropped, the part named; a cut in the data, past the header, is truncated_media."""
    rate = 48000 if container != "alac" else 44100
    data = encode_audio(container, samples=rate * 2 + 111, sample_rate=rate, channels=2)
    sizes = [len(data) * k // 13 for k in range(1, 13)] + [len(data) - 50, len(data) - 5, len(data) - 1]
    kept = []
    for size in sizes:
        got = probed(data[:size], "cut")
        if not isinstance(got, DropError) or not str(got).startswith("cut: "):
            kept.append((size, got))
        elif size > len(data) // 2 and got.reason != Reason.TRUNCATED_MEDIA:
            kept.append((size, got.reason, str(got)))
    assert not kept, kept


def test_headerless_aac_cut_is_dropped_or_counted_as_decoded():
    """Raw ADTS frames carry no length: a cut file is dropped where its last frame fails to decode, and otherwise
    counted as exactly what the decoder yields from it."""
    data = encode_audio("aac", samples=48000 * 2, sample_rate=48000, channels=2)
    for size in [len(data) * k // 7 for k in range(1, 7)]:
        got = probed(data[:size], "cut.aac")
        if isinstance(got, DropError):
            assert got.reason == Reason.CORRUPT_MEDIA and str(got).startswith("cut.aac: ")
        else:
            assert (got.samples, got.sample_rate) == _decoded(data[:size])


def test_flac_cut_inside_its_last_frame_is_truncated():
    """Every packet but the last is whole and the packets' durations still add up to STREAMINFO's total: only
    decoding the last frame shows the cut (the probe does, after a seek)."""
    data = encode_audio("flac", samples=48000 * 3 + 17, sample_rate=48000, channels=2)
    with pytest.raises(DropError, match=r"^song\.flac: FLAC cut short: the header says 144017 samples") as exc:
        probe_audio(data[:-5], part="song.flac")
    assert exc.value.reason == Reason.TRUNCATED_MEDIA


def test_ogg_cut_at_a_page_boundary_is_truncated():
    """Every page left is whole and FFmpeg opens it as a shorter clip; the last page lacks the end-of-stream flag."""
    data = encode_audio("ogg", samples=48000 * 3, sample_rate=48000, channels=1)
    cut = data[: data.rindex(b"OggS")]
    with pytest.raises(DropError, match=r"^a\.opus: Ogg cut short: its last page .*no end-of-stream flag") as exc:
        probe_audio(cut, part="a.opus")
    assert exc.value.reason == Reason.TRUNCATED_MEDIA
    assert _decoded(cut)[0] > 0  # the decoder alone would have served it, short


def _flipped(data: bytes, at: float) -> bytes:
    damaged = bytearray(data)
    damaged[int(len(data) * at)] ^= 0xFF
    return bytes(damaged)


@pytest.mark.parametrize("at", [0.3, 0.5, 0.7])
def test_ogg_page_with_a_damaged_byte_is_corrupt(at):
    """FFmpeg drops an Ogg page that fails its CRC, and every sample in it: a whole page shorter than the header
    says. The walk checks each page's CRC, so the file is dropped rather than counted at its undamaged length."""
    data = encode_audio("ogg", samples=48000 * 3, sample_rate=48000, channels=2)
    damaged = _flipped(data, at)
    assert _decoded(damaged)[0] < _decoded(data)[0]  # what the loader's decoder would have served
    with pytest.raises(DropError, match=r"^a\.ogg: not a valid Ogg: its page at byte \d+ fails its CRC") as exc:
        probe_audio(damaged, part="a.ogg")
    assert exc.value.reason == Reason.CORRUPT_MEDIA


def test_flac_frame_damaged_in_the_middle_is_dropped():
    """A byte flipped 30% in: FFmpeg's parser finds the frame's CRC wrong and skips it, so the decoder yields a frame
    less than STREAMINFO says; the probe's packet walk sees the same."""
    data = encode_audio("flac", samples=44100 * 3, sample_rate=44100, channels=2)
    damaged = _flipped(data, 0.3)
    assert _decoded(damaged)[0] < 44100 * 3
    with pytest.raises(DropError, match=r"^a\.flac: audio cut short: the header says 132300 samples") as exc:
        probe_audio(damaged, part="a.flac")
    assert exc.value.reason == Reason.TRUNCATED_MEDIA


def test_half_an_mp3_is_truncated_by_its_xing_byte_count():
    data = encode_audio("mp3", samples=44100 * 3, sample_rate=44100, channels=2)
    with pytest.raises(DropError, match=r"^a\.mp3: MP3 cut short: its Xing header counts \d+ frames in \d+ bytes, "
                                        r"the file holds \d+") as exc:  # fmt: skip
        probe_audio(truncated(data), part="a.mp3")
    assert exc.value.reason == Reason.TRUNCATED_MEDIA


def test_encoder_refuses_rates_it_cannot_encode():
    with pytest.raises(ValueError, match="does not encode at 44100 Hz: it takes 8000, 12000, 16000, 24000, 48000"):
        encode_audio("ogg", samples=100, sample_rate=44100)


def test_clips_are_the_same_bytes_every_time():
    for container in CONTAINERS:
        rate = _rates(container)[-1]
        first = encode_audio(container, samples=3000, sample_rate=rate, channels=2, seed=1)
        assert first == encode_audio(container, samples=3000, sample_rate=rate, channels=2, seed=1), container


@pytest.mark.slow
@pytest.mark.parametrize("container", sorted(CONTAINERS))
def test_long_clips_probe_to_the_decoded_count(container):
    """Ten minutes at the highest rate each encoder takes, stereo, and 3 minutes at 8 kHz mono."""
    for rate, channels, seconds in ((_rates(container)[-1], 2, 600), (_rates(container)[0], 1, 180)):
        data = encode_audio(container, samples=rate * seconds + 5, sample_rate=rate, channels=channels)
        info = probe_audio(data, part="long")
        assert (info.samples, info.sample_rate) == _decoded(data), (container, rate)
        audio = decode_audio(data, sampling_rate=16000, part="long")
        assert len(audio) == resampled_length(info.samples, info.sample_rate, 16000)


def test_a_damaged_mp3_frame_in_the_middle_passes_the_probe_and_fails_decode_check():
    """The probe reads the gapless tag's count and checks the file holds the bytes it names: a frame header broken
    in the middle leaves both whole. ``scan.decode_check`` (check_decodes) decodes to the end and drops it."""
    from vlmpack_offline.media.audio import check_decodes

    data = bytearray(encode_audio("mp3", samples=44100 * 3, sample_rate=44100))
    syncs = [i for i in range(len(data) - 1) if data[i] == 0xFF and data[i + 1] & 0xE0 == 0xE0]
    middle = syncs[len(syncs) // 2]
    data[middle : middle + 2] = b"\0\0"
    info = probe_audio(bytes(data), part="a.mp3")
    assert info.samples == 44100 * 3
    with pytest.raises(DropError) as caught:
        check_decodes(bytes(data), samples=info.samples, part="a.mp3")
    assert caught.value.reason == Reason.CORRUPT_MEDIA and "a.mp3" in str(caught.value)
    check_decodes(encode_audio("mp3", samples=44100 * 3, sample_rate=44100), samples=info.samples, part="a.mp3")
