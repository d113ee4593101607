"""``media.video_integrity``: every video PyAV writes passes whole under every reader; the same file cut does not.

The oracle is PyAV's decode of every frame: a cut file is bad when it fails or gives fewer frames than the
original. It agrees with the scan's checks on every cut but one class, asserted exactly: a cut after the
last frame's bytes (an MP4 ``moov`` at the end losing its tail, Matroska's trailing ``Cues``, AVI's ``idx1``),
which every frame still decodes from, and which the container walk drops because the file was cut.
"""

from __future__ import annotations

import importlib.util

import pytest
from _cut_media import cut_offsets, damaged, end_of_packets, pyav_frames, videos
from hypothesis import given, settings
from hypothesis import strategies as st

from vlmpack_offline.media import check_container, check_packets, probe_video
from vlmpack_offline.media.video_integrity import PacketSpan, tolerance
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.videos import corpus, encode

READERS = ["torchcodec", "pyav"] + (["decord"] if importlib.util.find_spec("decord") else [])
HEADERLESS = (".mkv", ".webm")  # pyav reads no frame count from them: a corrupt_media drop, whole or cut


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, bytes]:
    return videos(tmp_path_factory.mktemp("clips"))


def _scan_verdict(data: bytes, reader: str, *, container: bool = True) -> DropError | None:
    """What the scan says of a video part: the container walk, the reader's probe, the packet check."""
    try:
        if container:
            check_container(data, part="v")
        check_packets(probe_video(data, reader=reader, part="v").span, part="v")
    except DropError as exc:
        return exc
    return None


def test_every_clip_of_the_fidelity_corpus_passes_whole_under_every_reader():
    """The quick corpus plus every clip with a start offset or a variable rate: the header's duration is met
    within the tolerance by every container (Matroska's DURATION counts from 0, not from the first frame)."""
    specs = corpus(quick=True) + [s for s in corpus() if (s.offset or s.vfr) and s not in corpus(quick=True)]
    for spec in specs:
        data = encode(spec)
        assert check_container(data) in ("MP4", "Matroska", "AVI"), spec.name
        for reader in READERS:
            if reader == "pyav" and spec.name.endswith(HEADERLESS):
                continue
            assert _scan_verdict(data, reader) is None, (spec.name, reader, str(_scan_verdict(data, reader)))


def test_the_clips_pass_whole(clips):
    for name, data in clips.items():
        for reader in READERS:
            if not (reader == "pyav" and name.endswith(HEADERLESS)):
                assert _scan_verdict(data, reader) is None, (name, reader)
    first, last = clips["moov_first.mp4"], clips["moov_last.mp4"]
    assert first.index(b"moov") < first.index(b"mdat") and last.index(b"mdat") < last.index(b"moov")


@pytest.mark.parametrize("name", ["moov_last.mp4", "moov_first.mp4", "vfr_moov_first.mp4", "offset.mov",
                                  "bframes.mkv", "vp9.webm", "mpeg4.avi"])  # fmt: skip
def test_no_cut_passes_and_pyav_agrees_but_on_cuts_after_the_last_frame(clips, name):
    data = clips[name]
    whole = pyav_frames(data)
    packets_end = end_of_packets(data)
    for cut in cut_offsets(len(data), spread=40):
        piece = data[:cut]
        verdict = _scan_verdict(piece, "torchcodec")
        assert verdict is not None, f"{name} cut at {cut} of {len(data)} passes"
        if cut >= 16:  # the container's first header is there: the walk calls a cut a cut
            assert verdict.reason is Reason.TRUNCATED_MEDIA, (cut, str(verdict))
        decoded = pyav_frames(piece)
        if decoded == whole:  # every frame decodes: only when the cut lies after every frame's bytes
            assert cut >= packets_end, f"{name} cut at {cut}: PyAV decodes it whole, the scan drops it"


@pytest.mark.parametrize("name", ["moov_first.mp4", "vfr_moov_first.mp4", "vp9.webm", "mpeg4.avi"])
def test_the_packets_alone_tell_a_cut_that_loses_frames(clips, name):
    """Without the container walk (a streamed Matroska has no size to walk): every cut that loses a frame, as
    PyAV's decode counts them, is dropped by the probe or the packet check. Not under decord: decord 0.6 dies
    of a segmentation fault opening some cut AVIs, which the scan's container walk keeps from it."""
    data = clips[name]
    whole = pyav_frames(data)
    for cut in cut_offsets(len(data), spread=40)[64:]:
        piece = data[:cut]
        decoded = pyav_frames(piece)
        if decoded is not None and decoded == whole:
            continue
        for reader in ("torchcodec", "pyav"):
            assert _scan_verdict(piece, reader, container=False) is not None, (name, cut, reader, decoded, whole)


def test_a_cut_mp4_with_its_index_at_the_end_is_truncated_not_unreadable(clips):
    """PyAV writes ``moov`` last: a cut one cannot be opened at all, and used to be corrupt_media."""
    data = clips["moov_last.mp4"]
    verdict = _scan_verdict(data[: len(data) // 2], "torchcodec")
    assert verdict.reason is Reason.TRUNCATED_MEDIA and "box 'mdat'" in str(verdict)


def test_the_tolerance_is_half_a_frame_and_a_lost_frame_exceeds_it():
    """30 fps: 16.7 ms; a 1000 fps clip in a millisecond container still gets 5 ms, its rounding is 1 ms."""
    span = PacketSpan(packets=60, end=2.0, interval=1 / 30, claimed_end=2.0, claimed_packets=None, last_cut=False)
    assert tolerance(span) == pytest.approx(1 / 60)
    check_packets(span)
    with pytest.raises(DropError, match="packets end at 1.967 s, its header claims 2.000 s") as caught:
        check_packets(PacketSpan(packets=59, end=2.0 - 1 / 30, interval=1 / 30, claimed_end=2.0,
                                 claimed_packets=None, last_cut=False))  # fmt: skip
    assert caught.value.reason is Reason.TRUNCATED_MEDIA
    check_packets(PacketSpan(packets=1000, end=0.999, interval=0.001, claimed_end=1.0, claimed_packets=None,
                             last_cut=False))  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(cut=st.floats(0.0, 1.0), flips=st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 255)), max_size=4),
       which=st.integers(0, 6))  # fmt: skip
def test_the_container_walk_on_damage_of_any_kind_drops_or_passes_never_crashes(clips, cut, flips, which):
    """Cut anywhere and bytes flipped anywhere (a box size, an EBML width byte, a RIFF size): the walk returns or
    raises DropError, nothing else."""
    try:
        check_container(damaged(clips[sorted(clips)[which]], cut, flips), part="v")
    except DropError as exc:
        assert exc.reason in (Reason.TRUNCATED_MEDIA, Reason.CORRUPT_MEDIA)

