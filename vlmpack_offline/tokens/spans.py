"""Where each assistant turn sits in the rendered chat, for any chat template.

Published chat templates (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, ...) carry no
``{% generation %}`` markers, so HF's ``return_assistant_tokens_mask`` finds
nothing in them. We find the turns by rendering the conversation turn by turn:
for assistant message ``i``::

    prompt_i = render(messages[:i], add_generation_prompt=True)   ... <|im_start|>assistant\\n
    upto_i   = render(messages[:i+1])                             ... <|im_start|>assistant\\nHi!<|im_end|>\\n
    turn_i   = upto_i[len(prompt_i):].rstrip()                    Hi!<|im_end|>

``turn_i`` is what the model generates for that turn: its content and its
end-of-turn token, without the role header (which the generation prompt already
holds) and without the whitespace the template puts after the turn. When
``upto_i`` is a prefix of the full render (every template that renders turns
independently), the span's offsets carry over; otherwise ``turn_i`` is searched
in the full render after the previous turn, then in its history form (``_history_turn``:
thinking templates such as Qwen3.5's render a turn before a later user query without its
``<think>`` block). A generation prompt that is not a prefix of the rendered turn (it adds an empty
thinking block the history leaves out: Gemma 4, ERNIE-4.5-VL) counts as far as it agrees with the turn's
start (``_rendered_header``). A template for which none holds
raises ``SpanError``: labels are never guessed.

Templates with ``{% generation %}`` markers are read the same way: the markers of templates as
published do not always hold the end-of-turn token (LLaVA-OneVision's wrap the text alone, so a
model trained on them never learns ``<|im_end|>``, and never learns to stop). HF's marker spans
are the fallback for a marker template whose turns cannot be located or rendered one by one.

Where the template streams its messages (``turn_marks.py``: proven from its Jinja tree, then checked
on probe conversations), every ``prompt_i`` and ``upto_i`` is a cut of the full render plus the constant
generation prompt, so ``ChatRenderer.turns_many`` reads the spans off ONE render with a mark at the start
of each message (``_spans_from_starts``: ``_locate_turn``'s own steps on those cuts). Elsewhere, and for a
sample the one render does not settle, the scan checks many samples at once
(``ChatRenderer.spans_many``): their full texts are already rendered, ``upto_i`` of the last turn is that
full text, and every other prefix is rendered in one template call per ``add_generation_prompt`` value,
so a one-turn sample costs one extra render, not three.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence

from .hf_chat import chat_functions
from .text_slots import TextSlots
from .turn_marks import MarkedTemplate

__all__ = ["SpanError", "ChatRenderer", "has_generation_markers", "assistant_spans", "linear_spans"]

FEW_TURNS = 4  # up to this many assistant turns the exact turn-by-turn search runs; beyond it, linear_spans first
_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")

Render = Callable[[Sequence[dict], bool], str]  # (messages, add_generation_prompt) -> text


class SpanError(ValueError):
    """The template renders an assistant turn in a way we cannot locate in the full text."""


def _many_turns(messages: Sequence[dict]) -> bool:
    """More than ``FEW_TURNS`` answers: ``linear_spans`` is tried before the exact search."""
    return sum(m.get("role") == "assistant" for m in messages) > FEW_TURNS


def has_generation_markers(template: str) -> bool:
    """True when the template marks assistant output with ``{% generation %}``."""
    return bool(_GENERATION.search(template or ""))


def assistant_spans(messages: Sequence[dict], render: Render, full: str | None = None) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of every assistant turn in ``render(messages)``, in order.

    The exact turn-by-turn search of the module doc: two prefix renders per turn, so O(turns x length);
    ``linear_spans`` finds the same spans of a long conversation in a few renders of it."""
    full = render(messages, False) if full is None else full
    spans: list[tuple[int, int]] = []
    cursor = 0
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        span = _locate_turn(messages, index, render, full, cursor)
        if span is not None:
            spans.append(span)
            cursor = span[1]
    return spans


