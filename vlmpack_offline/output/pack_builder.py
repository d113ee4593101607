"""What goes into one packed sample: its JSON part and where each media part's bytes come from.

The write stage builds packs with it, and ``verify`` rebuilds the same mapping to
compare bytes, so both read one definition::

    Pack(sample_ids=("a.tar/k1", "a.tar/k2"))
      k1: messages [image img0.jpg, text]         -> m0000.jpg <- a.tar @ (offset, size) of k1.img0.jpg
      k2: messages [image x.png, image y.png]     -> m0001.png, m0002.png

Media parts are numbered over the whole pack in the order the sub-samples and
their media items appear; a part a conversation names twice is stored once.
"""

from __future__ import annotations

import io
import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..artifacts import canonical_json
from ..conversation import MEDIA_KINDS, Conversation, parse_conversation
from ..errors import LengthMismatchError, ShardError
from ..layouts import Layout, layout_for
from ..layouts.base import sample_kind
from ..manifest import SampleRecord
from ..packed_format import JSON_PART, PackedSample, PackedSubSample
from ..reasons import DropError
from ..tario import is_url, open_source, read_range
from .tar_writer import SourceRange

__all__ = [
    "MediaSource", "BuiltPack", "SourceFiles", "Materializer", "build_pack", "json_part_of", "ids_npy_bytes",
    "layout_json_bytes",
]

# (source conversation, media bytes in conversation.media order) -> (input_ids, assistant_mask)
Materializer = Callable[[Conversation, list[bytes]], tuple[list[int], list[int]]]
_MEDIA_KINDS = frozenset(MEDIA_KINDS)


@dataclass(frozen=True, slots=True, kw_only=True)
class MediaSource:
    part: str  # part name inside the pack, e.g. "m0003.jpg"
    shard: str  # manifest shard relpath the bytes come from
    source_part: str  # part name in the source sample, e.g. "img1.jpg"
    offset: int  # data offset in the source tar
    size: int  # bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class BuiltPack:
    sample: PackedSample  # the JSON part's content
    json_bytes: bytes  # canonical JSON of ``sample`` (sorted keys, UTF-8)
    media: tuple[MediaSource, ...]  # media parts in member order
    ids_npy: bytes | None = None  # ids.npy part (int32 [2, S]: input_ids, assistant mask) when materialized
    # (sample id, why) for each sub-sample the layout cannot hold; a pack with any is not written
    refusals: tuple[tuple[str, str], ...] = ()


def layout_json_bytes(layout: Layout, pack_json: bytes) -> bytes:
    """The layout's ``json`` part from vlmpack's pack JSON (a published layout's is derived from it)."""
    if not layout.published:
        return pack_json
    return canonical_json(layout.pack_json(PackedSample.from_json(json.loads(pack_json)))).encode()


class SourceFiles:
    """Open source tars by manifest shard name, a few at a time (an LRU of file handles).

    A local path is opened with ``open`` (and read with ``os.pread``, or handed to the tar
    writer as a ``SourceRange`` so its bytes go straight to the output); a URL (``s3://``,
    ``file://``, ``memory://``) is opened through fsspec (``tario.open_source``) and read by range.
    A file a ``SourceRange`` points into stays open until ``settle()`` (after the writer has
    taken the sample), whatever the LRU's size: its descriptor must not be closed and reused
    by another file while the range waits to be copied.
    """

    def __init__(self, shard_paths: dict[str, str], max_open: int = 256) -> None:
        self._paths = shard_paths
        self._open: OrderedDict[str, BinaryIO] = OrderedDict()
        self._max_open = max_open
        self._pinned: set[str] = set()  # shards with SourceRanges not yet settled

    def handle(self, shard: str) -> BinaryIO:
        handle = self._open.pop(shard, None)
        if handle is None:
            if shard not in self._paths:
                raise ShardError(f"shard {shard!r} is not in the manifest's shards table: rerun `vlmpack scan`")
            handle = open_source(self._paths[shard])  # closed by close() or when evicted
            self._evict(self._max_open - 1)
        self._open[shard] = handle
        return handle

    def _evict(self, keep: int) -> None:
        """Close the least recently used unpinned handles until at most ``keep`` are open (or only pinned ones)."""
        if len(self._open) <= keep:
            return
        for shard in [s for s in self._open if s not in self._pinned][: max(0, len(self._open) - keep)]:
            self._open.pop(shard).close()

    def settle(self) -> None:
        """The SourceRanges handed out so far are consumed: their files may be closed again."""
        self._pinned.clear()
        self._evict(self._max_open)

    def read(self, shard: str, offset: int, size: int) -> bytes:
        data = read_range(self.handle(shard), offset, size)
        if len(data) != size:
            raise ShardError(
                f"{self._paths[shard]}: short read at byte {offset} ({len(data)} of {size} bytes): "
                "the source tar changed since the scan; rerun `vlmpack scan`"
            )
        return data

    def range(self, shard: str, offset: int, size: int) -> SourceRange | bytes:
        """Member data for ``ShardTarWriter``: a ``SourceRange`` of a local file (never read into a
        ``bytes`` here), the bytes themselves for a URL."""
        if is_url(self._paths[shard]):
            return self.read(shard, offset, size)
        handle = self.handle(shard)
        self._pinned.add(shard)
        return SourceRange(handle.fileno(), offset, size, self._paths[shard])

    def path(self, shard: str) -> Path:
        return Path(self._paths[shard])

    def close(self) -> None:
        self._pinned.clear()
        while self._open:
            self._open.popitem()[1].close()


