"""Conversations of 1 to 5,000 turns: labels for every family's published template, at a cost linear in length.

The oracle is the conversation itself, not our span search: decoded, each labelled run of tokens is
that turn's answer followed by the family's end-of-turn token (what a model must learn to say to stop),
with nothing before the answer but template text of the turn itself (a thinking template's
``<think></think>`` block); GLM writes no end-of-turn token and ends a turn by emitting the next
``<|user|>`` instead. The scan's count (batched path) equals the loader's ids (one sample at a time).
Linear cost is checked by counting the messages the template renders, not by a clock.
"""

from __future__ import annotations

import json
import re

import pytest

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens import TokenCounter, spans

END_OF_TURN = {  # family -> (end-of-turn text after each answer, the next turn's start it learns too)
    "qwen2_vl": ("<|im_end|>", ""), "qwen2_5_vl": ("<|im_end|>", ""), "qwen3_vl": ("<|im_end|>", ""),
    "qwen3_5": ("<|im_end|>", ""), "llava_onevision": ("<|im_end|>", ""), "internvl": ("<|im_end|>", ""),
    "kimi_k25": ("<|im_end|>", ""), "gemma3": ("<end_of_turn>", ""), "mistral3": ("</s>", ""),
    "glm4v": ("", "<|user|>"),
}  # fmt: skip
TEMPLATE_ONLY = re.compile(r"\s|</?think>")  # what a thinking template may put before the answer


@pytest.fixture(scope="module")
def counters(tmp_path_factory):
    made = {}

    def counter(family: str) -> TokenCounter:
        if family not in made:
            root = tmp_path_factory.mktemp(family)
            folder = build_processor_dir(root / "proc", family)
            config = config_from_dict({"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}},
                                       "data": {"work_dir": str(root / "work")}}, source="test")
            made[family] = TokenCounter.from_config(config)
        return made[family]

    return counter


def _conversation(turns: int, system: bool):
    messages = [{"role": "system", "content": "Answer briefly."}] if system else []
    for i in range(turns):
        messages += [{"role": "user", "content": f"Question {i}: what is {i} + {i}?"},
                     {"role": "assistant", "content": f"It is {2 * i} 👋"}]  # fmt: skip
    return parse_conversation(json.dumps({"messages": messages}), key="k", parts=[])


def _learned_texts(counter: TokenCounter, conversation) -> list[str]:
    done = counter.materialize(conversation, [])
    runs, run = [], []
    for token, learned in zip(done.input_ids, done.assistant_mask, strict=True):
        if learned:
            run.append(token)
        elif run:
            runs.append(run)
            run = []
    if run:
        runs.append(run)
    return [counter.tokenizer.decode(r) for r in runs]


@pytest.mark.parametrize("family", sorted(END_OF_TURN))
@pytest.mark.parametrize("turns", [1, 2, 5, 6, 60])
def test_each_labelled_run_is_the_answer_and_its_end_of_turn(counters, family, turns):
    counter = counters(family)
    end, next_turn = END_OF_TURN[family]
    for system in (False, True):
        conversation = _conversation(turns, system)
        texts = _learned_texts(counter, conversation)
        answers = [m["content"][0]["text"] for m in conversation.messages if m["role"] == "assistant"]
        assert len(texts) == turns, (family, turns, system)
        for i, (text, answer) in enumerate(zip(texts, answers, strict=True)):
            expected = answer + end + (next_turn if i + 1 < turns else "")
            assert text.endswith(expected), (family, i, text)
            assert not TEMPLATE_ONLY.sub("", text[: len(text) - len(expected)]), (family, i, text)
        (count,) = counter.count_many([(conversation, [])])
        assert count.token_len == len(counter.materialize(conversation, []).input_ids)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "gemma3", "mistral3", "qwen3_5"])
def test_five_thousand_turns_are_labelled_in_linear_time(counters, family, monkeypatch):
    """The work is counted, not timed: every render goes through HF's ``render_jinja_template``, whose cost
    grows with the messages it renders; the turn-by-turn search rendered two growing prefixes per turn
    (5,000 turns: about 50 million messages, minutes), the linear search the whole conversation a few times.

    The exact search is pinned (``one_render=False``): where a template streams its messages, a renderer that
    has proven it reads the spans off one render and calls no prefix render at all, so whether this test
    counted anything would depend on which test used the shared counter first."""
    counter = counters(family)
    monkeypatch.setattr(counter, "chat", spans.ChatRenderer(counter.chat.template, counter.chat.special_tokens_map,
                                                            one_render=False))  # fmt: skip
    end, _ = END_OF_TURN[family]
    conversation = _conversation(5000, system=False)
    rendered = []  # messages per conversation rendered

    chosen = spans.chat_functions  # the renderer the scan uses (transformers' own module, or it run standalone)

    def counting_module(template, variables=None):
        module = chosen(template, variables)

        def counting(*, conversations, **options):
            rendered.extend(len(c) for c in conversations)
            return module.render_jinja_template(conversations=conversations, **options)

        return type("Counting", (), {"render_jinja_template": staticmethod(counting),
                                     "__getattr__": lambda self, name: getattr(module, name)})()

    monkeypatch.setattr(spans, "chat_functions", counting_module)
    texts = _learned_texts(counter, conversation)
    assert len(texts) == 5000 and texts[4321].endswith("It is 8642 👋" + end)
    assert 0 < sum(rendered) <= 4 * len(conversation.messages), (len(rendered), sum(rendered))
    # the scan tokenizes a text this long in pieces cut before special tokens: the same ids as one string
    (count,) = counter.count_many([(conversation, [])])
    assert count.token_len == len(counter.materialize(conversation, []).input_ids)
