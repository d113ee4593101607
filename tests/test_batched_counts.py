"""Batched label checks and counts decide exactly as the one-sample path does.

``TokenCounter.count_many`` renders a batch once and finds assistant spans with the
prefix renders batched (``ChatRenderer.spans_many``); the one-sample path
(``render_with_spans`` / ``require_labels``) renders every prefix itself. Both must give
the same spans, the same drop reasons with the same texts, and the same counts, for
the published (marker-free) template, a ``{% generation %}`` template, and a template
that raises on some conversations.
"""

from __future__ import annotations

import json

import pytest
from _chat import renders

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.reasons import DropError
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes
from vlmpack_offline.tokens import make_counter
from vlmpack_offline.tokens.counter import require_labels
from vlmpack_offline.tokens.spans import ChatRenderer

_TURNS = {
    "one turn": [("user", "What is this?"), ("assistant", "A cat.")],
    "system and two turns": [("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello!"),
                             ("user", "And now?"), ("assistant", "Still here.")],  # fmt: skip
    "no assistant": [("user", "Only a question")],
    "assistant first": [("assistant", "I start."), ("user", "ok"), ("assistant", "fine")],
    "empty answer": [("user", "Say nothing"), ("assistant", "")],
    "ends with user": [("user", "q1"), ("assistant", "a1"), ("user", "q2")],
}


def _conversation(turns, *, image: bool = False):
    messages = [{"role": role, "content": text} for role, text in turns]
    if image:
        messages[0]["content"] = [{"type": "image", "image": "img0.jpg"}, {"type": "text", "text": turns[0][1]}]
    raw = json.dumps({"messages": messages}).encode()
    return parse_conversation(raw, key="k", parts=["img0.jpg"] if image else [])


def _outcome(result):
    """A Count, or a drop as (reason, text): what the manifest records."""
    return (result.reason, str(result)) if isinstance(result, DropError) else result


@pytest.fixture(scope="module", params=["published", "generation"])
def processor_dir(request, tmp_path_factory):
    return build_processor_dir(tmp_path_factory.mktemp(f"proc_{request.param}"), "qwen2_5_vl", request.param)


@pytest.mark.parametrize("train_on", ["assistant", "all"])
def test_count_many_equals_one_sample_at_a_time_and_require_labels(tmp_path, processor_dir, train_on):
    config = config_from_dict(
        {"data": {"wds_dir": str(tmp_path), "work_dir": str(tmp_path / "w"), "packed_wds_dir": str(tmp_path / "p")},
         "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
         "loss": {"train_on": train_on}},
        source="test",
    )  # fmt: skip
    counter = make_counter(config)
    image = counter.probe("image", image_bytes(300, 200, seed=1), part="img0.jpg")
    samples = [(_conversation(turns), []) for turns in _TURNS.values()]
    samples.append((_conversation(_TURNS["one turn"], image=True), [image]))
    batched = [_outcome(r) for r in counter.count_many(samples)]
    alone = [_outcome(counter.count_many([sample])[0]) for sample in samples]
    assert batched == alone
    for (conversation, _), outcome in zip(samples, batched, strict=True):
        try:
            require_labels(counter.chat, conversation, train_on)  # the one-sample label check
        except DropError as exc:
            assert outcome == (exc.reason, str(exc))
        else:
            assert not isinstance(outcome, tuple), outcome
    dropped = {name: o[0] for name, o in zip([*_TURNS, "image"], batched, strict=True) if isinstance(o, tuple)}
    if train_on == "assistant":  # the published template also fails to locate a turn before any prompt
        assert dropped.get("no assistant") == "no_labels" and set(dropped) <= {"no assistant", "assistant first"}
    else:
        assert dropped == {}


# renders turns independently, but a generation prompt after a "boom" message raises: the full
# text renders, one of its prefix renders fails
_RAISING = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}{% if messages and messages[-1]['content'] == 'boom' %}"
    "{{ raise_exception('boom in the data') }}{% endif %}<|im_start|>assistant\n{% endif %}"
)
# the generation prompt is not a prefix of the rendered turn: spans cannot be located
_MISMATCHED = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}:{{ m['content'] }}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.parametrize("template", [_RAISING, _MISMATCHED])
def test_spans_many_equals_render_with_spans_including_failures(template):
    chat = ChatRenderer(template, {})
    conversations = [
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "boom"}, {"role": "user", "content": "x"}],
        [{"role": "user", "content": "boom"}, {"role": "assistant", "content": "a"}],
        [{"role": "assistant", "content": "first"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "b"}],
    ]  # fmt: skip
    fulls, expected = [], []
    for messages in conversations:
        try:
            fulls.append(chat.render(messages))
        except Exception:  # noqa: BLE001 - a full render that fails never reaches the span check
            continue
        try:
            expected.append(chat.render_with_spans(messages)[1])
        except Exception as exc:  # noqa: BLE001
            expected.append((type(exc), str(exc)))
    rendered = [m for m in conversations if renders(chat, m)]
    found = chat.spans_many(rendered, fulls)
    assert [(type(f), str(f)) if isinstance(f, Exception) else f for f in found] == expected
    assert any(isinstance(f, Exception) for f in found)  # the failure cases are exercised
    if template is _RAISING:  # where the prompt is a prefix, the other conversations' spans are found
        assert any(not isinstance(f, Exception) and f for f in found)


