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
  ``{"type": "text"|"image"|"video"|"audio", ...}``; a media item names its part
  (``"image": "img0.jpg"``, ``"audio": "a.wav"``) or leaves it empty to take the next part by extension.
* LLaMA-Factory / ms-swift: HF messages whose string content holds ``<image>`` /
  ``<video>`` / ``<audio>`` tags, plus ``"images": [...]`` / ``"videos": [...]`` / ``"audios": [...]``.
* ShareGPT / LLaVA / ShareGPT-4o: ``{"conversations": [{"from": "human"|"gpt"|"system",
  "value"}], "images": [...], "videos": [...]}`` (LLaVA: ``"image": str | [...]``).
* ``texts`` layout (``data.template_text_key``, else the key ``texts``): a list of turns
  ``{"system": str}`` / ``{"user": str, "assistant": str}``, ShareGPT turns, or HF messages;
  tags and media lists as ShareGPT.
* The published offline-packing tool's converter (its ``sample_type`` names in brackets):
  ``{"texts": <HF messages>, "media": "image"|"video"|"text", "name": [parts]}``
  (``media_type`` / ``media_files`` too, nested lists flattened) [multi_mix_qa,
  packed_multi_mix_qa, multi_vid_qa]; the VQA branch, whose JSON is the message list
  itself with the image in the sample's ``jpg`` part [vqa, packed_vqa]; and
  ``{"captions": [...], "prompts": [...]}`` [captioning, packed_captioning]. Each is
  recognised by its shape, so the value of ``sample.sample_type`` needs no matching,
  and one dataset may mix them. Without any ``<image>`` tag, the VQA and caption
  layouts put the images at the start of the (first) user turn, as energon's
  ``VQASample`` / ``CaptioningSample`` pair an image with its text.

Tags: each ``<image>``/``<video>``/``<audio>`` tag is a media item at its position, the text
between tags is kept verbatim. String content of ``messages`` is read for tags when
the JSON has a media list or the sample has media parts; otherwise it is plain text, except
that an ``<audio>`` tag there drops the sample as ``missing_media``: no audio is ever passed
through as text (an ``<image>`` stays literal text, as it always has).
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
    "AUDIO_EXTENSIONS",
    "MEDIA_KINDS",
    "media_type_of",
    "MediaRef",
    "Conversation",
    "parse_conversation",
    "media_kind_of_part",
]

IMAGE_EXTENSIONS = frozenset({"jpg", "jpeg", "png", "webp", "bmp", "gif"})
VIDEO_EXTENSIONS = frozenset({"mp4", "avi", "mov", "mkv", "webm"})
AUDIO_EXTENSIONS = frozenset({"wav", "flac", "mp3", "ogg", "opus", "m4a"})
MEDIA_KINDS = ("image", "video", "audio")
_KIND_OF_EXTENSION = {
    **dict.fromkeys(IMAGE_EXTENSIONS, "image"), **dict.fromkeys(VIDEO_EXTENSIONS, "video"),
    **dict.fromkeys(AUDIO_EXTENSIONS, "audio"),
}  # fmt: skip

_ROLE_ALIASES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
}
_TAG = re.compile(r"(<image>|<video>|<audio>)")


@dataclass(frozen=True, slots=True, kw_only=True)
class MediaRef:
    kind: str  # "image", "video" or "audio"
    part: str  # part name inside the sample, e.g. "img0.jpg"


@dataclass(frozen=True, slots=True, kw_only=True)
class Conversation:
    messages: tuple[dict, ...]  # HF messages, content always a list of typed items
    media: tuple[MediaRef, ...]  # media items in the order they appear in the text

    @property
    def media_type(self) -> str:
        """``video`` if any video, else ``image`` if any image, else ``audio`` if any audio, else ``text``."""
        return media_type_of(m.kind for m in self.media)

    def to_json(self) -> dict:
        return {"messages": list(self.messages)}


def media_type_of(kinds) -> str:
    """A sample's ``media_type`` from its items' kinds: the first of video, image, audio it holds, else ``text``
    (the vision kinds first: they cost the most per item and decide the published layouts)."""
    kinds = set(kinds)
    return next((kind for kind in ("video", "image", "audio") if kind in kinds), "text")


