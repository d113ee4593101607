"""Spans from one render (``tokens/turn_marks.py``) equal the spans the prefix renders find, for every template.

The scan used to render each sample, then render its prefixes (``messages[:i]`` with the generation
prompt) to locate the assistant turns. Where a template streams its messages, the prefix renders are cuts
of the one full render, which the marked render reads off. This differential test runs both methods
(``ChatRenderer(one_render=False)`` is the old one: the exact search alone) on a corpus of conversations for
the published template of every synthetic folder and the templates the suite writes itself, and asserts the
same rendered text and the same spans (or the same error) from ``render_with_spans`` and ``spans_many``.
"""

from __future__ import annotations

import random

import pytest
from _chat import renders

from vlmpack_offline.synthetic.processor_dir import FOLDER_MODULES, PRESETS, build_processor_dir
from vlmpack_offline.tokens.counter import load_tokenizer
from vlmpack_offline.tokens.spans import ChatRenderer
from vlmpack_offline.tokens.turn_marks import streams_messages

_FOLDERS = [(family, "published") for family in [*PRESETS, *FOLDER_MODULES]]
_FOLDERS += [(family, "generation") for family in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")]  # {% generation %} markers

# templates that are not a folder's: a streaming one with no generation prompt (Mistral-like: the answer
# follows [/INST]), one whose generation prompt reads the last message, one writing text after the loop,
# one whose generation prompt is no prefix of the rendered turn
_OWN = {
    "inst": "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST]{{ m['content'] }}[/INST]"
            "{% elif m['role'] == 'assistant' %}{{ m['content'] }}</s>{% else %}[SYS]{{ m['content'] }}{% endif %}"
            "{% endfor %}",
    "reads last": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                  "{% if add_generation_prompt %}{% if messages[-1]['content'] == 'boom' %}"
                  "{{ raise_exception('boom in the data') }}{% endif %}<|im_start|>assistant\n{% endif %}",
    "footer": "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>\n{% endfor %}<end>"
              "{% if add_generation_prompt %}<assistant>{% endif %}",
    "mismatched": "{% for m in messages %}<|im_start|>{{ m['role'] }}:{{ m['content'] }}<|im_end|>{% endfor %}"
                  "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
}  # fmt: skip

# families whose published template is proven to stream (turn_marks.streams_messages); Qwen3-VL's with its
# "tool" branch, which reads the next message, left to the exact search
_SERVED = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "gemma3", "internvl", "llava_onevision", "glm4v", "glm46v")

_WORDS = "the a cat dog red blue sits near table window tree river Yes no".split()


def _text(rng: random.Random) -> str:
    return " ".join(rng.choices(_WORDS, k=rng.randint(1, 12)))


def _content(rng: random.Random, role: str, *, as_string: bool):
    """A message's content: a string, or typed items with images / videos, empty and spaced texts among them."""
    shape = rng.random()
    if as_string:
        return "" if shape < 0.05 else _text(rng)
    if role == "assistant" and shape < 0.15:  # a thinking block the thinking templates split off
        return [{"type": "text", "text": f"<think>\n{_text(rng)}\n</think>\n\n{_text(rng)}"}]
    items = []
    if role == "user" and shape < 0.5:
        for i in range(rng.randint(1, 3)):
            kind = rng.choice(("image", "image", "video"))
            items.append({"type": kind, kind: f"part{i}"})
    if shape > 0.95:
        items.append({"type": "text", "text": ""})
    elif shape > 0.9:
        items.append({"type": "text", "text": f"  {_text(rng)}\n"})
    else:
        items.append({"type": "text", "text": _text(rng)})
    return items


