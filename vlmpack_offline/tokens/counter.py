"""Exact token counts (scan) and the full token sequence (loader) from one shared rule set.

Both entry points render the conversation with the tokenizer's chat template
(one pad per media item) and expand each pad as the HF processor does
(``expansion.py``)::

    count        tokenize the compact text (one pad per item), batched, then add
                 each item's expansion size arithmetically      -> Count(token_len, media_tokens, encoder_*)
    materialize  build the fully expanded text, tokenize it, and map the assistant
                 turns' spans onto it (``spans.py``: any template,
                 {% generation %} markers or not)               -> Materialized(input_ids, assistant_mask)

With ``train_on="assistant"`` (``loss.train_on``) a sample with no assistant
span is dropped by ``count`` as ``no_labels``, so the loader never meets a
sample that would train on nothing.

``len(materialize(...).input_ids) == count(...).token_len`` always (tested).
Text is tokenized with ``add_special_tokens=False``, as ``apply_chat_template``
does: the template already holds every marker.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..config import Config, VideoConfig
from ..conversation import Conversation
from ..errors import ConfigError
from ..reasons import DropError, Reason
from ..remote_code import load_pretrained, refuse_fallback_tokenizer, trusted
from .expansion import Expander
from .media_info import MediaInfo, probe_media
from .rules import ModelRules, load_model_rules
from .spans import ChatRenderer, SpanError

__all__ = [
    "Count", "Materialized", "TokenCounter", "load_tokenizer", "render_or_drop", "require_labels",
]  # fmt: skip



@dataclass(frozen=True, slots=True, kw_only=True)
class Count:
    token_len: int  # len(input_ids) of the whole sample
    media_tokens: int  # image + video pad tokens inside token_len
    encoder_patches: int = 0  # vision-encoder patches of the sample's media (families.Size); 0 on the slow path
    encoder_attention: int = 0  # sum of (tokens per encoder attention block)**2 over the sample's media
    audio_frames: int = 0  # frames the audio encoder's layers run on (after its conv front end), an audio item's Size
    audio_attention: int = 0  # sum of (frames per audio-encoder attention window)**2


@dataclass(frozen=True, slots=True, kw_only=True)
class Materialized:
    input_ids: list[int]  # the processor's input_ids for the whole sample
    assistant_mask: list[int]  # 1 where the token is learned (per train_on), 0 elsewhere; never 1 on media


def render_or_drop(
    chat: ChatRenderer, conversation: Conversation, *, spans: bool = False
) -> tuple[str, list[tuple[int, int]]]:
    """``chat`` rendering of one sample (and its assistant spans); failures become ``DropError``."""
    try:
        if spans:
            return chat.render_with_spans(conversation.messages)
        return chat.render(conversation.messages), []
    except SpanError as exc:
        raise DropError(Reason.NO_LABELS, str(exc)) from None
    except Exception as exc:  # jinja raises its own errors (TemplateError, UndefinedError, ...)
        raise DropError(Reason.UNKNOWN_FORMAT, f"chat template failed on this conversation: {exc}") from None


def require_labels(chat: ChatRenderer, conversation: Conversation, train_on: str) -> None:
    """Raise ``DropError(no_labels)`` when ``train_on`` is assistant and no assistant turn has a token."""
    if train_on != "assistant":
        return
    _require_assistant_turn(conversation)
    _, spans = render_or_drop(chat, conversation, spans=True)
    _require_span(spans)


def _require_assistant_turn(conversation: Conversation) -> None:
    if not any(m.get("role") == "assistant" for m in conversation.messages):
        raise DropError(
            Reason.NO_LABELS,
            "the sample has no assistant turn, so it has nothing to learn (loss.train_on: assistant); "
            "set loss.train_on: all to train on its text",
        )


def _with_turn_ends(rendered: str, spans: list[tuple[int, int]], tokens: tuple[str, ...]) -> list[tuple[int, int]]:
    """Each span extended over the turn-end token that directly follows it, past whitespace (``Family.turn_end_tokens``:
    GLM ends a turn by emitting the next ``<|user|>``, which its template writes as the next turn's start)."""
    if not tokens:
        return spans
    out = []
    for start, end in spans:
        after = end + len(rendered[end:]) - len(rendered[end:].lstrip())
        token = next((t for t in tokens if rendered.startswith(t, after)), None)
        out.append((start, after + len(token)) if token else (start, end))
    return out


class _CharTokens:
    """Which token holds a character, by bisection over the tokens' character offsets: the tokenizer's own
    ``Encoding.char_to_token`` walks the offsets from the start, so one call per turn made a long
    conversation's labels quadratic."""

    def __init__(self, offsets: Sequence[tuple[int, int]]) -> None:
        self.starts = [start for start, _ in offsets]
        self.ends = [end for _, end in offsets]

    def first(self, pos: int) -> int | None:
        """The first token holding character ``pos`` (``char_to_token``), or None."""
        i = bisect.bisect_right(self.starts, pos) - 1
        while i > 0 and self.starts[i - 1] <= pos < self.ends[i - 1]:
            i -= 1  # byte-level BPE spreads one character over several tokens, all mapped to it
        return i if i >= 0 and self.starts[i] <= pos < self.ends[i] else None

    def last_before(self, end: int) -> int:
        """The last token holding any character before ``end``. Byte-level BPE spreads one character over
        several tokens (an emoji: 👋 -> 2 tokens, each mapped to the whole character), and ``first`` names
        only the first of them, so an answer ending in 👋 would leave its last byte unlearned."""
        last = self.first(end - 1)
        if last is None:
            return len(self.starts) - 1
        while last + 1 < len(self.starts) and self.starts[last + 1] < end:
            last += 1
        return last


def _require_span(spans: list[tuple[int, int]] | Exception) -> None:
    """``require_labels``' verdict on spans found (or failed) already; the same reasons and texts."""
    if isinstance(spans, DropError):  # decided before any span was looked for (no assistant turn)
        raise spans
    if isinstance(spans, SpanError):
        raise DropError(Reason.NO_LABELS, str(spans))
    if isinstance(spans, Exception):  # jinja raises its own errors (TemplateError, UndefinedError, ...)
        raise DropError(Reason.UNKNOWN_FORMAT, f"chat template failed on this conversation: {spans}")
    if not any(end > start for start, end in spans):
        raise DropError(Reason.NO_LABELS, "the chat template renders no assistant tokens for this sample")


def _pad_kinds(ids: list[int], pad_ids: dict[str, int | None]) -> list[str]:
    """The media pads in ``ids``, in order; ``list.count`` (C speed) when only one kind occurs."""
    counts = {kind: ids.count(i) for kind, i in pad_ids.items() if i is not None}
    present = [kind for kind, n in counts.items() if n]
    if len(present) <= 1:
        return [kind for kind in present for _ in range(counts[kind])]
    kind_of = {pad_ids[kind]: kind for kind in present}
    return [kind_of[i] for i in ids if i in kind_of]


_LONG = 4_000  # characters: a longer text is tokenized in pieces (TokenCounter._encode_many)
_PIECE = 2_000  # characters at least between two cuts


def _cut_points(tokenizer) -> re.Pattern | None:
    """Where a long text may be cut: before a special added token matched as written (not normalized, no
    whitespace stripping around it), the tokens HF tokenizers split the text at first."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    tokens = sorted((t.content for t in decoder.values()
                     if t.special and not t.normalized and not t.lstrip and not t.rstrip), key=len, reverse=True)
    return re.compile("|".join(re.escape(t) for t in tokens)) if tokens else None


def _pieces(text: str, cut: re.Pattern | None) -> list[str]:
    if len(text) <= _LONG or cut is None:
        return [text]
    starts = [0]
    for match in cut.finditer(text):
        if match.start() - starts[-1] >= _PIECE:
            starts.append(match.start())
    return [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]


def load_tokenizer(path: str, *, trust_remote_code: bool = False):
    """``AutoTokenizer.from_pretrained(path)`` with a chat template (its own or ``chat_template.json``)."""
    from transformers import AutoTokenizer

    tokenizer = load_pretrained(AutoTokenizer.from_pretrained, path, trust_remote_code=trust_remote_code)
    if not trust_remote_code:
        refuse_fallback_tokenizer(path, type(tokenizer).__name__)
    if not tokenizer.chat_template:
        template_file = Path(path) / "chat_template.json"
        if template_file.is_file():
            import json

            tokenizer.chat_template = json.loads(template_file.read_text())["chat_template"]
        else:
            raise ConfigError(f"{path}: the tokenizer has no chat template (no chat_template.jinja / .json)")
    return tokenizer


class TokenCounter:
    """Counts and materializes samples for a Qwen-VL family (the fast path) or text-only models."""

    def __init__(
        self, rules: ModelRules, tokenizer, video: VideoConfig, train_on: str = "assistant",
        template_kwargs: dict | None = None,  # model.chat_template_kwargs: extra template variables
    ) -> None:  # fmt: skip
        self.rules = rules
        self.tokenizer = tokenizer
        self.video = video
        self.train_on = train_on  # "assistant" | "all" (loss.train_on)
        self.expander = Expander(rules, tokenizer)
        self.chat = ChatRenderer(tokenizer.chat_template, {**tokenizer.special_tokens_map, **(template_kwargs or {})})
        special = self.expander.special
        self._pads = {"image": special.image_pad, "video": special.video_pad, "audio": special.audio_pad}
        self._pad_ids = {kind: self._token_id(pad) for kind, pad in self._pads.items()}
        self._pad_re = re.compile("|".join(re.escape(pad) for pad in sorted(set(self._pads.values()), key=len, reverse=True)))
        self._cut = _cut_points(tokenizer)

    def _encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, one tokenizer call. A text over ``_LONG`` characters goes in pieces cut just
        before special tokens: HF tokenizers split at those added tokens before anything else, so the ids are
        the same, while one very long string costs them more than linear (16x the time for 10x the text)."""
        pieces, owner = [], []
        for index, text in enumerate(texts):
            for piece in _pieces(text, self._cut):
                pieces.append(piece)
                owner.append(index)
        out: list[list[int]] = [[] for _ in texts]
        for index, ids in zip(owner, self.tokenizer(pieces, add_special_tokens=False)["input_ids"] if pieces else [],
                              strict=True):
            out[index].extend(ids)
        return out

    def _token_id(self, token: str) -> int | None:
        """The id of a pad token, or None when the vocabulary lacks it (text-only tokenizers map it to unk)."""
        token_id = self.tokenizer.convert_tokens_to_ids(token)
        unk = getattr(self.tokenizer, "unk_token_id", None)
        return None if token_id is None or (unk is not None and token_id == unk) else token_id

    @classmethod
    def from_config(cls, config: Config, rules: ModelRules | None = None, *, snapshot: bool = False) -> TokenCounter:
        """Load rules (unless given) and the tokenizer once (one counter per worker process): transformers' own,
        or with ``snapshot`` its saved snapshot where one can be kept (the scan: the same ids, without torch)."""
        from .tokenizer_snapshot import load_counting_tokenizer

        rules = rules or load_model_rules(config.model)
        load = load_counting_tokenizer if snapshot else load_tokenizer
        return cls(rules, load(rules.processor_path, trust_remote_code=trusted(config.model.processor_kwargs)),
                   config.video, config.loss.train_on,
                   config.model.chat_template_kwargs)  # fmt: skip

    # -- media --------------------------------------------------------------
    def probe(self, kind: str, data: bytes, *, part: str = "") -> MediaInfo:
        """Facts about one media part; raises ``DropError`` with its drop reason."""
        if self.rules.text_only:
            raise DropError(
                Reason.UNSUPPORTED_MEDIA,
                f"{part or kind}: model.processor_loader is auto_tokenizer, so only text samples can be counted; "
                "set it to auto_processor to keep image/video samples",
            )
        return probe_media(kind, data, rules=self.rules, video=self.video, part=part)

    # -- rendering ----------------------------------------------------------
    def render(self, conversation: Conversation, *, spans: bool = False) -> tuple[str, list[tuple[int, int]]]:
        """Chat-template text (one pad per media item) and, if asked, the assistant char spans."""
        return render_or_drop(self.chat, conversation, spans=spans)

    def check_labels(self, conversation: Conversation) -> None:
        require_labels(self.chat, conversation, self.train_on)

    def _spans_many(
        self, conversations: Sequence[Conversation], texts: Sequence[str]
    ) -> list[list[tuple[int, int]] | Exception | None]:
        """Per sample: None when no labels are needed (``train_on: all``), a ``DropError`` for a
        sample with no assistant turn, else its assistant spans (or the error finding them)."""
        if self.train_on != "assistant":
            return [None] * len(conversations)
        out: list = [None] * len(conversations)
        todo = []
        for index, conversation in enumerate(conversations):
            try:
                _require_assistant_turn(conversation)
                todo.append(index)
            except DropError as exc:
                out[index] = exc
        found = self.chat.spans_many([conversations[i].messages for i in todo], [texts[i] for i in todo])
        for index, spans in zip(todo, found, strict=True):
            out[index] = spans
        return out

    def _texts_and_spans(
        self, conversations: Sequence[Conversation]
    ) -> tuple[list[str], list[DropError | None], list[list[tuple[int, int]] | Exception | None]]:
        """The rendered text of each sample that renders, a ``DropError`` in ``results`` for one that does
        not, and the span verdict (``_spans_many``) of each text, in sample order."""
        found = (self.chat.turns_many([c.messages for c in conversations]) if self.train_on == "assistant"
                 else [None] * len(conversations))  # fmt: skip
        rest = [c for c, f in zip(conversations, found, strict=True) if f is None]
        rest_texts: list[str] = []
        rest_results: list[DropError | None] = []
        try:  # one template call for the rest of the batch; on any failure, per sample to isolate the bad one
            rest_texts = self.chat.render_many([c.messages for c in rest])
            rest_results = [None] * len(rest)
        except Exception:
            for conversation in rest:
                try:
                    rest_texts.append(self.render(conversation)[0])
                    rest_results.append(None)
                except DropError as exc:
                    rest_results.append(exc)
        rendered = [c for c, r in zip(rest, rest_results, strict=True) if r is None]
        rest_spans = iter(self._spans_many(rendered, rest_texts))
        rest_text, rest_result = iter(rest_texts), iter(rest_results)
        texts, results, spans = [], [], []
        for one in found:
            result = None if one is not None else next(rest_result)
            results.append(result)
            if result is None:
                texts.append(one[0] if one is not None else next(rest_text))
                spans.append(one[1] if one is not None else next(rest_spans))
        return texts, results, spans

    def _check_pads(self, conversation: Conversation, found: Sequence[str]) -> None:
        expected = [m.kind for m in conversation.media]
        if sorted(found) != sorted(expected):  # HF processors pair the i-th pad of a kind with the i-th item of it,
            # so a template may render kinds in another order (LLaVA-OneVision: a turn's images before its videos)
            raise DropError(
                Reason.UNKNOWN_FORMAT,
                f"the chat template rendered media pads {list(found)} for media items {expected}; "
                "text that contains literal <|image_pad|>/<|video_pad|>/<|audio_pad|> is not supported",
            )

    # -- counting -----------------------------------------------------------
    def count_many(
        self, samples: Sequence[tuple[Conversation, Sequence[MediaInfo]]]
    ) -> list[Count | DropError]:
        """Counts for many samples with one batched tokenizer call; a failed sample gets its ``DropError``.

        One template render per sample: with ``loss.train_on: assistant`` the assistant spans come from
        it where the template streams its messages (``ChatRenderer.turns_many``); elsewhere every sample
        is rendered in one template call and the prefixes the span check needs in one call per kind
        (``ChatRenderer.spans_many``).
        """
        texts, results, spans = self._texts_and_spans([c for c, _ in samples])
        spans = iter(spans)
        encoded = iter(self._encode_many(self.expander.compact_many(texts)))
        for index, (conversation, media) in enumerate(samples):
            if results[index] is not None:
                continue
            ids, found_spans = next(encoded), next(spans)
            try:
                self._check_pads(conversation, _pad_kinds(ids, self._pad_ids))
                if found_spans is not None:
                    _require_span(found_spans)
                sizes = [self.expander.replacement_size(item) for item in self.expander.in_sample(media)]
                results[index] = Count(
                    token_len=len(ids) + sum(size.tokens - 1 for size in sizes),
                    media_tokens=sum(size.media_tokens for size in sizes),
                    encoder_patches=sum(size.encoder_patches for size in sizes),
                    encoder_attention=sum(size.encoder_attention for size in sizes),
                    audio_frames=sum(size.audio_frames for size in sizes),
                    audio_attention=sum(size.audio_attention for size in sizes),
                )
            except DropError as exc:
                results[index] = exc
        return results  # type: ignore[return-value]

    def count(self, conversation: Conversation, media: Sequence[MediaInfo]) -> Count:
        """``count_many`` for one sample; raises ``DropError``."""
        (result,) = self.count_many([(conversation, media)])
        if isinstance(result, DropError):
            raise result
        return result

    # -- materializing ------------------------------------------------------
    def materialize(self, conversation: Conversation, media: Sequence[MediaInfo]) -> Materialized:
        """The processor's ``input_ids`` for the whole sample plus the mask of learned tokens.

        ``media`` is in ``conversation.media`` order. With ``train_on="assistant"`` the mask
        covers every token of each assistant turn's span (``spans.py``: content + end-of-turn),
        with ``"all"`` every token; either way every token of a media expansion is 0.
        """
        learn_all = self.train_on == "all"
        rendered, spans = self.render(conversation, spans=not learn_all)
        spans = _with_turn_ends(rendered, spans, getattr(self.expander.family, "turn_end_tokens", ()))
        prefix = getattr(self.expander.family, "text_prefix", "")  # the generic path: tokens its processor's call
        if prefix or getattr(self.expander.family, "text_suffix", ""):  # adds around every text (compact_text too)
            rendered = f"{prefix}{rendered}{self.expander.family.text_suffix}"
            spans = [(start + len(prefix), end + len(prefix)) for start, end in spans]
        matches = list(self._pad_re.finditer(rendered))
        pad_kind = {pad: kind for kind, pad in self._pads.items()}
        self._check_pads(conversation, [pad_kind[m.group()] for m in matches])
        pieces: list[str] = []
        regions: list[tuple[int, int]] = []  # expanded-text char ranges of each replacement
        starts: list[int] = []  # rendered-text start of each pad, for mapping spans
        shifts: list[int] = []  # cumulative length change after each pad
        last, shift = 0, 0
        by_kind = {kind: iter([i for i in self.expander.in_sample(media) if i.kind == kind]) for kind in pad_kind.values()}
        for match in matches:  # the i-th pad of a kind takes the i-th item of that kind, as the processors pair them
            item = next(by_kind[pad_kind[match.group()]])
            pieces.append(rendered[last : match.start()])
            replacement = self.expander.replacement_text(item)
            begin = match.start() + shift
            regions.append((begin, begin + len(replacement)))
            pieces.append(replacement)
            shift += len(replacement) - (match.end() - match.start())
            starts.append(match.start())
            shifts.append(shift)
            last = match.end()
        pieces.append(rendered[last:])
        expanded = "".join(pieces)
        encoding = self.tokenizer(expanded, add_special_tokens=False, return_offsets_mapping=True)
        ids = list(encoding["input_ids"])
        mask = [int(learn_all)] * len(ids)
        chars = _CharTokens(encoding["offset_mapping"])

        def to_expanded(pos: int) -> int:
            k = bisect.bisect_left(starts, pos)  # pads that start strictly before pos
            return pos + (shifts[k - 1] if k else 0)

        for start, end in spans:
            first = chars.first(to_expanded(start))
            if first is None:
                break
            for position in range(first, chars.last_before(to_expanded(end)) + 1):
                mask[position] = 1
        for begin, end in regions:
            first, final = chars.first(begin), chars.first(end - 1)
            for position in range(first, final + 1):
                mask[position] = 0
        return Materialized(input_ids=ids, assistant_mask=mask)
