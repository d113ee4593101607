"""The interface of a packed layout: how one pack's sub-samples become the tar members a trainer reads.

``sample.sample_type`` picks the layout (``layouts/__init__.py``). vlmpack's own layout writes the
``PackedSample`` as the pack's ``json`` part. A published layout writes the JSON the published
offline-packing tool's trainer cooks (its cookers are chosen by the same ``sample_type`` subflavor),
and keeps vlmpack's ``PackedSample`` in one extra part, ``vlmpack.json``, that those cookers never look
up, so vlmpack's own loader and ``vlmpack verify`` read every layout::

    pack_00000017.json           the layout's JSON (published: prompts / captions / media_files ...)
    pack_00000017.vlmpack.json   vlmpack's PackedSample (published layouts only)
    pack_00000017.s000_0.jpg     media, named by the layout

A layout that cannot hold a sub-sample without loss says why (``refusal``); ``vlmpack write`` counts
those reasons over the whole plan and refuses before any tar is written.
"""

from __future__ import annotations

from ..conversation import MEDIA_KINDS, media_kind_of_part, media_type_of
from ..packed_format import PackedSample

__all__ = ["Layout", "MEDIA_KINDS", "flat_text", "media_of", "pack_media_type", "sample_kind", "turns_of"]

_PLACEHOLDER = {"image": "<image>", "video": "<video>", "audio": "<audio>"}
_FALLBACK_EXTENSION = {"image": "jpg", "video": "mp4", "audio": "wav"}


def decodable_extension(source_part: str, kind: str) -> str:
    """The source part's extension when it names the item's kind (``image`` / ``video`` / ``audio``), else
    ``jpg``, ``mp4`` or ``wav``: energon picks a part's decoder by its name alone, the decoders then read the
    bytes (PyAV probes an audio's container from its bytes, whatever the name)."""
    ext = source_part.rsplit(".", 1)[-1].lower()
    if media_kind_of_part(source_part) == kind:
        return ext
    return _FALLBACK_EXTENSION[kind]


def media_of(messages: tuple[dict, ...] | list[dict]) -> list[tuple[str, str]]:
    """``(kind, part)`` of every media item, in conversation order."""
    return [(item["type"], item[item["type"]]) for m in messages for item in m["content"] if item["type"] in MEDIA_KINDS]


def flat_text(message: dict) -> str:
    """A message's content as one string, each media item replaced by its ``<image>`` / ``<video>`` / ``<audio>``
    placeholder at its position and the text items joined as they are (how vlmpack reads ShareGPT)."""
    return "".join(_PLACEHOLDER[k] if (k := item["type"]) in _PLACEHOLDER else item["text"] for item in message["content"])


def turns_of(messages: tuple[dict, ...] | list[dict]) -> list[str]:
    """Roles in order, e.g. ``["system", "user", "assistant"]``."""
    return [m["role"] for m in messages]


class Layout:
    """One value of ``sample.sample_type``. Subclasses set ``name`` and override what differs."""

    name: str = ""
    #: True for the published tool's layouts: ``json`` is theirs, ``vlmpack.json`` ours
    published: bool = True
    #: what the layout can hold, for messages and docs
    holds: str = ""

    def media_part(self, *, sub_index: int, index_in_pack: int, index_in_sub: int, source_part: str, kind: str) -> str:
        """The member name (after the key) of a media item: ``s000_0.jpg``, with an extension energon decodes."""
        return f"s{sub_index:03d}_{index_in_sub}.{decodable_extension(source_part, kind)}"

    def refusal(self, messages: tuple[dict, ...]) -> str | None:
        """Why this layout cannot hold one sub-sample (canonical messages) without loss; None if it can."""
        return _common_refusal(messages)

    def pack_json(self, pack: PackedSample) -> dict:
        """The ``json`` part a published layout's trainer reads, built from vlmpack's pack (media already
        renamed); vlmpack's own layout writes the pack's JSON itself (``pack_builder.layout_json_bytes``)."""
        raise NotImplementedError

    def pack_refusal(self, kinds: list[str]) -> str | None:
        """Why a pack whose sub-samples are of these kinds (``sample_kind``) cannot be written; None if it can.
        A published pack has one ``media_type``, as ``packing.group_by: media_type`` plans them."""
        if len(set(kinds)) > 1:
            return "a pack mixing " + " and ".join(sorted(set(kinds))) + " samples (plan with packing.group_by: media_type)"
        return None


def _common_refusal(messages: tuple[dict, ...]) -> str | None:
    """What no published layout can hold: audio (its trainer reads images and videos only), both images and
    videos in one sub-sample (its trainer takes one media kind per pack), media outside user turns, or a
    literal ``<image>`` / ``<video>`` in the text
    (the trainer counts placeholders against media). Each layout asks it of the same sample in turn
    (``layouts_unfit``): the last answer is kept for that very tuple (held here, so its identity is not reused)."""
    if _LAST_COMMON[0] is messages:
        return _LAST_COMMON[1]
    why = _common_refusal_of(messages)
    _LAST_COMMON[:] = [messages, why]
    return why


_LAST_COMMON: list = [None, None]  # (messages, its refusal)


def _common_refusal_of(messages: tuple[dict, ...]) -> str | None:
    kinds = {kind for kind, _ in media_of(messages)}
    if "audio" in kinds:
        return "audio (the published layouts hold images and videos only; keep sample.sample_type: vlmpack)"
    if len(kinds) > 1:
        return "images and videos in one sample"
    for message in messages:
        for item in message["content"]:
            if item["type"] in MEDIA_KINDS and message["role"] != "user":
                return f"media in {'an' if message['role'][0] in 'aeiou' else 'a'} {message['role']} turn"
            if item["type"] == "text" and any(tag in item["text"] for tag in _PLACEHOLDER.values()):
                return "a literal <image>, <video> or <audio> in the text"
    return None


def sample_kind(messages: tuple[dict, ...]) -> str:
    """The scan's media_type of a sub-sample (``conversation.media_type_of``)."""
    return media_type_of(kind for kind, _ in media_of(messages))


def pack_media_type(pack: PackedSample) -> str:
    """``image``, ``video`` or ``text``: the one media kind of a pack's sub-samples (``media_type``)."""
    kinds = {kind for sub in pack.samples for kind, _ in media_of(sub.messages)}
    if len(kinds) > 1:
        raise ValueError(f"pack {pack.pack_id} mixes {' and '.join(sorted(kinds))}: set packing.group_by: media_type")
    return kinds.pop() if kinds else "text"
