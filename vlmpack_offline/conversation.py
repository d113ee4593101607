"""Parse a sample's JSON into one canonical conversation (HF ``messages`` form).

Every input layout becomes the same record, which the scan counts, the write
stage stores in the pack, and the loader renders; so all three see one text::

    Conversation(
        messages=({"role": "user", "content": [{"type": "image", "image": "img0.jpg"},
                                               {"type": "text", "text": "What is it?"}]},
                  {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]}),
        media=(MediaRef(kind="image", part="img0.jpg"),),
    )

Accepted layouts (DESIGN.md, Input):

* HF messages: ``{"messages": [{"role", "content": str | [items]}]}``, items
  ``{"type": "text"|"image"|"video", ...}``; an image/video item names its part
  (``"image": "img0.jpg"``) or leaves it empty to take the next part by extension.
* LLaMA-Factory / ms-swift: HF messages whose string content holds ``<image>`` /
  ``<video>`` tags, plus ``"images": [...]`` / ``"videos": [...]``.
* ShareGPT / LLaVA / ShareGPT-4o: ``{"conversations": [{"from": "human"|"gpt"|"system",
  "value"}], "images": [...], "videos": [...]}`` (LLaVA: ``"image": str | [...]``).
* ``texts`` layout (``data.template_text_key``, e.g. ``texts``): a list of turns
  ``{"system": str}`` / ``{"user": str, "assistant": str}``, tags and media lists as ShareGPT.

Tags: each ``<image>``/``<video>`` tag is a media item at its position, the text
between tags is kept verbatim. String content of ``messages`` is read for tags when
the JSON has a media list or the sample has media parts; otherwise it is plain text.
The tags of a kind and its media must agree in number: more tags than media drops
the sample as ``missing_media``, fewer as ``media_mismatch``, each naming both counts
(with no list in the JSON, the media are the sample's parts of that kind).

A media list entry names a part of the sample, resolved in this order: the part
name itself (``img0.jpg``), the name less the sample key (``k1.img0.jpg``), its
basename (LLaVA keeps original paths such as ``coco/train2017/x.jpg``; the tar
writer often kept ``x.jpg``), and, when none matches and the list has as many
entries as the sample has parts of that kind, the part at the same position in
member order (a converter that renamed every file to ``jpg``).

Content is always a list; media names are part names of the source sample
(``img0.jpg`` for member ``key.img0.jpg``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .reasons import DropError, Reason

__all__ = [
    "IMAGE_EXTENSIONS",
    "VIDEO_EXTENSIONS",
    "MediaRef",
    "Conversation",
    "parse_conversation",
    "media_kind_of_part",
]

IMAGE_EXTENSIONS = frozenset({"jpg", "jpeg", "png", "webp", "bmp", "gif"})
VIDEO_EXTENSIONS = frozenset({"mp4", "avi", "mov", "mkv", "webm"})

_ROLE_ALIASES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
}
_TAG = re.compile(r"(<image>|<video>)")


@dataclass(frozen=True, slots=True, kw_only=True)
class MediaRef:
    kind: str  # "image" or "video"
    part: str  # part name inside the sample, e.g. "img0.jpg"


@dataclass(frozen=True, slots=True, kw_only=True)
class Conversation:
    messages: tuple[dict, ...]  # HF messages, content always a list of typed items
    media: tuple[MediaRef, ...]  # media items in the order they appear in the text

    @property
    def media_type(self) -> str:
        """``video`` if any video, else ``image`` if any image, else ``text``."""
        kinds = {m.kind for m in self.media}
        return "video" if "video" in kinds else "image" if "image" in kinds else "text"

    def to_json(self) -> dict:
        return {"messages": list(self.messages)}


def media_kind_of_part(part: str) -> str | None:
    """``image``/``video`` by the part's last extension, else None."""
    ext = part.rsplit(".", 1)[-1].lower()
    return "image" if ext in IMAGE_EXTENSIONS else "video" if ext in VIDEO_EXTENSIONS else None


