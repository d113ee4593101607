"""One packed sample in ``pretrain-*.tar``: the contract between ``write`` and the loader.

::

    pretrain-000000.tar
      pack_00000017.json          {"format": "vlmpack.pack/1", "pack_id": 17, "capacity": 8192,
                                   "split": "train", "samples": [
                                     {"id": "part-000.tar/k1", "token_len": 812, "media_tokens": 640,
                                      "messages": [... HF messages, media named "m0000.jpg" ...]},
                                     ...]}
      pack_00000017.m0000.jpg     media bytes, copied unchanged from the source tar
      pack_00000017.m0001.mp4
      pack_00000017.ids.npy       optional (write.store_token_ids): int32 [2, S] = input_ids, assistant mask

Keys carry no ``.``; media parts are numbered over the whole pack in the order
the sub-samples and their media appear, and keep the source part's extension
(lower-cased) so decoders still know the format.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "PACK_FORMAT",
    "JSON_PART",
    "VLMPACK_JSON_PART",
    "IDS_PART",
    "LABELS_RULE",
    "PackedSubSample",
    "PackedSample",
    "pack_key",
    "media_part_name",
]

PACK_FORMAT = "vlmpack.pack/1"
JSON_PART = "json"
# vlmpack's PackedSample beside a published layout's own ``json`` (layouts/base.py); energon reads the part
# name after the key's dot, so this is member ``pack_00000017.vlmpack.json``
VLMPACK_JSON_PART = "vlmpack.json"
IDS_PART = "ids.npy"
# the rule ids.npy's learned-token mask follows; raised when it changes, so `vlmpack write` rewrites stored masks
# (2: turns located by rendering for marker templates too; a last multi-byte character labelled whole; GLM <|user|>)
LABELS_RULE = 2


def pack_key(pack_id: int) -> str:
    return f"pack_{pack_id:08d}"


def media_part_name(index: int, source_part: str) -> str:
    """``m0003.jpg`` for the 4th media item of a pack whose source part was ``img1.JPG``."""
    ext = source_part.rsplit(".", 1)[-1].lower()
    return f"m{index:04d}.{ext}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PackedSubSample:
    id: str  # manifest id of the source sample
    token_len: int  # planned length; the loader checks the materialized length against it
    media_tokens: int  # visual tokens inside token_len
    messages: tuple[dict, ...]  # canonical HF messages, media named by part names of this pack

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "token_len": self.token_len,
            "media_tokens": self.media_tokens,
            "messages": list(self.messages),
        }

    @classmethod
    def from_json(cls, raw: dict) -> PackedSubSample:
        return cls(
            id=raw["id"],
            token_len=int(raw["token_len"]),
            media_tokens=int(raw.get("media_tokens", 0)),
            messages=tuple(raw["messages"]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PackedSample:
    pack_id: int  # the plan's pack_id
    capacity: int  # sample.max_token_len the plan used
    split: str  # "train" or "val"
    samples: tuple[PackedSubSample, ...]  # sub-samples in pack order

    def to_json(self) -> dict:
        return {
            "format": PACK_FORMAT,
            "pack_id": self.pack_id,
            "capacity": self.capacity,
            "split": self.split,
            "samples": [s.to_json() for s in self.samples],
        }

    @classmethod
    def from_json(cls, raw: dict) -> PackedSample:
        if raw.get("format") != PACK_FORMAT:
            raise ValueError(f"not a vlmpack pack (format {raw.get('format')!r}, expected {PACK_FORMAT!r})")
        return cls(
            pack_id=int(raw["pack_id"]),
            capacity=int(raw["capacity"]),
            split=str(raw["split"]),
            samples=tuple(PackedSubSample.from_json(s) for s in raw["samples"]),
        )