def _corpus(seed: int = 0) -> list[list[dict]]:
    """1 to 40 turns, with and without a system prompt, tool turns, a trailing user turn, a leading assistant."""
    rng = random.Random(seed)
    corpus = []
    for n in (*range(1, 9), 12, 20, 40):
        for variant in range(4):
            as_string = variant == 3
            messages = []
            if variant in (1, 3):
                messages.append({"role": "system", "content": _content(rng, "system", as_string=as_string)})
            for turn in range(n):
                messages.append({"role": "user", "content": _content(rng, "user", as_string=as_string)})
                if variant == 2 and turn == 1:
                    messages.append({"role": "tool", "content": _content(rng, "tool", as_string=as_string)})
                messages.append({"role": "assistant", "content": _content(rng, "assistant", as_string=as_string)})
            if variant == 2 and n % 2:
                messages.append({"role": "user", "content": _content(rng, "user", as_string=as_string)})
            corpus.append(messages)
    corpus.append([{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok"},
                   {"role": "assistant", "content": "fine"}])  # fmt: skip
    corpus.append([{"role": "user", "content": "Only a question"}])
    corpus.append([{"role": "user", "content": "Say nothing"}, {"role": "assistant", "content": ""}])
    corpus.append([{"role": "user", "content": "q \ue002 marks"}, {"role": "assistant", "content": "a \ue002"}])
    return corpus


def _outcome(call):
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - the error itself is part of what must agree
        return (type(exc).__name__, str(exc))



def _assert_same_as_prefixrenders(template: str, special: dict) -> int:
    """Both methods agree on every corpus conversation; returns how many the one render served."""
    new, old = ChatRenderer(template, special), ChatRenderer(template, special, one_render=False)
    corpus = _corpus()
    for messages in corpus:
        assert _outcome(lambda m=messages: new.render_with_spans(m)) == _outcome(lambda m=messages: old.render_with_spans(m)), messages
    rendered = [m for m in corpus if renders(old, m)]
    fulls = [old.render(m) for m in rendered]
    assert [_shown(s) for s in new.spans_many(rendered, fulls)] == [_shown(s) for s in old.spans_many(rendered, fulls)]
    served = 0
    for messages, found in zip(corpus, new.turns_many(corpus), strict=True):
        if found is not None:  # the marked render, marks out, is the template's own text
            assert found == (old.render(messages), old.render_with_spans(messages)[1])
            served += 1
    return served


def _shown(spans):
    return (type(spans).__name__, str(spans)) if isinstance(spans, Exception) else spans


@pytest.fixture(scope="module")
def folder_templates(tmp_path_factory) -> dict[str, tuple[str, dict]]:
    out = {}
    root = tmp_path_factory.mktemp("folders")
    for family, template in _FOLDERS:
        tokenizer = load_tokenizer(str(build_processor_dir(root / f"{family}-{template}", family, template)),
                                   trust_remote_code=True)  # fmt: skip
        out[f"{family}-{template}"] = (tokenizer.chat_template, dict(tokenizer.special_tokens_map))
    return out


@pytest.mark.parametrize("name", [f"{family}-{template}" for family, template in _FOLDERS])
def test_folder_template_spans_from_one_render_equal_prefixrenders(folder_templates, name):
    template, special = folder_templates[name]
    served = _assert_same_as_prefixrenders(template, special)
    if name.split("-")[0] in _SERVED:  # the one render serves most conversations (the rest: tool turns, raising)
        assert streams_messages(template) and served >= len(_corpus()) // 2, (name, served)


@pytest.mark.parametrize("name", sorted(_OWN))
def test_own_template_spans_from_one_render_equal_prefixrenders(name):
    served = _assert_same_as_prefixrenders(_OWN[name], {"bos_token": "<s>"})
    assert (served > 0) == (name == "inst"), (name, served)  # the others read ahead, or find no prompt


def test_templates_that_read_ahead_are_not_proven_to_stream():
    assert streams_messages(_OWN["inst"])
    assert not streams_messages(_OWN["reads last"])  # the generation prompt reads messages[-1]
    assert not streams_messages(_OWN["footer"])  # text after the loop: a prefix render is no cut of the full one
    assert not streams_messages("{% for m in messages %}{{ m['content'] }}{% if not loop.last %}\n{% endif %}{% endfor %}")
    assert not streams_messages(
        "{% set ns = namespace(last=0) %}{% for m in messages[::-1] %}{% set ns.last = loop.index %}{% endfor %}"
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    )  # a preamble walking every message (Qwen3's last_query_index)
