"""Audio facts read from the container, and the decode the loader hands the feature extractor.

An audio item's tokens are a function of one number: its length in samples at the feature extractor's
sampling rate, after the loader decodes it to mono and resamples it. The scan reads the stream's own
length at its native rate (``probe_audio``) and maps it with ``resampled_length``; the loader decodes and
resamples (``decode_audio``) to exactly that length, so the two cannot drift.

Both open the bytes with PyAV the same way (``_opened``: the first audio stream, one decoder thread, a small
``probesize``), and the probe's count is the number of samples that decoder hands out, found per codec::

    codec                     samples                                      proven by
    pcm_* in WAV: 8-32 bit    data chunk bytes / block_align, read off     the chunks are ones wavdec.c reads as
    int, 32/64 bit float,     the RIFF chunks without PyAV (wav_header)    plain PCM: no IEC 61937 burst or MP3 /
    EXTENSIBLE too                                                         AC-3 sync a probe could claim, one data
                                                                           chunk of whole frames (else: next row)
    pcm_* in other WAVs       data chunk bytes / block_align (FFmpeg's     the data chunk fits in the file
                              PCM decoder: bytes / (channels * width))     (audio_headers.walk)
    aac (LC, SBR signalled    AAC: 1024 x the index entries mov_fix_index  read off moov without PyAV (mp4_audio):
    absent) or alac in a      keeps, trimmed (``_trimmed``); ALAC: the     one sound track, not fragmented, every
    plain MP4 / M4A           entries' durations, each its frame header's  sample inside the file, no edit list or
                              count                                        one plain entry (else: the rows below)
    pcm_* elsewhere, alac     the packets' durations summed (demux only)   the last packet is whole; they hold the
                                                                           header's length
    flac in .flac             STREAMINFO's total samples                   the frame headers FFmpeg's parser finds
                                                                           are frames 0..n-1 summing to it, each
                                                                           frame's CRC-16 checks out (flac_walk)
    flac elsewhere, or a      STREAMINFO's total samples                   the packets FFmpeg's parser finds hold it;
    .flac that walk declines                                               the last frame, decoded after a seek,
                                                                           ends there
    mp3 with a gapless tag    FFmpeg's stream duration (Xing frames less   the file holds every byte the Xing
    (LAME / Lavf / Lavc)      LAME's delay and padding, as it trims them)  header counts
    opus in Ogg (one stream)  last granule - pre-skip (RFC 7845), equal    the pages fit the file and match their
                              to FFmpeg's duration - its codec delay       CRCs, the last one ends the stream
                                                                           (audio_headers.walk)
    aac (LC) in raw ADTS,     1024 x the frames, without PyAV's demuxer    the file is a chain of ADTS frames of one
    mono or stereo            (``_adts_info``)                             layout to its last byte (adts_frames); the
                                                                           first, decoded alone, is 1024 samples at
                                                                           the header's rate and layout (no SBR / PS)
    aac (LC) in MP4 / M4A     1024 x the index entries FFmpeg's mov        the entries lie inside the file and are
                              demuxer keeps, trimmed (``_trimmed``)        the whole sample table (not fragmented)
    opus, flac, aac (LC) in   each block's samples (Opus TOC, FLAC block   the walk reads every Segment and Cluster
    Matroska / WebM (one      size, AAC 1024), trimmed by the first        child as FFmpeg's matroskadec does
    audio track)              packet's skip and the blocks' DiscardPadding (matroska_blocks); else it declines;
                              FLAC without PyAV (``_matroska_flac``)       FLAC: no CodecDelay, STREAMINFO's rate and
                                                                           channels are the track's (matroska_track)
    everything else (vorbis,  decoded and counted: the count *is* the      it decodes to its end; an MP3 Xing /
    mp3 untagged, flac        loader's decoder's                           VBRI count is not above it (one frame
    without a count, ...)                                                  of slack)

The trimmed rows replay libavcodec's ``discard_samples`` (decode.c) on the packets' frame counts: a packet's
AV_PKT_DATA_SKIP_SAMPLES side data sets the pending skip and an end discard, a packet flagged discard (mov's edit
list) is dropped against the skip, the skip is cut from the next frames' starts, the discard from that frame's
end. The side data is read off the first packet the demuxer hands out; the later ones' (Matroska's
DiscardPadding) from the walk, which ``tests/test_audio_walk.py`` holds to the demuxer's own packets. A walk
counts only what it can stand for: anything it cannot read as the demuxer does (an element of unknown size, a
laced block, a packet ``ff_opus_parse_packet`` refuses, an ID3 tag before ADTS frames) is counted by decoding.
What a walk cannot see is a packet whose coded data is damaged (AAC and Matroska packets carry no checksum): the
decoder fails on it, the walk counts it; ``check_decodes`` (``scan.decode_check``) drops it, as for MP3.

A lossy codec's header length is not the decoded length in general (AAC in MP4: the priming frame and the
last frame's padding; Opus: the pre-skip; MP3 without a gapless tag: the decoder delay), so those rows are
exact only where the rule above is the decoder's own (``tests/test_audio_media.py`` and ``test_audio_walk.py``
hold every row to a plain decode on clips of many lengths, rates and channel counts, and on damaged copies); the
rest are counted by decoding
(docs/performance.md, "Audio probing", has what each costs against decoding and feature extraction).

Before opening, the container's structure is walked to its end (``audio_headers.walk``; MP4 / M4A, Matroska /
WebM and AVI by ``video_integrity.check_container``). A file whose structure or header claims more than it holds
is ``truncated_media``; one that does not open, has no audio stream, does not decode or holds no samples is
``corrupt_media``. Every message starts with the part's name. Damage inside a file whose ends are whole is
caught where the format checks itself cheaply (Ogg's page CRCs; a FLAC frame's header CRC-8 and CRC-16, where
FFmpeg's parser loses a frame that fails either: the PyAV path sees the count fall short, flac_walk declines to
it). Elsewhere (a damaged MP3 frame header in the middle, which its decoder skips) decoding is the only proof:
``scan.decode_check``'s job, as for video.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..reasons import DropError, Reason
from .audio_headers import Blocks, Mp3Tag, Walked, adts_frames, matroska_blocks, matroska_track, mp3_tag, walk
from .av_libs import probed_format
from .flac_walk import flac_samples, streaminfo
from .mp4_audio import AAC_RATES, Mp4Audio, mp4_audio
from .wav_header import wav_samples

__all__ = ["AudioInfo", "probe_audio", "decode_audio", "check_decodes", "resampled_length"]

# FFmpeg reads this many bytes of packets to fill in stream facts (avformat_find_stream_info) before the first
# demux: its default, 5 MB, is half a minute of 44.1 kHz stereo PCM read on every open (23 ms of a WAV probe's 24).
# Every fact used here is in the headers of the formats written by synthetic.audio, and the tests' oracle decodes
# with FFmpeg's defaults and gets the same samples; a format whose facts need more reading would report 0 Hz or
# 0 channels, a recorded corrupt_media, never a wrong count.
_OPEN = {"probesize": "4096"}
_MOV = "mov,mp4,m4a,3gp,3g2,mj2"  # PyAV's name of FFmpeg's mov demuxer, as the PyAV path reports it
_MATROSKA = "matroska,webm"  # PyAV's name of FFmpeg's Matroska / WebM demuxer


@dataclass(frozen=True, slots=True, kw_only=True)
class AudioInfo:
    samples: int  # decoded samples per channel at sample_rate: exactly what decode_audio's PyAV decode hands out
    sample_rate: int  # the stream's rate in Hz as the decoder outputs it (Opus always decodes at 48000)
    channels: int  # the stream's channels (decode_audio averages them to mono)
    codec: str  # the codec (FFmpeg's canonical name), e.g. "pcm_s16le", "flac", "mp3", "opus", "aac"
    container: str  # PyAV's format name, e.g. "wav", "ogg", "mov,mp4,m4a,3gp,3g2,mj2"


def resampled_length(samples: int, rate: int, target: int) -> int:
    """The length of ``samples`` samples at ``rate`` Hz resampled to ``target`` Hz: ``ceil(samples * target /
    rate)``, librosa's convention (``librosa.resample`` fixes its output to this length), which the loader's
    decode keeps whatever the resampler's own filter delay gives (swresample's varies by a sample)."""
    if rate <= 0 or target <= 0:
        raise ValueError(f"sampling rates must be positive, got {rate} -> {target}")
    return samples if rate == target else -(-samples * target // rate)


def probe_audio(data: bytes, *, part: str) -> AudioInfo:
    """The first audio stream's decoded length, rate and channels (module doc: per codec, from the header or by
    decoding). Raises ``DropError``: ``truncated_media`` when the file holds less than it claims, ``corrupt_media``
    when it is not readable audio or holds none."""
    if (wav := wav_samples(data)) is not None:  # PCM in WAV, read as FFmpeg's demuxer and decoder read it
        return AudioInfo(samples=wav.samples, sample_rate=wav.sample_rate, channels=wav.channels, codec=wav.codec,
                         container="wav")  # fmt: skip
    if (flac := flac_samples(data)) is not None:  # FLAC in its own container, proven by its frame headers
        return AudioInfo(samples=flac.samples, sample_rate=flac.sample_rate, channels=flac.channels, codec="flac",
                         container="flac")  # fmt: skip
    walked = walk(data, part=part)
    if walked.container is None and (adts := _adts_info(data)) is not None:  # raw AAC, its first frame decoded
        return adts
    if walked.container == "Matroska" and (flac := _matroska_flac(data)) is not None:  # FLAC blocks, no PyAV
        return flac
    if walked.container == "MP4" and (mp4 := mp4_audio(data)) is not None and (samples := _mp4_samples(mp4)) is not None:
        if samples <= 0:  # AAC whose packets the edit list discards: the decoder hands out nothing
            raise DropError(Reason.CORRUPT_MEDIA, f"{part}: the {mp4.codec} stream holds no audio (0 samples)")
        return AudioInfo(samples=samples, sample_rate=mp4.sample_rate, channels=mp4.channels, codec=mp4.codec,
                         container=_MOV)  # fmt: skip
    with _opened(data, part) as (container, stream):
        context = stream.codec_context
        codec, rate, channels = context.codec.canonical_name, int(context.sample_rate), int(context.channels)
        fmt = container.format.name
        samples = _from_header(data, walked, container, stream, rate, part)
    if samples is None:  # counted by decoding, in a fresh container: a demux above used the first one up
        with _opened(data, part) as (container, stream):
            samples, rate = _decoded_samples(container, stream, _claim(data, stream, rate), part)
    if samples <= 0:
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: the {codec} stream holds no audio (0 samples)")
    if rate <= 0 or channels <= 0:
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: the {codec} stream reports {rate} Hz, {channels} channels")
    return AudioInfo(samples=samples, sample_rate=rate, channels=channels, codec=codec, container=fmt)


def decode_audio(data: bytes, *, sampling_rate: int, part: str) -> np.ndarray:
    """The first audio stream as float32 mono at ``sampling_rate`` Hz, of exactly
    ``resampled_length(probe.samples, probe.sample_rate, sampling_rate)`` samples.

    Each decoded frame goes through one ``av.AudioResampler`` (swresample) to float planar at ``sampling_rate``,
    keeping its channels (at the stream's own rate it only converts the sample format); the channels are then
    averaged, and the result is cut or zero-padded at its end to that length (``librosa.resample``'s fix_length;
    swresample's flushed length is within a sample or two of it). The average is what transformers' ``load_audio``
    does on its soundfile and torchaudio backends (``audio_utils.py``: ``waveform.mean``), where its torchcodec
    backend (``AudioDecoder(num_channels=1)``) lets swresample's matrix mix down; averaging before or after
    resampling is the same up to float rounding, both being linear. Memory: one decoded frame at a time at the
    stream's rate, the mono output in chunks and once more fixed to its length: linear in the clip."""
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
            codec = stream.codec_context.codec.canonical_name
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


def check_decodes(data: bytes, *, samples: int, part: str) -> None:
    """``scan.decode_check`` for audio: the stream decodes to its end, to exactly the ``samples`` its probe counted.
    A damaged frame in the middle that the decoder skips (an MP3 frame header, an ALAC packet) leaves the file's
    ends and header whole, so only a decode finds it; ``corrupt_media`` naming both counts."""
    with _opened(data, part) as (container, stream):
        decoded, _ = _decoded_samples(container, stream, None, part)
    if decoded != samples:
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: the audio decodes to {decoded} samples where its header and "
                                              f"packets hold {samples}: a damaged frame the decoder skipped")  # fmt: skip


def _from_header(data: bytes, walked: Walked, container, stream, rate: int, part: str) -> int | None:
    """The decoded length where the file's structure proves it (module table), else None: decode to count."""
    codec = stream.codec_context.codec.canonical_name
    if codec.startswith("pcm_") and walked.wav_data is not None and walked.wav_frame:
        return walked.wav_data // walked.wav_frame  # FFmpeg's PCM decoder: bytes / (channels * width), floored
    if codec.startswith("pcm_"):  # ALAC that mp4_audio declined is counted by decoding: its packets' durations
        return _packet_samples(container, stream, rate, part, pcm=True)  # (stts) are not what its frames decode to
    if codec == "flac" and stream.duration:
        return _flac_samples(container, stream, rate, part)
    if codec == "mp3" and (tag := mp3_tag(data)) is not None and tag.gapless and tag.audio_bytes:
        return _mp3_samples(tag, stream, rate, part)
    if codec == "aac" and walked.container == "MP4" and _aac_plain(stream, rate):
        return _mp4_aac_samples(container, stream, len(data), part)
    if walked.container == "Matroska" and (codec in ("opus", "flac") or codec == "aac" and _aac_plain(stream, rate)):
        return _matroska_samples(data, container, stream, rate, part)
    if codec == "opus" and walked.ogg_serials == 1 and walked.opus_preskip is not None:
        samples = walked.ogg_granule - walked.opus_preskip  # RFC 7845: the last granule less the pre-skip
        agrees = stream.duration is not None and stream.duration - stream.codec_context.delay == samples
        return samples if agrees and not stream.start_time and stream.time_base == Fraction(1, rate) else None
    return None


_AAC_FRAME = 1024  # samples per AAC-LC frame: FFmpeg's decoder outputs one such frame per packet


def _aac_plain(stream, rate: int) -> bool:
    """AAC-LC with 1024-sample frames at an MPEG-4 rate, as FFmpeg opened it (SBR or PS found in the first frames
    it decodes, or signalled, would make it HE-AAC, at twice the rate): every packet decodes to 1024 samples."""
    context = stream.codec_context
    return context.profile == "LC" and context.frame_size == _AAC_FRAME and rate in AAC_RATES


def _adts_info(data: bytes) -> AudioInfo | None:
    """Raw ADTS AAC-LC, mono or stereo, without PyAV's demuxer: 1024 samples per frame (``audio_headers.adts_frames``),
    no skip (FFmpeg's ``aac`` demuxer marks none). Two things ``av.open`` would find out are asked of FFmpeg
    directly: that its format probe picks the ``aac`` demuxer (``av_libs.probed_format``: a file of one or two
    frames, for one, ties with another format and does not open), and that the decoder's first frame is 1024
    samples at the header's rate and layout; SBR or PS in it (implicit HE-AAC: twice the rate, 2048 samples, mono
    decoded as stereo) sends the file to the PyAV path, which decodes it. SBR first met in a later frame switches
    FFmpeg's decoder to twice the rate there (``decode_audio`` refuses a rate change): no header shows it, so such a
    stream is counted as LC, as the PyAV path counts it, and only a decode (``check_decodes``, the scan's
    ``decode_check``) drops it. None where the file is no such chain or either answer differs."""
    frames = adts_frames(data)
    if frames is None or data[2] >> 6 != 1:  # profile: audio object type - 1, LC = 1
        return None
    rate, channels = AAC_RATES[(data[2] >> 2) & 0x0F], ((data[2] & 1) << 2) | (data[3] >> 6)
    if channels not in (1, 2) or probed_format(data) != "aac":  # channel_configuration 1-2: mono, stereo
        return None
    import av

    first = ((data[3] & 3) << 11) | (data[4] << 3) | (data[5] >> 5)
    try:
        decoded = av.CodecContext.create("aac", "r").decode(av.Packet(data[:first]))
    except av.FFmpegError:
        return None
    if [(f.samples, f.sample_rate, f.layout.nb_channels) for f in decoded] != [(_AAC_FRAME, rate, channels)]:
        return None
    return AudioInfo(samples=frames * _AAC_FRAME, sample_rate=rate, channels=channels, codec="aac", container="aac")


def _mp4_aac_samples(container, stream, size: int, part: str) -> int | None:
    """AAC in MP4: FFmpeg's mov demuxer turns the edit list into its index (``stream.index_entries``, built when
    the file opens): samples before the edit's start flagged discard, samples past its end left out, the priming
    as the first packet's skip_samples. The decoder turns each packet into 1024 samples and trims them as
    ``_trimmed`` does. None where the index is not the whole sample table (a fragmented file) or an entry is not
    inside the file. The reference for ``mp4_audio``, which reads the same index off the moov box where it can."""
    entries = stream.index_entries
    if not stream.frames or not len(entries) or len(entries) > stream.frames:
        return None
    first = next(_packets(container, stream, part), None)
    if first is None:
        return None
    discards = []
    for entry in entries:
        if entry.size <= 0 or entry.pos < 0 or entry.pos + entry.size > size:
            return None
        discards.append(entry.is_discard)
    return _aac_packets(discards, _skip_samples(first))


def _aac_packets(discards, side: tuple[int, int] | None) -> int:
    """The samples the AAC decoder hands out for packets of 1024 samples flagged ``discards`` (AV_PKT_FLAG_DISCARD)
    when the first carries skip side data ``side``: each trimmed as ``_trimmed`` does while a skip is pending,
    the rest whole, or dropped."""
    skip, total, index = 0, 0, 0
    while index < len(discards) and (index == 0 or skip):  # the leading packets a skip still cuts
        kept, skip = _trimmed(_AAC_FRAME, bool(discards[index]), side if index == 0 else None, skip)
        total, index = total + kept, index + 1
    dropped = int(np.count_nonzero(discards[index:]))
    return total + _AAC_FRAME * (len(discards) - index - dropped)  # the rest: whole, or dropped


def _mp4_samples(mp4: Mp4Audio) -> int | None:
    """What the decoder hands out for the packets ``mp4_audio`` read: AAC's 1024-sample frames trimmed by the
    first packet's skip and the discard flags (``_aac_packets``, as ``_mp4_aac_samples`` does on PyAV's packets);
    ALAC's packet durations, as ``_packet_samples`` sums them, where none is discarded or skipped and they hold
    the stream's duration (else None: the PyAV path judges it)."""
    if mp4.codec == "aac":
        return _aac_packets(mp4.discards, (mp4.skip, 0) if mp4.skip else None)
    if mp4.skip or mp4.discards.any() or mp4.durations < mp4.claimed:
        return None
    return mp4.durations


def _matroska_samples(data: bytes, container, stream, rate: int, part: str) -> int | None:
    """Opus, FLAC or AAC-LC in Matroska / WebM: each block's samples (``audio_headers.matroska_blocks``), the first packet's
    skip (FFmpeg's CodecDelay, read off the packet the demuxer hands out) and the blocks' DiscardPadding, trimmed
    as the decoder does (``_trimmed``). Opus decodes at 48 kHz, mono or stereo here (more channels: decoded)."""
    codec, skip = stream.codec_context.codec.canonical_name, 0
    if codec == "opus":
        head = stream.codec_context.extradata or b""  # the OpusHead: version, channels, pre-skip (LE16) ... mapping
        if rate != 48000 or stream.codec_context.channels > 2 or len(head) < 19 or head[8] > 15 or head[18]:
            return None
        skip = int.from_bytes(head[10:12], "little")
    blocks = matroska_blocks(data, codec=codec, rate=rate)
    if not blocks:
        return None
    first = next(_packets(container, stream, part), None)
    if first is None:
        return None
    # the Opus decoder starts with the OpusHead pre-skip pending (ff_opus_parse_extradata, libavcodec/opus/parse.c,
    # sets the skip to it); the first packet's side data, where there is one, replaces it
    return _trimmed_blocks(blocks, _skip_samples(first), skip)


def _matroska_flac(data: bytes) -> AudioInfo | None:
    """FLAC in Matroska without PyAV: the track's facts as matroskadec.c reads them (``matroska_track``), each block's
    samples and DiscardPadding (``matroska_blocks``), trimmed as ``_matroska_samples`` trims PyAV's. The decoder's
    rate and channels are STREAMINFO's (matroska_parse_flac hands it over as extradata, flac_decode_init reads it),
    taken only where SamplingFrequency and Channels say the same. With no CodecDelay nothing is skipped at the start
    but the first block's own DiscardPadding, which rides on the first packet as (0, padding). None (the PyAV path)
    for any other codec, a delay, another output rate, or facts that disagree."""
    track = matroska_track(data)
    if track is None or track.codec_id != "A_FLAC" or track.delay or track.output_rate not in (None, track.rate):
        return None
    info = streaminfo(track.private)
    if info is None or info.start != len(track.private) or (track.rate, track.channels) != (info.rate, info.channels):
        return None
    blocks = matroska_blocks(data, codec="flac", rate=info.rate)
    if not blocks:
        return None
    first = (0, blocks.discards[0]) if 0 in blocks.discards else None
    samples = _trimmed_blocks(blocks, first, 0)
    if samples <= 0:
        return None
    return AudioInfo(samples=samples, sample_rate=info.rate, channels=info.channels, codec="flac",
                     container=_MATROSKA)  # fmt: skip


def _skip_samples(packet) -> tuple[int, int] | None:
    """A packet's AV_PKT_DATA_SKIP_SAMPLES side data as (skip at start, discard at end), None without."""
    if not packet.has_sidedata("skip_samples"):
        return None
    raw = bytes(packet.get_sidedata("skip_samples"))
    return max(0, int.from_bytes(raw[0:4], "little", signed=True)), int.from_bytes(raw[4:8], "little")


def _trimmed_blocks(blocks: Blocks, first: tuple[int, int] | None, skip: int) -> int:
    """The samples the decoder hands out for ``blocks`` (``_trimmed``): the first with the demuxer's side data, a
    later one with a DiscardPadding with it as side data (skip 0, as FFmpeg's matroskadec writes it). Once no skip
    is pending, a block without side data is handed out whole: those are summed, not stepped through."""
    samples, discards = blocks.samples, blocks.discards
    total, index = 0, 0
    while index < len(samples) and (index == 0 or skip):  # the leading blocks a skip still cuts
        side = first if index == 0 else (0, discards[index]) if index in discards else None
        kept, skip = _trimmed(samples[index], False, side, skip)
        total, index = total + kept, index + 1
    total += sum(samples[index:])
    for at, pad in discards.items():  # with no skip pending, side data (0, pad) only cuts the pad from the end
        if at >= index and 0 < pad <= samples[at]:
            total -= pad
    return total


def _trimmed(samples: int, discard: bool, side: tuple[int, int] | None, skip: int) -> tuple[int, int]:
    """(samples handed out, skip left) for one decoded frame of ``samples``: FFmpeg's ``discard_samples``
    (libavcodec/decode.c): side data sets the pending skip; a frame flagged discard is dropped and counts against
    the skip; the skip is cut from the frame's start, then a discard padding no larger than what is left from its
    end."""
    pad = 0
    if side is not None:
        skip, pad = side
    if discard:
        return 0, max(0, skip - samples)
    if skip >= samples:
        return 0, skip - samples
    samples, skip = samples - skip, 0
    if 0 < pad <= samples:
        samples -= pad
    return samples, skip


def _samples_at(value: int, stream, rate: int) -> int | None:
    """``value`` in the stream's time base as a whole number of samples at ``rate``; None when it is not one."""
    samples = Fraction(value) * stream.time_base * rate
    return int(samples) if samples.denominator == 1 else None


def _packet_samples(container, stream, rate: int, part: str, *, pcm: bool = False) -> int | None:
    """The samples the packets hold, from their durations (demux only), checked against the header's length; None
    when a packet has no duration. ``pcm``: also None where a packet's duration is not its bytes' samples (FFmpeg's
    PCM decoder gives bytes / (channels * width) whatever the container's timing says: a damaged duration table is
    counted by decoding); FLAC's parser makes its packets' durations from the frame headers themselves."""
    context = stream.codec_context
    frame = context.format.bytes * context.channels if pcm and context.format is not None else 0
    if pcm and (not frame or stream.time_base != Fraction(1, rate)):
        return None
    total, packets, last_cut = 0, 0, False
    for packet in _packets(container, stream, part):
        if not packet.duration or pcm and packet.size != packet.duration * frame and not packet.is_corrupt:
            return None  # (a cut last packet is short of its duration: truncated_media below)
        total, packets, last_cut = total + packet.duration, packets + 1, bool(packet.is_corrupt)
    if last_cut:
        raise DropError(Reason.TRUNCATED_MEDIA, f"{part}: audio cut short: its last packet (of {packets}) runs "
                                                "past the end of the file")  # fmt: skip
    held = _samples_at(total, stream, rate)
    claimed = _samples_at(stream.duration, stream, rate) if stream.duration else None
    if held is not None and claimed is not None and held < claimed:
        raise DropError(Reason.TRUNCATED_MEDIA, f"{part}: audio cut short: the header says {claimed} samples, "
                                                f"the data holds {held}")  # fmt: skip
    return held


def _flac_samples(container, stream, rate: int, part: str) -> int | None:
    """STREAMINFO's total samples, proven twice: the packets FFmpeg's FLAC parser finds (a frame whose header is
    damaged is merged into the one before, its samples lost) must hold that many, and the last frame, decoded after
    a seek, must end exactly there (a frame cut short still parses as a packet of its full length, but does not
    decode). None when the seek fails, the frames carry no timestamps, or the packets hold more than the total: then
    the decoder's count decides. The reference for ``flac_walk.flac_samples``, which answers first where it can and
    leaves every file it cannot stand for (and FLAC in other containers) to this."""
    total = _samples_at(stream.duration, stream, rate)
    if total is None or stream.time_base != Fraction(1, rate) or stream.start_time:
        return None
    if _packet_samples(container, stream, rate, part) != total:  # fewer: truncated_media, raised there
        return None
    try:
        container.seek(stream.duration - 1, stream=stream, backward=True)
    except Exception:  # FFmpeg finds no frame to seek to (a clip of one frame): decode it all instead
        return None
    end = 0
    try:
        for frame in container.decode(stream):
            if frame.pts is None:
                return None
            end = max(end, frame.pts + frame.samples)
    except Exception as exc:  # PyAV's own errors: the last frame is cut short or damaged
        raise DropError(Reason.TRUNCATED_MEDIA, f"{part}: FLAC cut short: the header says {total} samples, its "
                                                f"last frames do not decode ({_line(exc)})") from None  # fmt: skip
    if end < total:
        raise DropError(Reason.TRUNCATED_MEDIA, f"{part}: FLAC cut short: the header says {total} samples, the "
                                                f"data holds {end}")  # fmt: skip
    return total if end == total else None


def _mp3_samples(tag: Mp3Tag, stream, rate: int, part: str) -> int | None:
    """An MP3 with LAME's gapless header: FFmpeg's stream duration (the frames less the encoder delay and padding,
    which its decoder trims), once the file holds every byte the header counts."""
    if tag.audio_bytes > tag.held:
        raise DropError(Reason.TRUNCATED_MEDIA, f"{part}: MP3 cut short: its Xing header counts {tag.frames} frames "
                                                f"in {tag.audio_bytes} bytes, the file holds {tag.held}")  # fmt: skip
    return _samples_at(stream.duration, stream, rate) if stream.duration else None


def _decoded_samples(container, stream, claim: tuple[int, int] | None, part: str) -> tuple[int, int]:
    """(samples, rate) the decoder hands out, decoding every packet as ``decode_audio`` does; ``truncated_media``
    when it ends short of the header's ``claim`` (``_claim``) or the last packet was cut short."""
    codec = stream.codec_context.codec.canonical_name
    claimed, slack = claim or (None, 0)
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


def _claim(data: bytes, stream, rate: int) -> tuple[int, int] | None:
    """(samples, slack): the length a header states exactly enough to hold the decoded count to, within ``slack``
    samples: FLAC's STREAMINFO total (exact), or the count an MP3's Xing / VBRI header gives FFmpeg's duration
    (one frame: a tag without LAME's delay and padding is off by the decoder's delay). None for any other file,
    or an MP3 without a tag (then the duration is FFmpeg's estimate from the bit rate and the file's size)."""
    codec = stream.codec_context.codec.canonical_name
    if not stream.duration or codec not in ("flac", "mp3"):
        return None
    samples = round(Fraction(stream.duration) * stream.time_base * rate)
    if codec == "flac":
        return (samples, 0) if stream.time_base == Fraction(1, rate) else None
    return (samples, stream.codec_context.frame_size or 1152) if mp3_tag(data) is not None else None


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

    if not data:
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: empty (0 bytes): no audio file")
    try:
        container = av.open(io.BytesIO(data), options=_OPEN)
    except Exception as exc:
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: not a readable audio file (PyAV: {_line(exc)})") from None
    with container:
        if not container.streams.audio:
            kinds = ", ".join(stream.type for stream in container.streams) or "none"
            raise DropError(Reason.CORRUPT_MEDIA, f"{part}: no audio stream in this {container.format.name} file "
                                                  f"(its streams: {kinds})")  # fmt: skip
        stream = container.streams.audio[0]
        if stream.codec_context is None:  # PyAV wraps no context around a codec its FFmpeg cannot decode
            raise DropError(Reason.CORRUPT_MEDIA, f"{part}: PyAV's FFmpeg has no decoder for this audio stream's "
                                                  f"codec (stream {stream.index})")  # fmt: skip
        stream.codec_context.thread_count = 1
        stream.codec_context.thread_type = "NONE"
        yield container, stream


def _line(exc: Exception) -> str:
    """The error's first line; PyAV's own errors by FFmpeg's message alone (their text ends with the file name,
    which for bytes in memory is the placeholder ``'<none>'``)."""
    if isinstance(getattr(exc, "strerror", None), str) and getattr(exc, "errno", None) is not None:
        return exc.strerror
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
