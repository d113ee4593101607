"""A conversation's render pasted into its shape's cached render (``tokens/text_slots.py``) is the template's own.

The oracle is transformers' ``render_jinja_template`` (marks out) and ``MarkedTemplate.render`` (turn starts),
run on every conversation of a corpus for the published template of every synthetic folder: many conversations
share a shape, so most are pasted, not rendered. Texts hold what a renderer could get wrong: quotes, backslashes,
Jinja syntax, newlines and spaces at either end, empty texts, other scripts, the private-use characters the marks
and placeholders use. The proof's refusals are specified on small templates, one use of a text each.
"""

from __future__ import annotations

import random

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from vlmpack_offline.synthetic.processor_dir import FOLDER_MODULES, PRESETS, build_processor_dir
from vlmpack_offline.tokens.counter import load_tokenizer
from vlmpack_offline.tokens.spans import _PROBES
from vlmpack_offline.tokens.text_slots import TextSlots, verbatim_text
from vlmpack_offline.tokens.turn_marks import MarkedTemplate

_FAMILIES = [*PRESETS, *FOLDER_MODULES]
# published templates proven to write texts verbatim (the others filter, concatenate or test them: rendered)
_PROVEN = ("qwen2_vl", "qwen2_5_vl", "internvl", "glm4v", "glm4v_moe", "glm46v", "lfm3_vl", "qwen3_omni_moe",
           "qwen2_5_omni", "paddleocr_vl")  # fmt: skip

_TEXTS = ("What is this?", "A cat.", "", " ", "  spaced  \n", 'say "hi" \\ there', "{{ messages }} {% if %}",
          "<|im_end|> <think>x</think> done", "ünï 你好 🙂", "a\ue002b", "\ue003" "0\ue004", "line\nbreak\n\n",
          "trailing\\")  # fmt: skip


def _corpus(seed: int = 0, n: int = 300) -> list[list[dict]]:
    """Conversations as ``parse_conversation`` gives them (content: a list of typed items), few shapes, many texts."""
    rng = random.Random(seed)
    corpus = []
    for _ in range(n):
        messages = []
        if rng.random() < 0.3:
            messages.append({"role": "system", "content": [{"type": "text", "text": rng.choice(_TEXTS)}]})
        for _ in range(rng.choice((1, 1, 2, 3))):
            items = [{"type": "image", "image": f"img{i}.jpg"} for i in range(rng.choice((0, 1, 2)))]
            if rng.random() < 0.2:
                items.append({"type": "video", "video": "clip.mp4"})
            items.append({"type": "text", "text": rng.choice(_TEXTS)})
            messages.append({"role": "user", "content": items})
            messages.append({"role": "assistant", "content": [{"type": "text", "text": rng.choice(_TEXTS)}]})
        corpus.append(messages)
    return corpus


@pytest.fixture(scope="module")
def folder_templates(tmp_path_factory) -> dict[str, tuple[str, dict]]:
    root = tmp_path_factory.mktemp("folders")
    out = {}
    for family in _FAMILIES:
        tokenizer = load_tokenizer(str(build_processor_dir(root / family, family)), trust_remote_code=True)
        out[family] = (tokenizer.chat_template, dict(tokenizer.special_tokens_map))
    return out


@pytest.mark.parametrize("family", _FAMILIES)
def test_pasted_render_is_the_templates_own(folder_templates, family):
    template, special = folder_templates[family]
    assert verbatim_text(template) == (family in _PROVEN)
    marked = MarkedTemplate.build(template, special, _PROBES)
    if marked is None:  # not streaming: nothing to paste into (turn_marks' own tests cover it)
        assert family not in _PROVEN
        return
    slots = TextSlots.build(marked, template, _PROBES)
    assert (slots is not None) == (family in _PROVEN)
    if slots is None:
        return
    corpus = _corpus()
    for messages in corpus:
        found = slots.render(messages)
        assert found == marked.render(messages), messages
        if found is not None:
            expected = render_jinja_template(conversations=[messages], chat_template=template, **special)[0][0]
            assert found[0] == expected, messages
    shapes = slots.shapes
    assert shapes < len(corpus) // 2, shapes  # most conversations were pasted into a shape rendered before


