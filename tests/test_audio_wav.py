"""``media.wav_header``: PCM in WAV counted from its RIFF chunks without PyAV, and only where that is what FFmpeg
does; every other WAV declines (None) to ``audio.py``'s PyAV path.

The oracle is PyAV itself with FFmpeg's defaults (``_pyav``): the codec, rate, channels and format name its demuxer
reports and the samples its decoder yields. Files come from PyAV's wav muxer (which writes WAVE_FORMAT_EXTENSIBLE
for more than two channels or more than 16 bits), from Python's ``wave`` module, and by hand (``_riff``) for what
neither writes: IEEE float with format tag 3, odd-sized chunks, data sizes 0 and 0xFFFFFFFF, an IEC 61937 burst, an
MP3 stored as 16-bit PCM.
"""

from __future__ import annotations

import io
import struct
import wave

import av
import numpy as np
import pytest

from vlmpack_offline.media import audio as audio_module
from vlmpack_offline.media.audio import probe_audio
from vlmpack_offline.media.wav_header import wav_samples
from vlmpack_offline.reasons import DropError
from vlmpack_offline.synthetic.audio import encode_audio, signal_chunks, write_signal

RATES = (8000, 11025, 16000, 22050, 32000, 44100, 48000)
_LAYOUTS = {1: "mono", 2: "stereo", 6: "5.1"}
_FORMATS = {"pcm_u8": "u8", "pcm_s16le": "s16", "pcm_s24le": "s32", "pcm_s32le": "s32", "pcm_f32le": "flt",
            "pcm_f64le": "dbl"}  # fmt: skip  # the encoder's input sample format


def _pyav(data: bytes) -> tuple | None:
    """(samples, rate, channels, codec, format) as PyAV opens and decodes ``data`` with FFmpeg's defaults; None
    when it does not open or decode to its end."""
    try:
        with av.open(io.BytesIO(data)) as container:
            stream = container.streams.audio[0]
            context = stream.codec_context
            facts = (context.sample_rate, context.channels, context.codec.canonical_name, container.format.name)
            samples = sum(frame.samples for frame in container.decode(stream))
            return (samples, *facts)
    except Exception:  # noqa: BLE001 - whatever PyAV raises, the PyAV path drops the file
        return None


def _walked(data: bytes) -> tuple | None:
    got = wav_samples(data)
    return None if got is None else (got.samples, got.sample_rate, got.channels, got.codec, "wav")


def _pyav_wav(codec: str, samples: int, rate: int, channels: int) -> bytes:
    """The synthetic signal through PyAV's own wav muxer and ``codec`` encoder."""
    out = io.BytesIO()
    with av.open(out, "w", format="wav", options={"fflags": "+bitexact"}) as box:
        stream = box.add_stream(codec, rate=rate, layout=_LAYOUTS[channels])
        stream.codec_context.format = _FORMATS[codec]
        box.start_encoding()
        pts = 0
        for chunk in signal_chunks(samples=samples, sample_rate=rate, channels=channels, seed=samples):
            frame = av.AudioFrame.from_ndarray(_as(chunk, _FORMATS[codec]), format=_FORMATS[codec],
                                               layout=_LAYOUTS[channels])  # fmt: skip
            frame.sample_rate, frame.pts = rate, pts
            pts += chunk.shape[1]
            box.mux(stream.encode(frame))
        box.mux(stream.encode(None))
    return out.getvalue()


def _as(chunk: np.ndarray, fmt: str) -> np.ndarray:
    """A float [channels, n] chunk as PyAV's packed ``fmt`` array [1, n * channels]."""
    packed = chunk.T.reshape(1, -1)
    if fmt == "u8":
        return (packed * 127 + 128).astype(np.uint8)
    if fmt == "s16":
        return (packed * 32767).astype(np.int16)
    if fmt == "s32":
        return (packed * 2**31 * 0.99).astype(np.int32)
    return packed.astype(np.float32 if fmt == "flt" else np.float64)


def _riff(fmt: bytes, payload: bytes, *, before: bytes = b"", after: bytes = b"", size: int | None = None) -> bytes:
    """A RIFF WAVE file by hand: ``fmt `` chunk, chunks ``before`` the data, ``data`` (declaring ``size``, its
    length by default), chunks ``after``."""
    data_size = len(payload) if size is None else size
    body = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + before + b"data" + struct.pack("<I", data_size)
            + payload + (b"\0" if len(payload) & 1 and after else b"") + after)  # fmt: skip
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _fmt(tag: int, channels: int, rate: int, bits: int, *, extensible: int | None = None, cb: bool = False) -> bytes:
    """A ``fmt `` chunk: WAVEFORMAT with PCM fields (16 bytes), + cbSize 0 (``cb``), or WAVE_FORMAT_EXTENSIBLE
    (``extensible``: the subformat's tag) with valid bits = ``bits``."""
    align = channels * bits // 8
    head = struct.pack("<HHIIHH", 0xFFFE if extensible else tag, channels, rate, rate * align, align, bits)
    if extensible:
        guid = struct.pack("<I", extensible) + bytes.fromhex("000010008000 00aa00389b71".replace(" ", ""))
        return head + struct.pack("<HHI", 22, bits, 0) + guid
    return head + (b"\0\0" if cb else b"")