def media_kind_of_part(part: str) -> str | None:
    """``image``/``video``/``audio`` by the part's last extension, else None."""
    return _KIND_OF_EXTENSION.get(part.rsplit(".", 1)[-1].lower())


class _PartPool:
    """Resolves named media and hands out unnamed ones by extension in member order."""

    def __init__(self, key: str, parts: Sequence[str]) -> None:
        self._prefix = key.rsplit("/", 1)[-1] + "."
        self._parts = list(parts)
        self._next = dict.fromkeys(MEDIA_KINDS, 0)
        self._by_kind: dict[str, list[str]] | None = None  # built on the first unnamed item (most samples name theirs)

    def of_kind(self, kind: str) -> list[str]:
        """The sample's parts of ``kind``, in member order."""
        if self._by_kind is None:
            self._by_kind = {k: [p for p in self._parts if media_kind_of_part(p) == k] for k in MEDIA_KINDS}
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
    if not _surrogate_free(raw_json):
        try:  # "\ud800" parses, but no tokenizer or file can take a lone surrogate
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise DropError(Reason.BAD_JSON, f"JSON holds text that is not valid Unicode: {exc.reason}") from None
        except RecursionError:
            raise DropError(Reason.BAD_JSON, "JSON is nested too deeply") from None
    if isinstance(data, list) and data:  # the published converter's VQA branch: the JSON is the message list
        return _conversation(_from_vqa_list(data, _PartPool(key, parts)))
    if not isinstance(data, dict):
        raise DropError(Reason.UNKNOWN_FORMAT, f"sample JSON must be an object, got {type(data).__name__}")
    pool = _PartPool(key, parts)
    tags = _TaggedMedia(data, pool)
    if "messages" in data:
        messages = _from_hf_messages(data["messages"], pool, tags)
    elif "conversations" in data:
        turns = [(_role(t.get("from") if isinstance(t, dict) else None), _value(t)) for t in _list(data["conversations"])]
        messages = _from_tagged_turns(turns, tags)
    elif template_text_key and template_text_key in data:
        messages = _from_texts(data[template_text_key], pool, tags)
    elif "texts" in data:  # the published converter's key, read as its tool does whatever template_text_key says
        messages = _from_texts(data["texts"], pool, tags)
    elif "captions" in data:
        messages = _from_captions(data, tags)
    else:
        known = ["messages", "conversations", *([template_text_key] if template_text_key else []), "texts", "captions"]
        raise DropError(Reason.UNKNOWN_FORMAT, f"no known conversation key (looked for {', '.join(known)})")
    return _conversation(messages)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate_free(raw_json: bytes | str) -> bool:
    """Whether ``json.loads(raw_json)`` cannot hold a lone surrogate, so the check that encodes the parsed JSON
    again (a tenth of the scan's parsing) can be skipped: UTF-8 bytes without a ``\\u`` escape and without the
    byte 0xED that opens a UTF-8-encoded surrogate (``json.loads`` decodes with ``surrogatepass``), or text
    with neither an escape nor a surrogate. A JSON nested too deeply for that check failed ``json.loads``."""
    if isinstance(raw_json, str):
        return "\\u" not in raw_json and not _SURROGATE.search(raw_json)
    if not isinstance(raw_json, bytes):
        return False
    return b"\\u" not in raw_json and b"\xed" not in raw_json and json.detect_encoding(raw_json) == "utf-8"


def _conversation(messages: list[dict]) -> Conversation:
    if not messages:
        raise DropError(Reason.UNKNOWN_FORMAT, "conversation has no turns")
    # a conversation without an assistant turn parses: whether it can be learned is loss.train_on's
    # question, answered by the counter (drop reason no_labels)
    media = tuple(
        MediaRef(kind=item["type"], part=item[item["type"]])
        for message in messages
        for item in message["content"]
        if item["type"] in MEDIA_KINDS
    )
    return Conversation(messages=tuple(messages), media=media)


