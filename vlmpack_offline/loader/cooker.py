"""The energon cooker for vlmpack packs: one crude sample (raw tar parts) -> ``CookedPack``.

Our shards are declared ``CrudeWebdataset`` with ``subflavors: {sample_type: ...}``
(``.nv-meta/dataset.yaml``), so energon hands each pack over as a dict of raw parts
and lets a cooker turn it into a typed sample::

    {"__key__": "pack_00000017", "json": b'{...}', "m0000.jpg": b'\\xff\\xd8..', "ids.npy": b'..'}
      -> CookedPack(pack=PackedSample(...), media={"m0000.jpg": b'\\xff\\xd8..'}, ids=None)

A pack in one of the published tool's layouts (``sample.sample_type: packed_chat_mix`` ...) carries
vlmpack's own JSON as the ``vlmpack.json`` part beside that layout's ``json``: the cooker reads it, so
the loader reads every layout vlmpack writes.

Media stay encoded bytes: decoding belongs to the model's processor. A TaskEncoder
using this cooker should set ``decoder = None`` so energon passes raw bytes; a JSON
part energon already decoded to a dict is accepted too.

    class MyEncoder(TaskEncoder):
        decoder = None
        cookers = [cooker("vlmpack_packed")]
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
from megatron.energon import Cooker, Sample, basic_sample_keys, stateless
from megatron.energon.edataclass import edataclass

from ..conversation import MEDIA_KINDS
from ..packed_format import IDS_PART, JSON_PART, VLMPACK_JSON_PART, PackedSample

__all__ = ["CookedPack", "cook_packed", "cooker", "DEFAULT_SAMPLE_TYPE"]

DEFAULT_SAMPLE_TYPE = "vlmpack_packed"  # sample.sample_type's default


@edataclass
class CookedPack(Sample):
    """One pack as the loader receives it (energon ``Sample`` fields + ours)."""

    #: the pack's JSON part: sub-samples with ids, token_len and conversations
    pack: PackedSample
    #: encoded media bytes by part name of this pack ("m0000.jpg")
    media: dict[str, bytes]
    #: int32 [2, S] input_ids and assistant mask when the pack stored ids.npy, else None
    ids: np.ndarray | None = None


def _load_json(value: Any) -> dict:
    if isinstance(value, dict):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return json.loads(bytes(value))
    if isinstance(value, str):
        return json.loads(value)
    raise TypeError(f"pack JSON part has type {type(value).__name__}; expected bytes or an already decoded dict")


def _load_ids(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    return np.load(io.BytesIO(bytes(value)), allow_pickle=False)


@stateless
def cook_packed(sample: dict) -> CookedPack:
    """Turn a crude pack (raw parts by name) into a ``CookedPack``; media bytes are not decoded."""
    key = sample.get("__key__", "?")
    part = VLMPACK_JSON_PART if VLMPACK_JSON_PART in sample else JSON_PART  # a published layout keeps ours beside
    if part not in sample:
        raise ValueError(f"crude sample {key!r} has no {JSON_PART!r} part: not a vlmpack pack")
    pack = PackedSample.from_json(_load_json(sample[part]))
    names = [
        item[item["type"]]
        for sub in pack.samples
        for message in sub.messages
        for item in message["content"]
        if item["type"] in MEDIA_KINDS
    ]
    media: dict[str, bytes] = {}
    for name in names:
        if name in media:
            continue
        if name not in sample:
            raise ValueError(f"pack {key!r}: media part {name!r} named by its JSON is missing from the tar")
        value = sample[name]
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(
                f"pack {key!r}: media part {name!r} arrived decoded ({type(value).__name__}); "
                "set `decoder = None` on the TaskEncoder so energon passes raw bytes"
            )
        media[name] = bytes(value)
    ids = _load_ids(sample[IDS_PART]) if IDS_PART in sample else None
    return CookedPack(**basic_sample_keys(sample), pack=pack, media=media, ids=ids)


def cooker(sample_type: str = DEFAULT_SAMPLE_TYPE) -> Cooker:
    """The energon ``Cooker`` for packs whose dataset.yaml declares ``subflavors.sample_type``."""
    return Cooker(cook=cook_packed, has_subflavors={"sample_type": sample_type})