def _locate_turn(messages: Sequence[dict], index: int, render: Render, full: str,
                 cursor: int) -> tuple[int, int] | None:
    """The span of assistant turn ``index`` found after ``cursor`` (None: the turn renders no text)."""
    prompt = render(messages[:index], True)
    upto = full if index + 1 == len(messages) else render(messages[: index + 1], False)
    if not upto.startswith(prompt):
        prompt = _rendered_header(messages, index, render, prompt, upto)
    turn = upto[len(prompt) :].rstrip()
    if not turn:
        return None
    if full.startswith(upto) and len(prompt) >= cursor:
        start = len(prompt)
    else:
        start = full.find(turn, cursor)
        if start < 0 and (history := _history_turn(messages, index, render, prompt)):
            turn, start = history, full.find(history, cursor)  # a thinking template's earlier turn
        if start < 0:
            raise SpanError(
                f"assistant turn {index} renders differently alone than inside the whole conversation; "
                "add {% generation %} markers to the template to locate its tokens"
            )
    return start, start + len(turn)


def _rendered_header(messages: Sequence[dict], index: int, render: Render, prompt: str, upto: str) -> str:
    """The prefix of ``upto`` up to where assistant turn ``index``'s own text starts, for a template whose
    generation prompt is not a prefix of the rendered turn: it adds what a history turn leaves out (Gemma 4's
    empty ``<|channel>thought\\n<channel|>``, ERNIE-4.5-VL's empty ``<think>`` block) or the turn renders
    after a separator (Molmo2's space before ``<|im_start|>assistant``). The generation prompt's own part
    (past the history render) is matched at the turn's start, after whitespace only, as far as it agrees
    there: wholly, or up to the end of a word or line (the role header); else ``SpanError``."""
    history = render(messages[:index], False)
    header = prompt[len(history) :] if prompt.startswith(history) and upto.startswith(history) else ""
    rest = upto[len(history) :]
    for size in range(len(header), 0, -1):
        at = rest.find(header[:size])
        if at >= 0 and not rest[:at].strip() and (size == len(header) or header[size - 1].isspace()):
            return upto[: len(history) + at + size]
    raise SpanError(
        f"assistant turn {index}: the template's generation prompt is not a prefix of the rendered "
        "turn, so the assistant tokens cannot be located; add {% generation %} markers to the template"
    )


def linear_spans(messages: Sequence[dict], render: Render, full: str) -> list[tuple[int, int]] | None:
    """``assistant_spans`` of a long conversation in a few renders of it (linear in its length), or None
    where this shortcut does not apply (then the exact search runs).

    One render with every message's content between two marks (``_OPEN`` / ``_CLOSE``, private-use
    characters) shows where each content sits in ``full``. Turn i then starts after the generation
    prompt before its content (the longest prefix of the prompt found there: a thinking template's
    earlier turns keep only its role header) and ends where its end-of-turn text after the content ends
    (``<|im_end|>``, ``<end_of_turn>``, nothing for GLM). The prompt and the end-of-turn text are read off
    the first assistant turn, located exactly; the first and the last turns must come out as the
    exact search finds them. Any mark lost or moved by the template, any turn whose prompt or
    end-of-turn text is not where expected, any difference: None."""
    assistants = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if not assistants or _MARKS.search(json.dumps(messages, ensure_ascii=False, default=str)):
        return None
    try:
        marked = render([_marked(m) for m in messages], False)
    except Exception:  # noqa: BLE001 - a template that rejects the marks: the exact search decides
        return None
    where = [(m.start(), m.group()) for m in _MARKS.finditer(marked)]
    if [c for _, c in where] != [_OPEN, _CLOSE] * len(messages) or _MARKS.sub("", marked) != full:
        return None
    content_start = [pos - 2 * k for k, (pos, _) in enumerate(where[0::2])]
    content_end = [pos - 2 * k - 1 for k, (pos, _) in enumerate(where[1::2])]
    first, last = assistants[0], assistants[-1]
    try:
        prompt = render(messages[:first], True)
        history = render(messages[:first], False)
        exact_first = _locate_turn(messages, first, render, full, 0)
    except Exception:  # noqa: BLE001 - Jinja's errors and SpanError alike: the exact search reports them
        return None
    if exact_first is None or not prompt.startswith(history) or exact_first[1] < content_end[first]:
        return None
    generation = prompt[len(history) :]
    turn_end = full[content_end[first] : exact_first[1]]
    # no generation prompt (Mistral: an answer follows the question's [/INST]): a turn starts past the same
    # text after the previous message's content as the first turn does
    before = full[content_end[first - 1] if first else 0 : exact_first[0]] if not generation else ""
    spans: list[tuple[int, int]] = []
    for i in assistants:
        low = max(content_end[i - 1] if i else 0, spans[-1][1] if spans else 0)
        if generation:
            start = _after_generation_prompt(full, low, content_start[i], generation)
        else:
            start = low + len(before) if full.startswith(before, low) and low + len(before) <= content_start[i] else None
        end = content_end[i] + len(turn_end)
        if start is None or full[content_end[i] : end] != turn_end:
            return None
        if end > start:
            spans.append((start, end))
    try:
        cursor = spans[-2][1] if len(spans) > 1 else 0
        exact_last = _locate_turn(messages, last, render, full, cursor)
    except Exception:  # noqa: BLE001
        return None
    return spans if spans and spans[0] == exact_first and spans[-1] == exact_last else None


