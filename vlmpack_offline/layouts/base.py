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

from dataclasses import dataclass

from ..conversation import MEDIA_KINDS, media_kind_of_part, media_type_of
from ..packed_format import PackedSample

__all__ = ["Layout", "MEDIA_KINDS", "Shape", "flat_text", "media_of", "pack_media_type", "sample_kind", "shape_of",
           "turns_of"]  # fmt: skip

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


@dataclass(frozen=True, slots=True)
class Shape:
    """What the published layouts' refusals look at, read from a sample's messages in one pass.

    A refusal is a function of the shape alone, so ``layouts_unfit`` answers once per distinct shape (a
    scan meets a handful), not once per sample and layout."""

    roles: tuple[str, ...]  # the turns' roles in order, e.g. ("system", "user", "assistant")
    kinds: tuple[str, ...]  # the media items' kinds in conversation order, e.g. ("image", "image")
    common: str | None  # what no published layout can hold (``_common_refusal``), None when nothing
    prompt: bool  # the first turn holds text that is not blank (a captioning trainer would drop it)


def shape_of(messages: tuple[dict, ...] | list[dict]) -> Shape:
    """The ``Shape`` of canonical messages."""
    roles, kinds, first_problem = [], [], None
    for message in messages:
        role = message["role"]
        roles.append(role)
        for item in message["content"]:
            kind = item["type"]
            if kind in MEDIA_KINDS:
                kinds.append(kind)
                if first_problem is None and role != "user":
                    first_problem = f"media in {'an' if role[0] in 'aeiou' else 'a'} {role} turn"
            elif first_problem is None and kind == "text" and _holds_placeholder(item["text"]):
                first_problem = "a literal <image>, <video> or <audio> in the text"
    prompt = bool(messages) and any(item["type"] == "text" and item["text"].strip() for item in messages[0]["content"])
    return Shape(roles=tuple(roles), kinds=tuple(kinds), common=_common_refusal(set(kinds), first_problem),
                 prompt=prompt)  # fmt: skip


def _holds_placeholder(text: str) -> bool:
    return "<image>" in text or "<video>" in text or "<audio>" in text  # _PLACEHOLDER's values


def _common_refusal(kinds: set[str], first_problem: str | None) -> str | None:
    """What no published layout can hold: audio (its trainer reads images and videos only), both images and
    videos in one sub-sample (its trainer takes one media kind per pack), then the first of: media outside
    user turns, a literal ``<image>`` / ``<video>`` in the text (the trainer counts placeholders against media)."""
    if "audio" in kinds:
        return "audio (the published layouts hold images and videos only; keep sample.sample_type: vlmpack)"
    if len(kinds) > 1:
        return "images and videos in one sample"
    return first_problem


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
        return self.refuses(shape_of(messages))

    def refuses(self, shape: Shape) -> str | None:
        """``refusal`` of a sample of this shape."""
        return shape.common

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


def sample_kind(messages: tuple[dict, ...]) -> str:
    """The scan's media_type of a sub-sample (``conversation.media_type_of``)."""
    return media_type_of(kind for kind, _ in media_of(messages))


def pack_media_type(pack: PackedSample) -> str:
    """``image``, ``video`` or ``text``: the one media kind of a pack's sub-samples (``media_type``)."""
    kinds = {kind for sub in pack.samples for kind, _ in media_of(sub.messages)}
    if len(kinds) > 1:
        raise ValueError(f"pack {pack.pack_id} mixes {' and '.join(sorted(kinds))}: set packing.group_by: media_type")
    return kinds.pop() if kinds else "text"
