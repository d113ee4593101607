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
in the full render after the previous turn. A template for which neither holds
raises ``SpanError``: labels are never guessed.

Templates that do have ``{% generation %}`` markers keep HF's own spans.
"""

from __future__ import annotations

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
            if start < 0:
                raise SpanError(
                    f"assistant turn {index} renders differently alone than inside the whole conversation; "
                    "add {% generation %} markers to the template to locate its tokens"
                )
        spans.append((start, start + len(turn)))
        cursor = start + len(turn)
    return spans


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

    def render_with_spans(self, messages: Sequence[dict]) -> tuple[str, list[tuple[int, int]]]:
        """The rendered text and its assistant spans (``{% generation %}`` spans when the template has them)."""
        if self.has_generation:
            rendered, indices = render_jinja_template(
                conversations=[list(messages)],
                chat_template=self.template,
                return_assistant_tokens_mask=True,
                **self.special_tokens_map,
            )
            return rendered[0], [tuple(span) for span in indices[0]]
        full = self.render(messages)
        return full, assistant_spans(messages, self.render, full)
