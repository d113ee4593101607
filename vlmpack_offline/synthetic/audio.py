"""Real encoded audio clips for tests, benchmarks and the demo, and the broken files a corpus holds.

``encode_audio`` writes a deterministic signal (a tone per channel plus seeded noise) with PyAV's own encoders
in the containers corpora hold::

    container   PyAV format   codec (encoder)         rates the encoder takes
    wav         wav           pcm_s16le               any
    flac        flac          flac                    any
    mp3         mp3           mp3 (libmp3lame)        8000 11025 12000 16000 22050 24000 32000 44100 48000
    ogg         ogg           opus (libopus)          8000 12000 16000 24000 48000
    opus        opus          opus (libopus)          the same (the .opus extension of the same Ogg file)
    m4a         ipod          aac (FFmpeg's)          7350 .. 96000 (the 13 MPEG-4 rates)
    alac        ipod          alac (Apple lossless)   any
    aac         adts          aac (FFmpeg's)          as m4a (raw ADTS frames, no container index)
    mka         matroska      flac                    any
    webm        webm          opus (libopus)          as ogg

A rate the encoder does not take is refused (``ValueError`` naming the rates it takes), never resampled behind
the caller's back: libopus encodes at 8/12/16/24/48 kHz only (and every Opus stream *decodes* at 48 kHz
whatever it was encoded at), libmp3lame at the MPEG-1/2/2.5 rates. The bytes are the same on every run of one
install (FFmpeg's bitexact flags: no random Ogg serial numbers, no encoder version strings).

Broken files, each the shape a real failure takes: ``truncated`` (a copy stopped half-way), ``lying_wav`` (a
WAV header that claims more samples than its data holds), ``garbage`` (bytes that are no audio file), and
``encode_audio(..., samples=0)`` (a well-formed container holding no audio). ``encode_video_with_audio`` is an
MP4 with an H.264 video track and an AAC audio track (audio inside video).
"""

from __future__ import annotations

import io

import numpy as np

__all__ = ["CONTAINERS", "encode_audio", "encode_video_with_audio", "signal_chunks", "write_signal", "truncated", "lying_wav",
           "garbage", "rates_taken"]  # fmt: skip

# container -> (PyAV format name, PyAV encoder name)
CONTAINERS: dict[str, tuple[str, str]] = {
    "wav": ("wav", "pcm_s16le"),
    "flac": ("flac", "flac"),
    "mp3": ("mp3", "libmp3lame"),
    "ogg": ("ogg", "libopus"),
    "opus": ("opus", "libopus"),
    "m4a": ("ipod", "aac"),
    "alac": ("ipod", "alac"),
    "aac": ("adts", "aac"),
    "mka": ("matroska", "flac"),
    "webm": ("webm", "libopus"),
}
_CHUNK = 4096  # samples per generated (and encoded) frame: the signal is the same whatever the clip's length
_BITEXACT = {"fflags": "+bitexact"}  # the muxer: a fixed Ogg serial number, no "encoder" version tag
_LAYOUTS = ("mono", "stereo", "2.1", "quad", "5.0", "5.1", "6.1", "7.1")  # FFmpeg's default layout per channel count


def rates_taken(container: str) -> tuple[int, ...] | None:
    """The sample rates ``container``'s encoder takes, or None when it takes any."""
    import av

    rates = av.codec.Codec(CONTAINERS[_known(container)][1], "w").audio_rates
    return tuple(sorted(rates)) if rates else None


def _known(container: str) -> str:
    if container not in CONTAINERS:
        raise ValueError(f"unknown audio container {container!r}: one of {', '.join(CONTAINERS)}")
    return container


def signal_chunks(*, samples: int, sample_rate: int, channels: int, seed: int = 0):
    """The clip's signal as float32 ``[channels, n]`` chunks of ``_CHUNK`` samples (the last one shorter): a
    sine per channel (220 Hz, then 330, 440, ...) at amplitude 0.3 plus seeded Gaussian noise of deviation 0.05,
    so a lossy codec has something to code and channels differ. Chunked so a 10-minute clip never exists twice."""
    rng = np.random.default_rng(seed)
    freqs = (220.0 * (1 + 0.5 * np.arange(channels, dtype=np.float64)))[:, None]
    for start in range(0, samples, _CHUNK):
        n = min(_CHUNK, samples - start)
        t = (start + np.arange(n, dtype=np.float64)) / sample_rate
        tone = 0.3 * np.sin(2 * np.pi * freqs * t)
        noise = 0.05 * rng.standard_normal((channels, n), dtype=np.float32)
        yield (tone + noise).astype(np.float32)