_OPEN, _CLOSE = "\ue000", "\ue001"  # private-use characters: no tokenizer or text gives them a meaning
_MARKS = re.compile("[\ue000\ue001]")
_THINK_END = "</think>"


def _marked(message: dict) -> dict:
    """``message`` with its content between ``_OPEN`` and ``_CLOSE``, inside its text (past the whitespace a
    template may strip), or as text items of their own where the content starts or ends with media."""
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": _mark_text(content, True, True)}
    if not isinstance(content, list) or not content:
        return {**message, "content": _OPEN + _CLOSE}
    items = [dict(item) if isinstance(item, dict) else item for item in content]
    if len(items) == 1 and _is_text(items[0]):  # one text item holds both marks
        items[0]["text"] = _mark_text(items[0]["text"], True, True)
        return {**message, "content": items}
    if _is_text(items[0]):
        items[0]["text"] = _mark_text(items[0]["text"], True, False)
    else:
        items.insert(0, {"type": "text", "text": _OPEN})
    if _is_text(items[-1]):
        items[-1]["text"] = _mark_text(items[-1]["text"], False, True)
    else:
        items.append({"type": "text", "text": _CLOSE})
    return {**message, "content": items}


def _is_text(item) -> bool:
    return isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str)


def _mark_text(text: str, opening: bool, closing: bool) -> str:
    """``text`` with the marks around its stripped middle; the opening one past a ``</think>`` block, since
    thinking templates (Qwen3, Qwen3.5) keep only what follows the last one."""
    thought = text.rfind(_THINK_END) + len(_THINK_END) if _THINK_END in text else 0
    lead = thought + len(text[thought:]) - len(text[thought:].lstrip())
    trail = max(len(text.rstrip()), lead)
    return text[:lead] + (_OPEN if opening else "") + text[lead:trail] + (_CLOSE if closing else "") + text[trail:]


def _after_generation_prompt(full: str, low: int, content: int, generation: str) -> int | None:
    """Where turn text begins between ``low`` and the content's start: after the last occurrence of the
    longest prefix of the generation prompt found there (the whole prompt, or for an earlier turn of a
    thinking template its role header alone); None when not even a few characters of it are there."""
    region = full[low:content]
    for size in range(len(generation), min(len(generation), 4) - 1, -1):
        found = region.rfind(generation[:size])
        if found >= 0:
            return low + found + size
    return None


def _history_turn(messages: Sequence[dict], index: int, render: Render, prompt: str) -> str:
    """Assistant turn ``index`` as the template renders it when a later user query follows it, or "".

    Thinking templates (Qwen3.5) render only the turns after the last user query with a
    ``<think>...</think>`` block; an earlier turn sits in the full text without it. Inserting the
    turn before that later query shows its history form: the text it adds, past the role header it
    shares with the generation prompt (``<|im_start|>assistant\\n``)."""
    later = next((m for m in messages[index + 1 :] if m.get("role") == "user"), None)
    if later is None:
        return ""
    head = render(messages[:index], False)
    without = render([*messages[:index], later], False)
    with_turn = render([*messages[: index + 1], later], False)
    tail = without[len(head) :]
    if not (without.startswith(head) and with_turn.startswith(head) and with_turn.endswith(tail) and prompt.startswith(head)):
        return ""
    block = with_turn[len(head) : len(with_turn) - len(tail)]
    header = os.path.commonprefix([block, prompt[len(head) :]])
    return block[len(header) :].rstrip()


