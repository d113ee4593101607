"""Where transformers lacks the private render steps the marked render replays (transformers 5.17 has no
``_alias_reasoning_fields``), nothing is marked and the spans come from the exact search, unchanged."""

from __future__ import annotations

from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens import hf_chat, turn_marks
from vlmpack_offline.tokens.counter import load_tokenizer
from vlmpack_offline.tokens.spans import ChatRenderer

CONVERSATION = [
    {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
    {"role": "user", "content": [{"type": "text", "text": "And now?"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "A dog near a tree."}]},
]


def test_without_the_private_steps_the_spans_come_from_the_exact_search(tmp_path, monkeypatch):
    monkeypatch.setenv("VLMPACK_CACHE_DIR", str(tmp_path / "cache"))
    tokenizer = load_tokenizer(build_processor_dir(tmp_path, "qwen2_5_vl"))
    template, special = tokenizer.chat_template, tokenizer.special_tokens_map
    expected = ChatRenderer(template, special, one_render=False).turns_many([CONVERSATION])
    assert turn_marks.streams_messages(template)  # with transformers 5.24's steps: proven, marked
    # as in a release without one of them (the module that renders the template, for either set of variables)
    for chat in {hf_chat.chat_functions(template), hf_chat.chat_functions(template, special)}:
        monkeypatch.delattr(chat, "_alias_reasoning_fields")
    assert not turn_marks.streams_messages(template)
    assert turn_marks.MarkedTemplate.build(template, special, [CONVERSATION]) is None
    assert ChatRenderer(template, special).turns_many([CONVERSATION]) == expected