def encode_audio(container: str, *, samples: int, sample_rate: int, channels: int = 1, seed: int = 0) -> bytes:
    """``samples`` samples per channel of the module's signal at ``sample_rate`` Hz, encoded as ``container``
    (module table). Lossy codecs add their own delay and padding: the decoded length is what the decoder says
    (``media.audio.probe_audio``), not ``samples``. ``samples=0`` writes a container with no audio in it."""
    import av

    fmt, codec = CONTAINERS[_known(container)]
    rates = rates_taken(container)
    if rates is not None and sample_rate not in rates:
        raise ValueError(f"{container} ({codec}) does not encode at {sample_rate} Hz: it takes "
                         f"{', '.join(map(str, rates))} (resample the signal first)")  # fmt: skip
    if samples < 0:
        raise ValueError(f"need samples >= 0, got {samples}")
    layout = _layout(channels)
    out = io.BytesIO()
    with av.open(out, "w", format=fmt, options=_BITEXACT) as box:
        stream = box.add_stream(codec, rate=sample_rate, layout=layout)
        stream.codec_context.flags |= av.codec.context.Flags.bitexact  # no encoder version in the stream
        box.start_encoding()  # the header even when no packet follows (samples=0)
        write_signal(box, stream, samples=samples, sample_rate=sample_rate, channels=channels, seed=seed)
    return out.getvalue()


def _layout(channels: int) -> str:
    if not 1 <= channels <= len(_LAYOUTS):
        raise ValueError(f"channels must be 1..{len(_LAYOUTS)}, got {channels}")
    return _LAYOUTS[channels - 1]


def write_signal(box, stream, *, samples: int, sample_rate: int, channels: int, seed: int = 0) -> None:
    """``signal_chunks`` encoded by ``stream`` and muxed into ``box``, the encoder flushed at the end."""
    import av

    pts = 0
    for chunk in signal_chunks(samples=samples, sample_rate=sample_rate, channels=channels, seed=seed):
        frame = av.AudioFrame.from_ndarray(chunk, format="fltp", layout=stream.codec_context.layout)
        frame.sample_rate, frame.pts = sample_rate, pts  # PyAV converts to the encoder's format and frame size
        pts += chunk.shape[1]
        box.mux(stream.encode(frame))
    box.mux(stream.encode(None))


def encode_video_with_audio(*, seconds: float = 1.0, sample_rate: int = 44100, channels: int = 2, fps: int = 10,
                            seed: int = 0) -> bytes:  # fmt: skip
    """An MP4 whose first stream is H.264 video (64x48, a seeded gradient at ``fps``) and whose second is AAC
    audio of ``seconds`` at ``sample_rate``: what a phone or a screen recorder writes."""
    import av

    samples = round(seconds * sample_rate)
    out = io.BytesIO()
    with av.open(out, "w", format="mp4", options=_BITEXACT) as box:
        video = box.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        video.options = {"bf": "0", "threads": "1"}
        audio = box.add_stream("aac", rate=sample_rate, layout=_layout(channels))
        rng = np.random.default_rng(seed)
        for index in range(max(1, round(seconds * fps))):
            pixels = ((np.arange(64)[None, :, None] + index * 8 + rng.integers(0, 16, (48, 64, 3))) % 256)
            frame = av.VideoFrame.from_ndarray(pixels.astype(np.uint8), format="rgb24")
            frame.pts = index
            box.mux(video.encode(frame))
        box.mux(video.encode(None))
        write_signal(box, audio, samples=samples, sample_rate=sample_rate, channels=channels, seed=seed)
    return out.getvalue()


def truncated(data: bytes, *, keep: float = 0.5) -> bytes:
    """The first ``keep`` of ``data``: a copy or download that stopped part-way."""
    return data[: int(len(data) * keep)]


def lying_wav(*, samples: int, sample_rate: int, channels: int = 1, claimed: int, seed: int = 0) -> bytes:
    """A whole WAV of ``samples`` samples whose RIFF and ``data`` chunk sizes claim ``claimed`` samples: the
    header a writer fills in before it was killed, or a file cut and then padded back to a chunk boundary."""
    data = bytearray(encode_audio("wav", samples=samples, sample_rate=sample_rate, channels=channels, seed=seed))
    at = data.find(b"data")
    if at < 0 or claimed < samples:
        raise ValueError("lying_wav claims more samples than the data holds")
    size = claimed * channels * 2  # pcm_s16le
    data[at + 4 : at + 8] = size.to_bytes(4, "little")
    data[4:8] = (at + 8 + size - 8).to_bytes(4, "little")
    return bytes(data)


def garbage(*, size: int = 4096, seed: int = 0) -> bytes:
    """Seeded random bytes: a member named ``.wav`` that holds no audio file."""
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()