_LOOP = "{%% for m in messages %%}<{{ m['role'] }}>{%% for c in m['content'] %%}%s{%% endfor %%}{%% endfor %%}"


@pytest.mark.parametrize(
    "body",
    [
        "{{ c['text'] }}",
        "{% if c['type'] == 'text' %}{{ c.text }}{% else %}<img>{% endif %}",
        "{% if 'text' in c %}{{ c.get('text') }}{% endif %}",
        "{% if c['text'] is string %}{{ c['text'] }}{% endif %}",
        "{% set t = c['text'] %}{{ t }}",
    ],
)
def test_a_text_written_as_it_is_is_proven(body):
    assert verbatim_text(_LOOP % body)


@pytest.mark.parametrize(
    "body",
    [
        "{{ c['text'] | trim }}",  # a filter changes it
        "{{ c['text'] + '\\n' }}",  # so may what it is joined to (kept simple: refused)
        "{% if c['text'] %}{{ c['text'] }}{% endif %}",  # an empty text takes the other branch
        "{% if c['text'] == 'x' %}x{% endif %}",
        "{% if 'x' in c['text'] %}x{% endif %}",
        "{{ c['text'].strip() }}",
        "{{ c['text'][0] }}",
        "{{ c }}",  # the item's repr holds the text, escaped
        "{{ m['content'] }}",
        "{{ m | tojson }}",
        "{% for k, v in c.items() %}{{ v }}{% endfor %}",
        "{% for ch in c['text'] %}{{ ch }}{% endfor %}",
        "{% set ns = namespace(t='') %}{% set ns.t = c['text'] %}",
        "{% set t %}{{ c['text'] }}{% endset %}{{ t | upper }}",  # output captured, then changed
        "{% filter upper %}{{ c['text'] }}{% endfilter %}",
        "{{ c[c['type']] }}",  # a key that is not a constant could be 'text'
        "{% if loop.previtem %}{{ loop.previtem | string }}{% endif %}",
    ],
)
def test_any_other_use_of_a_text_is_not_proven(body):
    assert not verbatim_text(_LOOP % body)


def test_a_content_string_branch_never_runs_on_served_conversations():
    """Served content is always a list, so ``{% if content is string %}`` opens a branch that never runs."""
    template = ("{% for m in messages %}{% if m['content'] is string %}{{ m['content'] | trim }}"
                "{% else %}{% for c in m['content'] %}{{ c['text'] }}{% endfor %}{% endif %}{% endfor %}")  # fmt: skip
    assert verbatim_text(template)
    assert not verbatim_text(template.replace("is string", "is not string"))
    marked = MarkedTemplate.build(template, {}, _PROBES)
    slots = TextSlots.build(marked, template, _PROBES)
    string_content = [{"role": "user", "content": "  padded  "}, {"role": "assistant", "content": "ok"}]
    assert slots.render(string_content) == marked.render(string_content) == ("paddedok", [0, 6])


def test_texts_of_one_shape_fill_one_cached_render(folder_templates):
    template, special = folder_templates["qwen2_5_vl"]
    marked = MarkedTemplate.build(template, special, _PROBES)
    slots = TextSlots.build(marked, template, _PROBES)
    first = [{"role": "user", "content": [{"type": "image", "image": "img0.jpg"}, {"type": "text", "text": "Hi"}]},
             {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]}]  # fmt: skip
    second = [{**m, "content": [{**c, "text": c["text"] * 3} if "text" in c else c for c in m["content"]]}
              for m in first]  # fmt: skip
    before = slots.shapes
    assert slots.render(first) == marked.render(first)
    assert slots.render(second) == marked.render(second)
    assert slots.shapes == before + 1