def _list(value: Any) -> list:
    if not isinstance(value, list) or not value:
        raise DropError(Reason.UNKNOWN_FORMAT, "conversation must be a non-empty list")
    return value


def _role(name: Any) -> str:
    role = _ROLE_ALIASES.get(name) if type(name) is str else None  # the usual, already lower-case: no copies
    if role is None and name is not None:
        role = _ROLE_ALIASES.get(str(name).lower())
    if role is None:
        raise DropError(Reason.UNKNOWN_FORMAT, f"unknown role {name!r} (expected user/assistant/system)")
    return role


def _value(turn: Any) -> str:
    if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
        raise DropError(Reason.UNKNOWN_FORMAT, "each ShareGPT turn needs a string `value`")
    return turn["value"]


def _from_hf_messages(raw: Any, pool: _PartPool, tags: _TaggedMedia) -> list[dict]:
    """HF messages; string content is read for tags when the sample has media (LLaMA-Factory / ms-swift)."""
    messages = _from_messages(raw, pool, tags)
    n_media = sum(item["type"] in MEDIA_KINDS for m in messages for item in m["content"])
    if n_media == sum(tags.used.values()):  # all media came from tags (no typed items beside them)
        tags.check_counts()
    return messages


def _from_messages(raw: Any, pool: _PartPool, tags: _TaggedMedia | None) -> list[dict]:
    """``tags`` reads string content for tags where it is active (asked at the first string content only)."""
    messages = []
    for message in _list(raw):
        if not isinstance(message, dict):
            raise DropError(Reason.UNKNOWN_FORMAT, "each message must be an object")
        role = _role(message.get("role"))
        content = message.get("content")
        if isinstance(content, str):
            if tags is not None and not tags.active:
                tags = None
            if tags is None and "<audio>" in content:
                raise DropError(Reason.MISSING_MEDIA, "the text has an <audio> tag, but the JSON lists no `audios` and "
                                "the sample has no audio part (wav, flac, mp3, ogg, opus, m4a)")  # fmt: skip
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
    if kind in MEDIA_KINDS:
        ref = pool.resolve(kind, entry.get(kind))
        return {"type": kind, kind: ref.part}
    raise DropError(Reason.UNKNOWN_FORMAT, f"unknown content item type {kind!r}")


def _from_texts(raw: Any, pool: _PartPool, tags: _TaggedMedia) -> list[dict]:
    """The ``texts`` list: HF messages (what the published converter writes), ShareGPT turns, or role-keyed turns."""
    if all(isinstance(turn, dict) and "role" in turn for turn in _list(raw)):
        return _from_hf_messages(raw, pool, tags)
    return _from_tagged_turns(_texts_turns(raw), tags)


def _texts_turns(raw: Any) -> list[tuple[str, str]]:
    turns: list[tuple[str, str]] = []
    for turn in _list(raw):
        if not isinstance(turn, dict):
            raise DropError(Reason.UNKNOWN_FORMAT, "each `texts` turn must be an object")
        if "from" in turn:
            turns.append((_role(turn["from"]), _value(turn)))
            continue
        for role in ("system", "user", "assistant"):
            if role in turn:
                if not isinstance(turn[role], str):
                    raise DropError(Reason.UNKNOWN_FORMAT, f"`texts` {role} value must be a string")
                turns.append((role, turn[role]))
    return turns