class _PartPool:
    """Resolves named media and hands out unnamed ones by extension in member order."""

    def __init__(self, key: str, parts: Sequence[str]) -> None:
        self._prefix = key.rsplit("/", 1)[-1] + "."
        self._parts = list(parts)
        self._next = {"image": 0, "video": 0}
        self._by_kind: dict[str, list[str]] | None = None  # built on the first unnamed item (most samples name theirs)

    def of_kind(self, kind: str) -> list[str]:
        """The sample's parts of ``kind``, in member order."""
        if self._by_kind is None:
            self._by_kind = {k: [p for p in self._parts if media_kind_of_part(p) == k] for k in ("image", "video")}
        return self._by_kind[kind]

    def resolve_listed(self, kind: str, name: Any, index: int, total: int) -> MediaRef:
        """Entry ``index`` of a media list of ``total`` entries (see the module doc for the rule)."""
        if isinstance(name, str) and name:
            base = name.rsplit("/", 1)[-1]
            for candidate in (name, base):
                part = candidate[len(self._prefix) :] if candidate.startswith(self._prefix) else candidate
                if part in self._parts:
                    return MediaRef(kind=kind, part=part)
            same_kind = self.of_kind(kind)
            if total == len(same_kind):
                return MediaRef(kind=kind, part=same_kind[index])
        return self.resolve(kind, name)

    def resolve(self, kind: str, name: Any) -> MediaRef:
        if name in (None, ""):
            queue = self.of_kind(kind)
            index = self._next[kind]
            if index >= len(queue):
                raise DropError(Reason.MISSING_MEDIA, f"the text has more {kind}s than the sample has {kind} parts ({len(queue)})"
                )
            self._next[kind] = index + 1
            return MediaRef(kind=kind, part=queue[index])
        if not isinstance(name, str):
            raise DropError(Reason.UNKNOWN_FORMAT, f"{kind} reference must be a part name, got {name!r}")
        part = name[len(self._prefix) :] if name.startswith(self._prefix) else name
        if part not in self._parts:
            raise DropError(Reason.MISSING_MEDIA, f"{kind} part {name!r} is not in the sample")
        return MediaRef(kind=kind, part=part)


def parse_conversation(
    raw_json: bytes | str,
    *,
    key: str,
    parts: Sequence[str],
    template_text_key: str | None = None,
) -> Conversation:
    """Parse one sample JSON; raises ``DropError`` with a drop reason."""
    try:
        data = json.loads(raw_json)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, huge int literals, deep nesting
        raise DropError(Reason.BAD_JSON, f"JSON does not parse: {str(exc)[:300]}") from None
    try:  # "\ud800" parses, but no tokenizer or file can take a lone surrogate
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DropError(Reason.BAD_JSON, f"JSON holds text that is not valid Unicode: {exc.reason}") from None
    except RecursionError:
        raise DropError(Reason.BAD_JSON, "JSON is nested too deeply") from None
    if not isinstance(data, dict):
        raise DropError(Reason.UNKNOWN_FORMAT, f"sample JSON must be an object, got {type(data).__name__}")
    pool = _PartPool(key, parts)
    tags = _TaggedMedia(data, pool)
    if "messages" in data:
        messages = _from_messages(data["messages"], pool, tags if tags.active else None)
        n_media = sum(item["type"] in ("image", "video") for m in messages for item in m["content"])
        if n_media == sum(tags.used.values()):  # all media came from tags (no typed items beside them)
            tags.check_counts()
    elif "conversations" in data:
        turns = [(_role(t.get("from") if isinstance(t, dict) else None), _value(t)) for t in _list(data["conversations"])]
        messages = _from_tagged_turns(turns, tags)
    elif template_text_key and template_text_key in data:
        messages = _from_tagged_turns(_texts_turns(data[template_text_key]), tags)
    else:
        known = ["messages", "conversations"] + ([template_text_key] if template_text_key else [])
        raise DropError(Reason.UNKNOWN_FORMAT, f"no known conversation key (looked for {', '.join(known)})")
    if not messages:
        raise DropError(Reason.UNKNOWN_FORMAT, "conversation has no turns")
    # a conversation without an assistant turn parses: whether it can be learned is loss.train_on's
    # question, answered by the counter (drop reason no_labels)
    media = tuple(
        MediaRef(kind=item["type"], part=item[item["type"]])
        for message in messages
        for item in message["content"]
        if item["type"] in ("image", "video")
    )
    return Conversation(messages=tuple(messages), media=media)


def _list(value: Any) -> list:
    if not isinstance(value, list) or not value:
        raise DropError(Reason.UNKNOWN_FORMAT, "conversation must be a non-empty list")
    return value


def _role(name: Any) -> str:
    role = _ROLE_ALIASES.get(str(name).lower()) if name is not None else None
    if role is None:
        raise DropError(Reason.UNKNOWN_FORMAT, f"unknown role {name!r} (expected user/assistant/system)")
    return role


def _value(turn: Any) -> str:
    if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
        raise DropError(Reason.UNKNOWN_FORMAT, "each ShareGPT turn needs a string `value`")
    return turn["value"]