def _spans_from_starts(messages: Sequence[dict], full: str, starts: Sequence[int],
                       generation: str) -> list[tuple[int, int]] | None:
    """``assistant_spans`` where ``render(messages[:k])`` is ``full[:starts[k]]`` and the generation prompt
    adds ``generation`` to it (``turn_marks``): ``_locate_turn``'s own steps on those slices, linear in the
    text. None where a step would leave its first branch (the prompt not a prefix of the turn, a turn
    before the cursor) or a turn would need an empty prefix: the exact search decides those."""
    spans: list[tuple[int, int]] = []
    cursor, last = 0, len(messages) - 1
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        if index == 0:
            return None
        begin = starts[index] + len(generation)
        end = starts[index + 1] if index < last else len(full)
        if end < begin or not full.startswith(generation, starts[index]) or begin < cursor:
            return None
        turn = len(full[begin:end].rstrip())
        if turn:
            spans.append((begin, begin + turn))
            cursor = begin + turn
    return spans


# conversations a template's marked render is checked on before it is trusted (turn_marks.MarkedTemplate.build)
_PROBES = (
    ({"role": "user", "content": [{"type": "text", "text": "What is this?"}]},
     {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]}),
    ({"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
     {"role": "user", "content": [{"type": "image", "image": "img0.jpg"}, {"type": "text", "text": "And this?"}]},
     {"role": "assistant", "content": [{"type": "text", "text": "A dog."}]},
     {"role": "user", "content": [{"type": "text", "text": "Sure?"}]},
     {"role": "assistant", "content": [{"type": "text", "text": " Yes. "}]}),
)  # fmt: skip