def _chunk(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("<I", len(body)) + body + b"\0" * (len(body) & 1)


def _pcm(samples: int, channels: int, dtype: str) -> bytes:
    signal = np.concatenate(list(signal_chunks(samples=samples, sample_rate=16000, channels=channels)), axis=1)
    packed = signal.T.reshape(-1)
    return (packed * 32767).astype("<i2").tobytes() if dtype == "s16" else packed.astype(dtype).tobytes()


@pytest.mark.parametrize("codec", list(_FORMATS))
def test_pyav_written_wavs_are_read_as_pyav_reads_them_without_pyav(codec, no_pyav_container):
    """PyAV's wav muxer, each PCM codec, mono / stereo / 5.1 (WAVE_FORMAT_EXTENSIBLE past two channels or 16 bits),
    8-48 kHz, one sample to a second: the probe answers (samples, rate, channels, codec, "wav") exactly as PyAV
    opens and decodes the file, without opening it."""
    wrong = []
    for rate in RATES:
        for channels in (1, 2, 6):
            for length in (1, 2, 1023, 1024, 1025, rate // 10 + 1, rate + 3):
                data = _pyav_wav(codec, length, rate, channels)
                info = probe_audio(data, part="clip.wav")
                got = (info.samples, info.sample_rate, info.channels, info.codec, info.container)
                if got != _pyav(data) or info.samples != length:
                    wrong.append((rate, channels, length, got, _pyav(data)))
    assert not wrong, wrong


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_python_wave_module_files_are_read_as_pyav_reads_them(width, no_pyav_container):
    """Python's ``wave`` writer (format tag 1: 8-bit unsigned, 16-, 24-, 32-bit signed): FFmpeg's codec for each."""
    for rate, channels, frames in ((8000, 1, 1), (22050, 2, 4097), (48000, 6, 12345)):
        out = io.BytesIO()
        with wave.open(out, "wb") as writer:
            writer.setnchannels(channels)
            writer.setsampwidth(width)
            writer.setframerate(rate)
            writer.writeframes(_ints(frames, channels, width))
        data = out.getvalue()
        info = probe_audio(data, part="w.wav")
        assert (info.samples, info.sample_rate, info.channels, info.codec, info.container) == _pyav(data)
        assert info.codec == ("pcm_u8", "pcm_s16le", "pcm_s24le", "pcm_s32le")[width - 1]


def _ints(frames: int, channels: int, width: int) -> bytes:
    """The signal as ``width``-byte little-endian integers, interleaved (8-bit: unsigned, as WAV stores it)."""
    signal = np.concatenate(list(signal_chunks(samples=frames, sample_rate=16000, channels=channels)), axis=1)
    values = (signal.T.reshape(-1) * (2 ** (8 * width - 1) - 1)).astype(np.int64) + (128 if width == 1 else 0)
    return b"".join(int(v).to_bytes(width, "little", signed=width > 1) for v in values)


_FLOAT32 = _pcm(5001, 2, "<f4")
_S16 = _pcm(5001, 2, "s16")
_LIST = _chunk(b"LIST", b"INFO" + _chunk(b"INAM", b"clip one\0"))  # an odd-sized value, padded
_BEXT = _chunk(b"bext", b"speech corpus".ljust(602, b"\0") + b"A=PCM,F=16000\r\n")


@pytest.mark.parametrize(
    "data",
    [
        _riff(_fmt(3, 2, 16000, 32), _FLOAT32),  # IEEE float, WAVEFORMAT of 16 bytes
        _riff(_fmt(3, 2, 16000, 32, cb=True), _FLOAT32),  # ... with cbSize 0 (18 bytes)
        _riff(_fmt(3, 1, 44100, 64), _pcm(3001, 1, "<f8")),  # 64-bit float
        _riff(_fmt(0, 2, 16000, 32, extensible=3), _FLOAT32),  # EXTENSIBLE, IEEE float subformat
        _riff(_fmt(0, 2, 16000, 16, extensible=1), _S16),  # EXTENSIBLE, PCM subformat
        _riff(_fmt(1, 2, 16000, 16), _S16, before=_chunk(b"fact", struct.pack("<I", 5001)) + _LIST + _BEXT),
        _riff(_fmt(1, 2, 16000, 16), _S16, before=_chunk(b"JUNK", b"odd"), after=_LIST),
        _riff(_fmt(1, 2, 16000, 16), _S16, after=_chunk(b"smpl", bytes(7)) + _chunk(b"cue ", bytes(4))),
        _riff(_fmt(1, 2, 16000, 16), _S16, size=0),  # a writer that could not seek back: to the end of the file
        _riff(_fmt(1, 2, 16000, 16), _S16, size=0xFFFFFFFF),
        _riff(_fmt(1, 3, 16000, 8), _pcm(4001, 3, "u1")),  # an odd data chunk at the end of the file
    ],
    ids=["float32", "float32-cbsize", "float64", "ext-float", "ext-pcm", "fact-list-bext", "junk-list-after",
         "chunks-after", "size-0", "size-ffffffff", "u8-odd"],  # fmt: skip
)
def test_hand_written_wavs_are_read_as_pyav_reads_them(data, no_pyav_container):
    """IEEE float (tag 3, 16- and 18-byte fmt), EXTENSIBLE PCM and float, odd-sized chunks before and after the
    data, a data size of 0 or 0xFFFFFFFF ("to the end", as wavdec.c reads it): answered without PyAV, as PyAV."""
    info = probe_audio(data, part="hand.wav")
    assert (info.samples, info.sample_rate, info.channels, info.codec, info.container) == _pyav(data)


def _mp3_frames() -> bytes:
    return encode_audio("mp3", samples=44100, sample_rate=44100, channels=2)


def _adts_frames() -> bytes:
    """Two bytes of PCM, then 5 s of ADTS at 32 kbit/s (frames of about 100 bytes: some 80 chained in the walk's two
    packets, past the chain it stands for), cut to whole 16-bit stereo frames. FFmpeg still reads PCM here (the
    stream does not start at the data's first byte); the walk declines all the same."""
    out = io.BytesIO()
    with av.open(out, "w", format="adts") as box:
        stream = box.add_stream("aac", rate=44100, layout="stereo", bit_rate=32000)
        pts = 0
        for chunk in signal_chunks(samples=5 * 44100, sample_rate=44100, channels=2):
            for at in range(0, chunk.shape[1], 1024):
                frame = av.AudioFrame.from_ndarray(chunk[:, at : at + 1024].copy(), format="fltp", layout="stereo")
                frame.sample_rate, frame.pts = 44100, pts
                pts += frame.samples
                box.mux(stream.encode(frame))
        box.mux(stream.encode(None))
    payload = bytes([1, 2]) + out.getvalue()
    return payload[: len(payload) // 4 * 4]


def _spdif_ac3() -> bytes:
    """AC-3 frames in IEC 61937 bursts (PyAV's spdif muxer): what a DVD rip's "WAV" holds."""
    out = io.BytesIO()
    with av.open(out, "w", format="spdif") as box:
        stream = box.add_stream("ac3", rate=48000, layout="stereo")
        write_signal(box, stream, samples=48000, sample_rate=48000, channels=2)
    return out.getvalue()


def _act_pattern() -> bytes:
    """16-bit PCM whose bytes 44-255 of the file are zeros, 256 is 0x84, 264-511 zeros: ACT's probe pattern."""
    payload = bytearray(_S16)
    payload[:212], payload[212], payload[213:468] = bytes(212), 0x84, bytes(255)
    return bytes(payload)


def _pyav_wav_options(options: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with av.open(out, "w", format="wav", options=options) as box:
        stream = box.add_stream("pcm_s16le", rate=16000, layout="mono")
        frame = av.AudioFrame.from_ndarray(_as(next(signal_chunks(samples=1000, sample_rate=16000, channels=1)),
                                               "s16"), format="s16", layout="mono")  # fmt: skip
        frame.sample_rate, frame.pts = 16000, 0
        box.mux(stream.encode(frame))
        box.mux(stream.encode(None))
    return out.getvalue()


@pytest.mark.parametrize(
    ("build", "codec"),
    [
        (lambda: _riff(_fmt(1, 2, 48000, 16), _spdif_ac3()), "ac3"),  # set_spdif: the burst makes it AC-3
        (lambda: _riff(_fmt(1, 2, 44100, 16), _mp3_frames()[: len(_mp3_frames()) // 4 * 4]), "mp3"),  # probe_codec
        (lambda: _riff(_fmt(1, 2, 44100, 16), _adts_frames()), "pcm_s16le"),  # an ADTS chain
        (lambda: _riff(_fmt(1, 2, 16000, 16), _S16 + _S16, before=b"data" + struct.pack("<I", 4) + bytes(4)),
         "pcm_s16le"),  # two data chunks  # fmt: skip
        (lambda: _riff(_fmt(1, 2, 16000, 16), _S16[:-1]), "pcm_s16le"),  # a partial sample frame at the end
        (lambda: _riff(_fmt(1, 2, 16000, 12), _S16), "pcm_s16le"),  # 12 bits: not whole bytes
        (lambda: _riff(_fmt(1, 2, 16000, 16), _S16, before=_chunk(b"LIST", b"INFOINAM\x04\0\0\0\xff\xfe\x80\0")),
         None),  # metadata that is not UTF-8: PyAV does not open it  # fmt: skip
        (lambda: _riff(_fmt(1, 2, 16000, 16), _S16, before=_chunk(b"LIST", b"IN")), None),  # "too short LIST tag"
        (lambda: _riff(_fmt(1, 2, 16000, 16), _S16, before=_chunk(b"bext", b"short")), None),  # read on: PCM as text
        (lambda: b"RIFX" + _riff(_fmt(1, 2, 16000, 16), _S16)[4:], None),  # big-endian RIFX
        (lambda: _riff(_fmt(1, 1, 8000, 16), _act_pattern()), "g729"),  # act.c's probe outscores wav_probe
        (lambda: _pyav_wav_options({"rf64": "always"}), "pcm_s16le"),  # RF64: the ds64 chunk's sizes
    ],
    ids=["iec61937-ac3", "mp3-as-pcm", "adts-chain", "two-data-chunks", "partial-frame", "12-bit", "list-not-utf8", "list-short",
         "bext-short", "rifx", "act", "rf64"],  # fmt: skip
)
def test_wavs_ffmpeg_reads_as_something_else_are_declined(build, codec):
    """Where FFmpeg's reading is more than ``bytes // block_align`` (an IEC 61937 burst or an MP3 in the data, a
    second data chunk, a partial frame, bits that are not whole bytes, metadata PyAV cannot decode or wavdec.c reads
    past, RIFX), the walk
    declines, and the probe's answer is the PyAV path's."""
    data = build()
    assert wav_samples(data) is None
    if codec is None:
        with pytest.raises(DropError, match=r"^x\.wav: not a readable audio file"):
            probe_audio(data, part="x.wav")
        return
    with av.open(io.BytesIO(data)) as container:
        assert container.streams.audio[0].codec_context.codec.canonical_name == codec


@pytest.mark.slow
def test_ten_minutes_are_read_as_pyav_reads_them(no_pyav_container):
    data = encode_audio("wav", samples=48000 * 600 + 7, sample_rate=48000, channels=2)
    info = probe_audio(data, part="long.wav")
    assert (info.samples, info.sample_rate, info.channels, info.codec, info.container) == _pyav(data)


def _pyav_path(data: bytes, monkeypatch) -> tuple | None:
    """``probe_audio``'s answer with the walk switched off (its PyAV path), None where it drops the file."""
    with monkeypatch.context() as patch:
        patch.setattr(audio_module, "wav_samples", lambda data: None)
        try:
            info = probe_audio(data, part="x.wav")
        except DropError:
            return None
    return info.samples, info.sample_rate, info.channels, info.codec, info.container


@pytest.mark.parametrize("mask", [0xFF, 0x01, 0x80])
def test_flipped_header_bytes_are_declined_or_read_as_pyav_reads_them(mask, monkeypatch):
    """Every byte of the header region (RIFF, fmt, a LIST chunk, the data chunk's header, the first data bytes)
    flipped in turn: the walk declines or answers exactly what PyAV's decoder yields (samples, rate, channels,
    codec, format) and what the probe's PyAV path answers."""
    data = _riff(_fmt(1, 2, 16000, 16), _S16[:4000], before=_chunk(b"LIST", b"INFO" + _chunk(b"ISFT", b"vlmpack")))
    assert _walked(data) == _pyav(data)
    wrong, walked = [], 0
    for at in range(min(len(data), 96)):
        damaged = bytearray(data)
        damaged[at] ^= mask
        got = _walked(bytes(damaged))
        if got is None:
            continue
        walked += 1
        if got != _pyav(bytes(damaged)) or got != _pyav_path(bytes(damaged), monkeypatch):
            wrong.append((at, got, _pyav(bytes(damaged)), _pyav_path(bytes(damaged), monkeypatch)))
    assert not wrong, wrong
    assert walked  # the RIFF size, the byte rate, the LIST text, the data bytes: flips the walk reads past