def _from_messages(raw: Any, pool: _PartPool, tags: _TaggedMedia | None) -> list[dict]:
    messages = []
    for message in _list(raw):
        if not isinstance(message, dict):
            raise DropError(Reason.UNKNOWN_FORMAT, "each message must be an object")
        role = _role(message.get("role"))
        content = message.get("content")
        if isinstance(content, str):
            items = tags.items(content) if tags is not None else [{"type": "text", "text": content}]
        elif isinstance(content, list):
            items = [_item(entry, pool) for entry in content]
        else:
            raise DropError(Reason.UNKNOWN_FORMAT, "message content must be a string or a list")
        messages.append({"role": role, "content": items})
    return messages


def _item(entry: Any, pool: _PartPool) -> dict:
    if not isinstance(entry, dict):
        raise DropError(Reason.UNKNOWN_FORMAT, f"content item must be an object, got {entry!r}")
    kind = entry.get("type")
    if kind == "text":
        if not isinstance(entry.get("text"), str):
            raise DropError(Reason.UNKNOWN_FORMAT, "text item needs a string `text`")
        return {"type": "text", "text": entry["text"]}
    if kind in ("image", "video"):
        ref = pool.resolve(kind, entry.get(kind))
        return {"type": kind, kind: ref.part}
    raise DropError(Reason.UNKNOWN_FORMAT, f"unknown content item type {kind!r}")


def _texts_turns(raw: Any) -> list[tuple[str, str]]:
    turns: list[tuple[str, str]] = []
    for turn in _list(raw):
        if not isinstance(turn, dict):
            raise DropError(Reason.UNKNOWN_FORMAT, "each `texts` turn must be an object")
        for role in ("system", "user", "assistant"):
            if role in turn:
                if not isinstance(turn[role], str):
                    raise DropError(Reason.UNKNOWN_FORMAT, f"`texts` {role} value must be a string")
                turns.append((role, turn[role]))
    return turns


class _TaggedMedia:
    """Media items for ``<image>``/``<video>`` tags: the JSON's media lists, else the parts by extension."""

    def __init__(self, data: dict, pool: _PartPool) -> None:
        self.pool = pool
        self.listed = {kind: _media_list(data, kind) for kind in ("image", "video")}  # None: the JSON lists none
        self.used = {"image": 0, "video": 0}

    @property
    def active(self) -> bool:
        """Whether string content is read for tags (a media list, or media parts to take)."""
        return any(v is not None for v in self.listed.values()) or any(self.pool.of_kind(k) for k in self.used)

    def items(self, text: str) -> list[dict]:
        items: list[dict] = []
        for piece in _TAG.split(text):
            if piece in ("<image>", "<video>"):
                kind = piece[1:-1]
                items.append({"type": kind, kind: self._next(kind).part})
            elif piece:
                items.append({"type": "text", "text": piece})
        return items

    def _next(self, kind: str) -> MediaRef:
        index, names = self.used[kind], self.listed[kind]
        self.used[kind] += 1
        if names is None:
            return self.pool.resolve(kind, None)
        if index >= len(names):
            raise DropError(Reason.MISSING_MEDIA, f"the text has more <{kind}> tags than `{kind}s` entries ({len(names)})"
            )
        return self.pool.resolve_listed(kind, names[index], index, len(names))

    def check_counts(self) -> None:
        """Every listed (or, with no list, every available) medium of a tagged kind was used."""
        for kind, used in self.used.items():
            names = self.listed[kind]
            available = len(names) if names is not None else (len(self.pool.of_kind(kind)) if used else 0)
            if used < available:
                source = f"`{kind}s` lists {available}" if names is not None else f"the sample has {available} {kind} parts"
                raise DropError(Reason.MEDIA_MISMATCH, f"the text has {used} <{kind}> tags but {source}")


def _media_list(data: dict, kind: str) -> list | None:
    """``images`` / ``videos`` (or LLaVA's ``image`` / ``video``: a string or a list) as a list, or None."""
    for name in (f"{kind}s", kind):
        if name in data and data[name] is not None:
            value = data[name]
            if isinstance(value, str):
                return [value]
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return value
            raise DropError(Reason.UNKNOWN_FORMAT, f"`{name}` must be a part name or a list of part names")
    return None


def _from_tagged_turns(turns: list[tuple[str, str]], tags: _TaggedMedia) -> list[dict]:
    messages = [{"role": role, "content": tags.items(text)} for role, text in turns]
    tags.check_counts()
    return messages