class _TaggedMedia:
    """Media items for ``<image>``/``<video>``/``<audio>`` tags: the JSON's media lists, else the parts by extension."""

    def __init__(self, data: dict, pool: _PartPool) -> None:
        self.pool = pool
        if _LIST_KEYS.isdisjoint(data):  # most samples: no media list, so none to read (no malformed one to refuse)
            self.listed: dict[str, list | None] = dict.fromkeys(MEDIA_KINDS)
            self.field = {kind: f"{kind}s" for kind in MEDIA_KINDS}
        else:
            self.listed = {kind: _media_list(data, kind) for kind in MEDIA_KINDS}  # None: the JSON lists none
            self.field = {kind: _media_field(data, kind) for kind in MEDIA_KINDS}  # for messages: `images`, `name`
        self.used = dict.fromkeys(MEDIA_KINDS, 0)
        self._active: bool | None = None

    @property
    def active(self) -> bool:
        """Whether string content is read for tags (a media list, or media parts to take)."""
        if self._active is None:
            self._active = any(v is not None for v in self.listed.values()) or any(self.pool.of_kind(k) for k in self.used)
        return self._active

    def items(self, text: str) -> list[dict]:
        items: list[dict] = []
        for piece in _TAG.split(text):
            if piece in ("<image>", "<video>", "<audio>"):
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
            raise DropError(Reason.MISSING_MEDIA, f"the text has more <{kind}> tags than `{self.field[kind]}` entries ({len(names)})"
            )
        return self.pool.resolve_listed(kind, names[index], index, len(names))

    def check_counts(self) -> None:
        """Every listed (or, with no list, every available) medium of a tagged kind was used."""
        for kind, used in self.used.items():
            names = self.listed[kind]
            available = len(names) if names is not None else (len(self.pool.of_kind(kind)) if used else 0)
            if used < available:
                source = f"`{self.field[kind]}` lists {available}" if names is not None else f"the sample has {available} {kind} parts"
                raise DropError(Reason.MEDIA_MISMATCH, f"the text has {used} <{kind}> tags but {source}")


# every key _media_list, _media_field and _published_media_list read
_LIST_KEYS = frozenset({*(f"{kind}s" for kind in MEDIA_KINDS), *MEDIA_KINDS, "name", "media_files"})


def _media_list(data: dict, kind: str) -> list | None:
    """``images`` / ``videos`` / ``audios`` (or LLaVA's ``image`` / ``video``: a string or a list) as a list, or None."""
    for name in (f"{kind}s", kind):
        if name in data and data[name] is not None:
            value = data[name]
            if isinstance(value, str):
                return [value]
            if isinstance(value, list) and all(isinstance(v, str) for v in _flatten(value)):
                return _flatten(value)
            raise DropError(Reason.UNKNOWN_FORMAT, f"`{name}` must be a part name or a list of part names")
    return _published_media_list(data, kind)


def _media_field(data: dict, kind: str) -> str:
    """The JSON key a media list of ``kind`` was read from (``images``, ``image``, ``name``, ``media_files``)."""
    names = (f"{kind}s", kind, "name", "media_files")
    return next((name for name in names if isinstance(data, dict) and data.get(name) is not None), f"{kind}s")


def _flatten(value: list) -> list:
    """Nested lists of names (the published tool groups media per sub-sample) as one list, in order."""
    return [leaf for item in value for leaf in (_flatten(item) if isinstance(item, list) else [item])]


def _published_media_list(data: dict, kind: str) -> list | None:
    """The published converter's ``name`` (or ``media_files``) list of ``media`` (or ``media_type``) parts.

    ``media: image`` / ``video`` declares every entry's kind; ``mix`` or none takes each entry's
    kind from its extension. None when the JSON lists no media of ``kind``.
    """
    field = next((f for f in ("name", "media_files") if data.get(f) is not None), None)
    if field is None:
        return None
    value = data[field]
    names = [value] if isinstance(value, str) else _flatten(value) if isinstance(value, list) else None
    if names is None or not all(isinstance(n, str) for n in names):
        raise DropError(Reason.UNKNOWN_FORMAT, f"`{field}` must be a part name or a (nested) list of part names")
    declared = data.get("media", data.get("media_type"))
    if declared in MEDIA_KINDS:
        return names if declared == kind else None
    return [n for n in names if media_kind_of_part(n) == kind] or None


def _from_tagged_turns(turns: list[tuple[str, str]], tags: _TaggedMedia) -> list[dict]:
    messages = [{"role": role, "content": tags.items(text)} for role, text in turns]
    tags.check_counts()
    return messages