def json_part_of(record: SampleRecord) -> str:
    """The sample's JSON member: part ``json``, else the first part ending in ``.json``."""
    parts = [m[0] for m in record.members]
    if JSON_PART in parts:
        return JSON_PART
    for part in parts:
        if part.endswith(".json"):
            return part
    raise ShardError(f"sample {record.id!r} has no JSON member (parts: {parts}); the manifest is inconsistent")


def ids_npy_bytes(input_ids: list[int], assistant_mask: list[int]) -> bytes:
    """``np.save`` of int32 [2, S]; the .npy header is deterministic, so are the bytes."""
    out = io.BytesIO()
    np.save(out, np.asarray([input_ids, assistant_mask], dtype=np.int32), allow_pickle=False)
    return out.getvalue()


def _tokens(
    record: SampleRecord, conversation: Conversation, files: SourceFiles, materialize: Materializer
) -> tuple[list[int], list[int]]:
    media = [files.read(record.shard, *record.member(ref.part)) for ref in conversation.media]
    ids, mask = materialize(conversation, media)
    if len(ids) != record.token_len:
        raise LengthMismatchError(
            f"sample {record.id!r}: materialized {len(ids)} tokens but the scan counted {record.token_len}: "
            "the processor settings changed since the scan; rerun `vlmpack scan`"
        )
    return ids, mask


def _sub_sample(
    record: SampleRecord,
    files: SourceFiles,
    text_key_of: Callable[[str], str | None],
    first_index: int,
    layout: Layout,
    sub_index: int,
    materialize: Materializer | None = None,
) -> tuple[PackedSubSample, list[MediaSource], tuple[list[int], list[int]] | None]:
    offset, size = record.member(json_part_of(record))
    raw = files.read(record.shard, offset, size)
    try:
        conversation = parse_conversation(
            raw, key=record.key, parts=[m[0] for m in record.members],
            template_text_key=text_key_of(record.shard),
        )
    except DropError as exc:
        raise ShardError(
            f"sample {record.id!r} was scanned as ok but its JSON no longer parses ({exc}): rerun `vlmpack scan`"
        ) from None
    renamed: dict[str, str] = {}
    media: list[MediaSource] = []
    for ref in conversation.media:
        if ref.part in renamed:
            continue
        name = layout.media_part(
            sub_index=sub_index, index_in_pack=first_index + len(media), index_in_sub=len(renamed),
            source_part=ref.part, kind=ref.kind,
        )
        renamed[ref.part] = name
        src_offset, src_size = record.member(ref.part)
        media.append(
            MediaSource(part=name, shard=record.shard, source_part=ref.part, offset=src_offset, size=src_size)
        )
    # canonical messages hold only role/content and {"type", kind} media items; text-only ones need no copy
    messages = conversation.messages if not renamed else tuple(
        {
            "role": message["role"],
            "content": [
                {"type": kind, kind: renamed[item[kind]]} if (kind := item["type"]) in _MEDIA_KINDS else item
                for item in message["content"]
            ],
        }
        for message in conversation.messages
    )
    sub = PackedSubSample(
        id=record.id, token_len=record.token_len, media_tokens=record.media_tokens, messages=messages
    )
    tokens = _tokens(record, conversation, files, materialize) if materialize else None
    return sub, media, tokens


def build_pack(
    *,
    pack_id: int,
    split: str,
    capacity: int,
    sample_ids: tuple[str, ...],
    records: dict[str, SampleRecord],
    files: SourceFiles,
    text_key_of: Callable[[str], str | None],
    materialize: Materializer | None = None,
    sample_type: str = "vlmpack_packed",
) -> BuiltPack:
    """Build the JSON part of one pack and locate its media (reads only the source JSON members,
    and the media too when ``materialize`` is given, to store the pack's token ids).

    ``json_bytes`` is always vlmpack's ``PackedSample`` with media named by the layout of ``sample_type``;
    ``layout_json_bytes`` derives that layout's own ``json`` part from it."""
    layout = layout_for(sample_type)
    subs: list[PackedSubSample] = []
    media: list[MediaSource] = []
    ids: list[int] = []
    mask: list[int] = []
    for sample_id in sample_ids:
        record = records.get(sample_id)
        if record is None or record.status != "ok":
            state = "missing from" if record is None else f"{record.status!r} in"
            raise ShardError(f"pack {pack_id}: sample {sample_id!r} is {state} the manifest: rerun `vlmpack plan`")
        sub, sub_media, tokens = _sub_sample(
            record, files, text_key_of, len(media), layout, len(subs), materialize
        )
        subs.append(sub)
        media.extend(sub_media)
        if tokens is not None:
            ids.extend(tokens[0])
            mask.extend(tokens[1])
    sample = PackedSample(pack_id=pack_id, capacity=capacity, split=split, samples=tuple(subs))
    refusals = tuple((sub.id, why) for sub in subs if (why := layout.refusal(sub.messages)) is not None)
    if not refusals and (why := layout.pack_refusal([sample_kind(sub.messages) for sub in subs])) is not None:
        refusals = tuple((sub.id, why) for sub in subs)
    return BuiltPack(
        refusals=refusals,
        sample=sample,
        json_bytes=canonical_json(sample.to_json()).encode(),
        media=tuple(media),
        ids_npy=ids_npy_bytes(ids, mask) if materialize else None,
    )
