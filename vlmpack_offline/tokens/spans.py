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
``<think>`` block). A template for which none holds
raises ``SpanError``: labels are never guessed.

Templates with ``{% generation %}`` markers are read the same way: the markers of templates as
published do not always hold the end-of-turn token (LLaVA-OneVision's wrap the text alone, so a
model trained on them never learns ``<|im_end|>``, and never learns to stop). HF's marker spans
are the fallback for a marker template whose turns cannot be located or rendered one by one.

The scan checks many samples at once (``ChatRenderer.spans_many``): their full texts are
already rendered, ``upto_i`` of the last turn is that full text, and every other prefix
is rendered in one template call per ``add_generation_prompt`` value, so a one-turn
sample costs one extra render, not three.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence

from transformers.utils.chat_template_utils import render_jinja_template

__all__ = ["SpanError", "ChatRenderer", "has_generation_markers", "assistant_spans"]

_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")

Render = Callable[[Sequence[dict], bool], str]  # (messages, add_generation_prompt) -> text


class SpanError(ValueError):
    """The template renders an assistant turn in a way we cannot locate in the full text."""


def has_generation_markers(template: str) -> bool:
    """True when the template marks assistant output with ``{% generation %}``."""
    return bool(_GENERATION.search(template or ""))


def assistant_spans(messages: Sequence[dict], render: Render, full: str | None = None) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of every assistant turn in ``render(messages)``, in order."""
    full = render(messages, False) if full is None else full
    spans: list[tuple[int, int]] = []
    cursor = 0
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        prompt = render(messages[:index], True)
        upto = render(messages[: index + 1], False)
        if not upto.startswith(prompt):
            raise SpanError(
                f"assistant turn {index}: the template's generation prompt is not a prefix of the rendered "
                "turn, so the assistant tokens cannot be located; add {% generation %} markers to the template"
            )
        turn = upto[len(prompt) :].rstrip()
        if not turn:
            continue
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
        spans.append((start, start + len(turn)))
        cursor = start + len(turn)
    return spans


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


class ChatRenderer:
    """Renders conversations with one chat template (HF's own Jinja environment) and finds assistant spans."""

    def __init__(self, template: str, special_tokens_map: dict) -> None:
        self.template = template
        self.special_tokens_map = dict(special_tokens_map)
        self.has_generation = has_generation_markers(template)

    def render_many(self, conversations: Sequence[Sequence[dict]], *, add_generation_prompt: bool = False) -> list[str]:
        """One text per conversation; raises whatever Jinja raises."""
        if not conversations:
            return []
        rendered, _ = render_jinja_template(
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
            _or_exception(lambda c=c, m=messages: assistant_spans(m, lookup(c), fulls[c]))
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
        try:  # a prefix may fail to render (a template's own role checks) where the whole conversation renders
            full = self.render(messages)
            return full, assistant_spans(messages, self.render, full)
        except Exception:  # noqa: BLE001 - Jinja's errors and SpanError alike: a marker template's spans instead
            if not self.has_generation:
                raise
            return self._marker_spans(messages)

    def _marker_spans(self, messages: Sequence[dict]) -> tuple[str, list[tuple[int, int]]]:
        """HF's ``{% generation %}`` spans (``return_assistant_tokens_mask``)."""
        rendered, indices = render_jinja_template(
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