def _from_vqa_list(raw: list, pool: _PartPool) -> list[dict]:
    """The published converter's VQA branch: the JSON is the message list, the image the sample's ``jpg`` part.

    Turns are ShareGPT ``{from, value}`` or ``{role, content}`` with string content; each
    ``<image>`` tag takes the next image part. Without any tag of a kind, the sample's parts
    of that kind open the first user turn (energon's ``VQASample``: the image, then the context).
    """
    turns = [(_role(t.get("from", t.get("role"))), _turn_text(t)) for t in raw if isinstance(t, dict)]
    if len(turns) != len(raw):
        raise DropError(Reason.UNKNOWN_FORMAT, "each turn of a message list must be an object")
    first_user = next((i for i, (role, _) in enumerate(turns) if role == "user"), 0)
    for kind in ("video", "image"):  # images end up first
        if not any(f"<{kind}>" in text for _, text in turns):
            role, text = turns[first_user]
            turns[first_user] = (role, f"<{kind}>" * len(pool.of_kind(kind)) + text)
    return _from_tagged_turns(turns, _TaggedMedia({}, pool))


def _turn_text(turn: dict) -> str:
    text = turn.get("value", turn.get("content"))
    if not isinstance(text, str):
        raise DropError(Reason.UNKNOWN_FORMAT, "each turn needs a string `value` or `content`")
    return text


def _from_captions(data: dict, tags: _TaggedMedia) -> list[dict]:
    """The published tool's caption layout: ``captions`` with optional ``prompts`` (or ``prompt``).

    Entries are strings or ``{"content": str}``. Flat lists pair prompt i with caption i; when
    the sample has one image per caption, image i opens user turn i, otherwise every image opens
    the first. Nested lists (``captions: [[c], [c1, c2]]``) are sub-conversations: group i's
    images (``images[i]`` when the media list is nested too, else all in the first group) open its
    first user turn. Images are the JSON's list (``images`` / ``media_files`` / ``name``) or the
    sample's image parts by extension.
    """
    captions, prompts = data["captions"], data.get("prompts", data.get("prompt")) or []
    if not isinstance(captions, list) or not captions or not isinstance(prompts, list):
        raise DropError(Reason.UNKNOWN_FORMAT, "`captions` must be a non-empty list (and `prompts` a list)")
    names = tags.listed["image"]
    n_images = len(names) if names is not None else len(tags.pool.of_kind("image"))
    grouped = all(isinstance(c, list) for c in captions)
    if grouped:
        media = next((data[f] for f in ("images", "media_files", "name") if isinstance(data.get(f), list)), None)
        nested = media is not None and len(media) == len(captions) and all(isinstance(m, list) for m in media)
        groups = [
            (len(media[i]) if nested else (n_images if i == 0 else 0), _texts_of(captions[i]),
             _texts_of(prompts[i]) if i < len(prompts) and isinstance(prompts[i], list) else [])
            for i in range(len(captions))
        ]  # fmt: skip
    elif n_images == len(captions) > 1:
        pairs = zip(_texts_of(captions), _padded(prompts, captions), strict=False)
        groups = [(1, [caption], [prompt]) for caption, prompt in pairs]
    else:
        groups = [(n_images, _texts_of(captions), _texts_of(prompts))]
    turns: list[tuple[str, str]] = []
    for n_group_images, group_captions, group_prompts in groups:
        for j, caption in enumerate(group_captions):
            prompt = group_prompts[j] if j < len(group_prompts) else ""
            turns += [("user", ("<image>" * n_group_images if j == 0 else "") + prompt), ("assistant", caption)]
    return _from_tagged_turns(turns, tags)


def _padded(prompts: list, captions: list) -> list[str]:
    texts = _texts_of(prompts)
    return texts + [""] * (len(captions) - len(texts))


def _texts_of(entries: Any) -> list[str]:
    """Caption / prompt entries as strings: ``"text"`` or ``{"content": "text"}``."""
    if not isinstance(entries, list):
        entries = [entries]
    texts = []
    for entry in entries:
        text = entry.get("content", entry.get("value")) if isinstance(entry, dict) else entry
        if not isinstance(text, str):
            raise DropError(Reason.UNKNOWN_FORMAT, f"caption / prompt entries must be strings, got {entry!r}")
        texts.append(text)
    return texts