class ChatRenderer:
    """Renders conversations with one chat template (HF's own Jinja environment: ``hf_chat.chat_functions``) and
    finds assistant spans.

    ``one_render``: where the template streams its messages (``turn_marks``), a conversation's spans come
    from its one full render; False: always from prefix renders (the exact search alone)."""

    def __init__(self, template: str, special_tokens_map: dict, *, one_render: bool = True) -> None:
        self.template = template
        self.special_tokens_map = dict(special_tokens_map)
        self.has_generation = has_generation_markers(template)
        self.one_render = one_render
        self._marked: MarkedTemplate | None | bool = False  # built on first use; None: the template does not stream
        self._slots: TextSlots | None = None  # the marked render from one render per shape, where proven (text_slots)

    def _marked_template(self) -> MarkedTemplate | None:
        if self._marked is False:
            self._marked = MarkedTemplate.build(self.template, self.special_tokens_map, _PROBES) if self.one_render else None
            if self._marked is not None and not all(self._agrees(probe) for probe in _PROBES):
                self._marked = None
            if self._marked is not None:
                self._slots = TextSlots.build(self._marked, self.template, _PROBES)
        return self._marked  # type: ignore[return-value]

    def _agrees(self, probe: Sequence[dict]) -> bool:
        """The one-render spans of a probe conversation equal the exact search's, or it proves nothing."""
        (found,) = self.turns_many([probe])
        if found is None:
            return True
        try:
            full = self.render(probe)
            return found == (full, assistant_spans(probe, self.render, full))
        except Exception:  # noqa: BLE001 - the exact search fails where one render found spans: not trusted
            return False

    def turns_many(self, conversations: Sequence[Sequence[dict]]) -> list[tuple[str, list[tuple[int, int]]] | None]:
        """``render_with_spans`` of each conversation from one render of it, or None where that one render
        proves nothing (a template that does not stream, a conversation with no assistant turn or whose turn
        leaves the exact search's first branch, a render that raises): the caller renders prefixes there."""
        marked = self._marked_template()
        if marked is None:
            return [None] * len(conversations)
        render = marked.render if self._slots is None else self._slots.render
        out: list[tuple[str, list[tuple[int, int]]] | None] = []
        for messages in conversations:
            found = None
            if any(m.get("role") == "assistant" for m in messages):
                try:
                    rendered = render(messages)
                except Exception:  # noqa: BLE001 - the plain render raises it again, where it is reported
                    rendered = None
                if rendered is not None:
                    spans = _spans_from_starts(messages, rendered[0], rendered[1], marked.generation)
                    found = None if spans is None else (rendered[0], spans)
            out.append(found)
        return out

    def render_many(self, conversations: Sequence[Sequence[dict]], *, add_generation_prompt: bool = False) -> list[str]:
        """One text per conversation; raises whatever Jinja raises."""
        if not conversations:
            return []
        rendered, _ = chat_functions(self.template, self.special_tokens_map).render_jinja_template(
            conversations=[list(c) for c in conversations],
            chat_template=self.template,
            add_generation_prompt=add_generation_prompt,
            **self.special_tokens_map,
        )
        return list(rendered)

    def render(self, messages: Sequence[dict], add_generation_prompt: bool = False) -> str:
        return self.render_many([messages], add_generation_prompt=add_generation_prompt)[0]

    def spans_many(
        self, conversations: Sequence[Sequence[dict]], fulls: Sequence[str]
    ) -> list[list[tuple[int, int]] | Exception]:
        """``render_with_spans(c)[1]`` of each conversation whose full render ``fulls[i]`` is known;
        a conversation whose renders fail, or whose turns cannot be located, gets its exception."""
        # the prefixes assistant_spans asks for: (conversation, prefix length, add_generation_prompt)
        wanted: list[tuple[int, int, bool]] = []
        for c, messages in enumerate(conversations):
            if _many_turns(messages):
                continue  # linear_spans renders it whole a few times: no prefixes to batch
            for i, message in enumerate(messages):
                if message.get("role") == "assistant":
                    wanted.append((c, i, True))
                    if i + 1 < len(messages):  # the last turn's prefix is the whole conversation
                        wanted.append((c, i + 1, False))
        rendered: dict[tuple[int, int, bool], str | Exception] = {}
        for generation in (True, False):
            keys = [key for key in wanted if key[2] is generation]
            prefixes = [conversations[c][:n] for c, n, _ in keys]
            try:
                rendered.update(zip(keys, self.render_many(prefixes, add_generation_prompt=generation), strict=True))
            except Exception:  # one bad conversation: render each alone so only its own spans fail
                for key, prefix in zip(keys, prefixes, strict=True):
                    rendered[key] = _or_exception(lambda p=prefix, g=generation: self.render(p, g))

        def lookup(c: int) -> Render:
            def render(messages: Sequence[dict], generation: bool) -> str:
                key = (c, len(messages), generation)
                if not all(a is b for a, b in zip(messages, conversations[c], strict=False)):  # not a prefix (_history_turn)
                    return self.render(messages, generation)
                if not generation and len(messages) == len(conversations[c]):
                    return fulls[c]
                if key not in rendered:
                    return self.render(messages, generation)
                text = rendered[key]
                if isinstance(text, Exception):
                    raise text
                return text

            return render

        found = [
            _or_exception(lambda c=c, m=messages: self._spans(m, lookup(c), fulls[c]))
            for c, messages in enumerate(conversations)
        ]
        return [  # a marker template whose turns cannot be rendered one by one keeps HF's marker spans
            _or_exception(lambda m=messages: self._marker_spans(m)[1])
            if isinstance(spans, Exception) and self.has_generation else spans
            for messages, spans in zip(conversations, found, strict=True)
        ]  # fmt: skip

    def render_with_spans(self, messages: Sequence[dict]) -> tuple[str, list[tuple[int, int]]]:
        """The rendered text and its assistant spans (the ``{% generation %}`` spans only where rendering
        turn by turn cannot locate them)."""
        (found,) = self.turns_many([messages])
        if found is not None:
            return found
        try:  # a prefix may fail to render (a template's own role checks) where the whole conversation renders
            full = self.render(messages)
            return full, self._spans(messages, self.render, full)
        except Exception:  # noqa: BLE001 - Jinja's errors and SpanError alike: a marker template's spans instead
            if not self.has_generation:
                raise
            return self._marker_spans(messages)

    @staticmethod
    def _spans(messages: Sequence[dict], render: Render, full: str) -> list[tuple[int, int]]:
        """``assistant_spans``, through ``linear_spans`` for a conversation of more than ``FEW_TURNS`` answers."""
        if _many_turns(messages):
            found = linear_spans(messages, render, full)
            if found is not None:
                return found
        return assistant_spans(messages, render, full)

    def _marker_spans(self, messages: Sequence[dict]) -> tuple[str, list[tuple[int, int]]]:
        """HF's ``{% generation %}`` spans (``return_assistant_tokens_mask``)."""
        rendered, indices = chat_functions(self.template, self.special_tokens_map).render_jinja_template(
            conversations=[list(messages)],
            chat_template=self.template,
            return_assistant_tokens_mask=True,
            **self.special_tokens_map,
        )
        return rendered[0], [tuple(span) for span in indices[0]]


def _or_exception(call: Callable[[], object]):
    """``call()``, or the exception it raised (kept per conversation, raised by its caller)."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - Jinja's errors and SpanError alike belong to one sample
        return exc
