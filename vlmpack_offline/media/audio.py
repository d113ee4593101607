"""Audio facts read from the container, and the decode the loader hands the feature extractor.

An audio item's tokens are a function of one number: its length in samples at the feature extractor's
sampling rate, after the loader decodes it to mono and resamples it. The scan reads the stream's own
length at its native rate (``probe_audio``) and maps it with ``resampled_length``; the loader decodes and
resamples (``decode_audio``) to exactly that length, so the two cannot drift.

Both open the bytes with PyAV the same way (``_opened``: the first audio stream, one decoder thread), and the
probe's count is the number of samples that decoder hands out, found per codec::

    codec                          samples                                   how it is proven
    pcm_* (WAV, AIFF, ...)         the packets' durations summed (demux      each packet is whole (the last one not cut
                                   only: PCM packets decode to exactly       short) and they hold the samples the header
                                   their bytes / (channels * width))         claims (WAV: the data chunk's size)
    flac with a sample count       the same                                  the packets hold STREAMINFO's total samples
    in STREAMINFO
    everything else (mp3, opus,    decoded and counted: the count *is* the   it decodes to its end; MP3's Xing / Info /
    aac, vorbis, alac, flac        loader's decoder's (delay, priming and    VBRI frame count (LAME's gapless tag: delay
    without a count, ...)          padding as the decoder trims them)        and padding) is not above the count

A lossy codec's header length is not the decoded length in general (AAC in MP4: the priming frame; Opus: the
pre-skip; MP3 without a LAME tag: the decoder delay), so those are counted by decoding: about 1 % of decoding
and feature extraction (docs/performance.md, "Audio probing").

Before opening, the container's own structure is walked to its end, as for video (``video_integrity``):
MP4 / M4A boxes, Matroska / WebM elements and AVI chunks (``check_container``), a WAV's ``data`` chunk against
the file and an Ogg file's pages (each inside the file, the last one flagged end-of-stream). A file whose
structure or header claims more than it holds is ``truncated_media``; one that does not open, has no audio
stream, does not decode or holds no samples is ``corrupt_media``. Every message starts with the part's name.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..reasons import DropError, Reason
from .integrity import corrupt_error, cut_error
from .video_integrity import check_container

__all__ = ["AudioInfo", "probe_audio", "decode_audio", "resampled_length"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AudioInfo:
    samples: int  # decoded samples per channel at sample_rate: exactly what decode_audio's PyAV decode hands out
    sample_rate: int  # the stream's rate in Hz as the decoder outputs it (Opus always decodes at 48000)
    channels: int  # the stream's channels (decode_audio averages them to mono)
    codec: str  # PyAV's decoder name, e.g. "pcm_s16le", "flac", "mp3float", "opus", "aac"
    container: str  # PyAV's format name, e.g. "wav", "ogg", "mov,mp4,m4a,3gp,3g2,mj2"


def resampled_length(samples: int, rate: int, target: int) -> int:
    """The length of ``samples`` samples at ``rate`` Hz resampled to ``target`` Hz: ``ceil(samples * target /
    rate)``, librosa's convention (``librosa.resample`` fixes its output to this length), which the loader's
    decode keeps whatever the resampler's own filter delay gives (swresample's varies by a sample)."""
    if rate <= 0 or target <= 0:
        raise ValueError(f"sampling rates must be positive, got {rate} -> {target}")
    return samples if rate == target else -(-samples * target // rate)


def probe_audio(data: bytes, *, part: str) -> AudioInfo:
    """The first audio stream's decoded length, rate and channels (module doc: per codec, from the packets or by
    decoding). Raises ``DropError``: ``truncated_media`` when the file holds less than it claims, ``corrupt_media``
    when it is not readable audio or holds none."""
    _check_structure(data, part)
    with _opened(data, part) as (container, stream):
        context = stream.codec_context
        codec, rate, channels = context.name, int(context.sample_rate), int(context.channels)
        fmt = container.format.name
        samples = None
        if codec.startswith("pcm_") or (codec == "flac" and stream.duration):
            samples = _packet_samples(container, stream, rate, part)
    if samples is None:  # counted by decoding, in a fresh container: the demux above (if any) used this one up
        with _opened(data, part) as (container, stream):
            samples, rate = _decoded_samples(container, stream, _mp3_claim(data, stream, rate), part)
    info = AudioInfo(samples=samples, sample_rate=rate, channels=channels, codec=codec, container=fmt)
    if info.samples <= 0:
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: the {info.codec} stream holds no audio (0 samples)")
    if info.sample_rate <= 0 or info.channels <= 0:
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: the {info.codec} stream reports {info.sample_rate} Hz, "
                                              f"{info.channels} channels")  # fmt: skip
    return info


def decode_audio(data: bytes, *, sampling_rate: int, part: str) -> np.ndarray:
    """The first audio stream as float32 mono at ``sampling_rate`` Hz, of exactly
    ``resampled_length(probe.samples, probe.sample_rate, sampling_rate)`` samples.

    Each decoded frame goes through one ``av.AudioResampler`` (swresample) to float planar at ``sampling_rate``,
    keeping its channels (at the stream's own rate it only converts the sample format); the channels are then
    averaged, and the result is cut or zero-padded at its end to that length (``librosa.resample``'s fix_length;
    swresample's flushed length is within a sample or two of it). The average is what transformers' ``load_audio``
    does on its soundfile and torchaudio backends (``audio_utils.py``: ``waveform.mean``), where its torchcodec
    backend (``AudioDecoder(num_channels=1)``) lets swresample's matrix mix down; averaging before or after
    resampling is the same up to float rounding, both being linear. Memory: the decoded clip once, in frames,
    and the output."""
    import av

    chunks: list[np.ndarray] = []
    with _opened(data, part) as (container, stream):
        rate, native = None, 0
        resampler = av.AudioResampler(format="fltp", rate=sampling_rate)  # layout: each frame's own
        try:
            for frame in container.decode(stream):
                if rate is None:
                    rate = frame.sample_rate
                elif frame.sample_rate != rate:
                    raise _rate_change(part, rate, frame.sample_rate)
                native += frame.samples
                chunks.extend(_mono(out) for out in resampler.resample(frame))
            chunks.extend(_mono(out) for out in resampler.resample(None))
        except DropError:
            raise
        except Exception as exc:
            codec = stream.codec_context.name
            raise DropError(Reason.CORRUPT_MEDIA, f"{part}: audio does not decode ({codec}: {_line(exc)})") from None
    if rate is None:
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: the audio stream holds no audio (0 samples)")
    length = resampled_length(native, rate, sampling_rate)  # native: the samples probe_audio counts
    out = np.zeros(length, dtype=np.float32)
    at = 0
    for chunk in chunks:
        take = min(len(chunk), length - at)
        if take <= 0:
            break
        out[at : at + take] = chunk[:take]
        at += take
    return out


def _packet_samples(container, stream, rate: int, part: str) -> int | None:
    """The samples the packets hold, from their durations (demux only), checked against the header's count; None
    when the packets cannot prove it (a packet without a duration, durations that are not whole samples, or a
    FLAC whose packets hold more than STREAMINFO says: then the decoder's count decides)."""
    total, packets, last_cut = 0, 0, False
    for packet in _packets(container, stream, part):
        if not packet.duration:
            return None
        total, packets, last_cut = total + packet.duration, packets + 1, bool(packet.is_corrupt)
    held = Fraction(total) * stream.time_base * rate
    claimed = Fraction(stream.duration) * stream.time_base * rate if stream.duration else None
    if last_cut:
        raise DropError(Reason.TRUNCATED_MEDIA, f"{part}: audio cut short: its last packet (of {packets}) runs "
                                                "past the end of the file")  # fmt: skip
    if claimed is not None and held < claimed:
        raise DropError(Reason.TRUNCATED_MEDIA, f"{part}: audio cut short: the header says {int(claimed)} samples, "
                                                f"the data holds {int(held)}")  # fmt: skip
    if held.denominator != 1 or (claimed is not None and held != claimed and stream.codec_context.name == "flac"):
        return None
    return int(held)


def _decoded_samples(container, stream, claimed: int | None, part: str) -> tuple[int, int]:
    """(samples, rate) the decoder hands out, decoding every packet as ``decode_audio`` does; ``truncated_media``
    when it ends short of ``claimed`` (by more than one codec frame) or the last packet was cut short."""
    codec = stream.codec_context.name
    samples, rate, packets, last_cut = 0, None, 0, False
    try:
        for packet in container.demux(stream):
            if packet.size:
                packets, last_cut = packets + 1, bool(packet.is_corrupt)
            for frame in packet.decode():  # the empty end-of-stream packet drains the decoder
                if rate is None:
                    rate = frame.sample_rate
                elif frame.sample_rate != rate:
                    raise _rate_change(part, rate, frame.sample_rate)
                samples += frame.samples
    except DropError:
        raise
    except Exception as exc:  # PyAV's own errors: a packet the demuxer or the decoder refuses
        if claimed is not None and samples < claimed:
            raise DropError(Reason.TRUNCATED_MEDIA, f"{part}: audio cut short: the header says {claimed} samples, "
                                                    f"{samples} decode before an error ({_line(exc)})") from None
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: audio does not decode ({codec}: {_line(exc)})") from None
    slack = stream.codec_context.frame_size or 1152
    if last_cut:
        raise DropError(Reason.TRUNCATED_MEDIA, f"{part}: audio cut short: its last packet (of {packets}) runs "
                                                "past the end of the file")  # fmt: skip
    if claimed is not None and samples + slack < claimed:
        raise DropError(Reason.TRUNCATED_MEDIA, f"{part}: audio cut short: the header says {claimed} samples, "
                                                f"the data decodes to {samples}")  # fmt: skip
    return samples, rate or int(stream.codec_context.sample_rate)


def _packets(container, stream, part: str):
    """The stream's packets as the demuxer returns them, without PyAV's empty end-of-stream one."""
    try:
        for packet in container.demux(stream):
            if packet.size or packet.pts is not None or packet.dts is not None:
                yield packet
    except Exception as exc:
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: audio does not demux ({_line(exc)})") from None


def _mp3_claim(data: bytes, stream, rate: int) -> int | None:
    """An MP3's sample count from its first frame's Xing / Info / VBRI tag, as FFmpeg's demuxer reads it into the
    stream's duration (LAME's delay and padding taken off); None for any other file, or an MP3 without a tag
    (then the duration is FFmpeg's estimate from the bit rate and file size, no claim to hold it to)."""
    if stream.codec_context.name not in ("mp3", "mp3float") or not stream.duration:
        return None
    pos = 0
    if data[:3] == b"ID3" and len(data) >= 10:  # ID3v2: 10-byte header, synchsafe size, optional footer
        size = int.from_bytes(bytes(b & 0x7F for b in data[6:10]), "big")
        pos = 10 + size + (10 if data[5] & 0x10 else 0)
    while pos + 4 <= len(data) and data[pos] == 0:  # padding before the first frame
        pos += 1
    if pos + 40 > len(data) or data[pos] != 0xFF or data[pos + 1] & 0xE0 != 0xE0:
        return None
    mpeg1, mono = (data[pos + 1] >> 3) & 3 == 3, data[pos + 3] >> 6 == 3
    xing = pos + 4 + (32 if mpeg1 and not mono else 17 if mpeg1 or not mono else 9)  # after the side information
    tagged = data[xing : xing + 4] in (b"Xing", b"Info") and data[xing + 7] & 1  # the frames field is present
    if not (tagged or data[pos + 36 : pos + 40] == b"VBRI"):
        return None
    return round(Fraction(stream.duration) * stream.time_base * rate)


def _check_structure(data: bytes, part: str) -> None:
    """The container's own sizes against the file (module doc), before PyAV opens it."""
    if check_container(data, part=part):  # MP4 / M4A, Matroska / WebM, AVI: video_integrity's walks
        return
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        _check_wav(data, part)
    elif data[:4] == b"OggS":
        _check_ogg(data, part)


def _check_wav(data: bytes, part: str) -> None:
    """RIFF chunks from byte 12 to the ``data`` chunk, whose size must fit in the file. FFmpeg's WAV demuxer
    clamps a size past the end to the file and reads on, so a cut WAV opens as a shorter one: the count is
    taken here. A size of 0xFFFFFFFF (a writer that could not seek back) declares nothing."""
    pos, size, align = 12, len(data), 0
    while pos + 8 <= size:
        kind, length = bytes(data[pos : pos + 4]), int.from_bytes(data[pos + 4 : pos + 8], "little")
        if kind == b"fmt " and pos + 22 <= size:
            align = int.from_bytes(data[pos + 20 : pos + 22], "little")  # nBlockAlign: bytes per sample frame
        if kind == b"data":
            held = size - pos - 8
            if length != 0xFFFFFFFF and length > held:
                what = (f"the header says {length // align} samples, the data holds {held // align}" if align
                        else f"its data chunk declares {length} bytes, the file holds {held}")  # fmt: skip
                raise cut_error(part, "WAV", what, size)
            return
        pos += 8 + length + (length & 1)
    if pos > size:
        raise cut_error(part, "WAV", f"a chunk before the audio data runs {pos - size} bytes past the end", size)
    raise corrupt_error(part, "WAV", "no data chunk")


def _check_ogg(data: bytes, part: str) -> None:
    """Ogg pages from byte 0 (``OggS``, 27-byte header, segment table, body): each inside the file, and the last
    one flagged end-of-stream (RFC 3533), which a file cut at a page boundary lacks. FFmpeg's demuxer takes the
    length from the last page it finds, so a cut Ogg opens as a shorter clip. Bytes that are not a page end the
    walk (trailing bytes are not ours to judge)."""
    pos, size, last = 0, len(data), -1
    while pos + 27 <= size and data[pos : pos + 4] == b"OggS":
        segments = data[pos + 26]
        if pos + 27 + segments > size:
            break
        end = pos + 27 + segments + sum(data[pos + 27 : pos + 27 + segments])
        if end > size:
            raise cut_error(part, "Ogg", f"its page at byte {pos} declares {end - pos} bytes, the file ends "
                                         f"{end - size} bytes before its end", size)  # fmt: skip
        last, pos = pos, end
    if last >= 0 and pos < size and data[pos : pos + 4] == b"OggS"[: size - pos]:
        raise cut_error(part, "Ogg", f"the file ends inside a page header at byte {pos}", size)
    if last >= 0 and not data[last + 5] & 0x04:
        raise cut_error(part, "Ogg", f"its last page (at byte {last}) does not end the stream (no end-of-stream "
                                     "flag)", size)  # fmt: skip


def _mono(frame) -> np.ndarray:
    planes = frame.to_ndarray()  # fltp: [channels, samples]
    return planes[0] if planes.shape[0] == 1 else planes.mean(axis=0, dtype=np.float32)


def _rate_change(part: str, rate: int, new: int) -> DropError:
    return DropError(Reason.CORRUPT_MEDIA, f"{part}: the audio stream changes its sample rate part-way ({rate} Hz, "
                                           f"then {new} Hz): re-encode it at one rate")  # fmt: skip


@contextlib.contextmanager
def _opened(data: bytes, part: str) -> Iterator[tuple]:
    """PyAV's container on ``data`` and its first audio stream, decoded by one thread (FLAC's decoder would
    start frame threads), as both the probe and the loader's decode open it."""
    import av

    try:
        container = av.open(io.BytesIO(data))
    except Exception as exc:
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: not a readable audio file (PyAV: {_line(exc)})") from None
    with container:
        if not container.streams.audio:
            kinds = ", ".join(stream.type for stream in container.streams) or "none"
            raise DropError(Reason.CORRUPT_MEDIA, f"{part}: no audio stream in this {container.format.name} file "
                                                  f"(its streams: {kinds})")  # fmt: skip
        stream = container.streams.audio[0]
        stream.codec_context.thread_count = 1
        stream.codec_context.thread_type = "NONE"
        yield container, stream


def _line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
