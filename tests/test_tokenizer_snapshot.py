"""The counting tokenizer's snapshot (tokens/tokenizer_snapshot.py) counts exactly what transformers' tokenizer counts.

Oracle: the folder's own ``AutoTokenizer`` (``counter.load_tokenizer``), never our code. For every processor
folder the suite builds: the same ids on a held-out corpus (rendered chats with media pads, scripts, whitespace,
special tokens glued to words, a long text), the same token ids and media-token attributes, the same chat template
and special tokens, and a ``TokenCounter`` on each giving the same counts. Where it cannot be shown (a class with
its own tokenizing code, remote code) no snapshot is used; a damaged cache is read afresh.
"""

from __future__ import annotations

import json
import random

import pytest

from vlmpack_offline.synthetic.processor_dir import FOLDER_MODULES, PRESETS, build_processor_dir
from vlmpack_offline.tokens import tokenizer_snapshot
from vlmpack_offline.tokens.counter import load_tokenizer
from vlmpack_offline.tokens.tokenizer_snapshot import TokenizerSnapshot, load_counting_tokenizer, snapshot_key

# the folders counted with the snapshot (a family module's); the others count with their processor's own tokenizer
# but for a text-only config (processor_loader: auto_tokenizer), so they run in the slow subset
COUNTED = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "gemma3", "internvl", "glm4v", "glm4v_moe", "glm46v",
           "kimi_k25", "mistral3", "llava_onevision")  # fmt: skip
FOLDERS = [*COUNTED, *(pytest.param(f, marks=pytest.mark.slow) for f in sorted({*PRESETS, *FOLDER_MODULES} - {*COUNTED}))]
MEDIA_ATTRIBUTES = ("image_token", "video_token", "vision_start_token", "vision_end_token", "boi_token", "eoi_token",
                    "context_image_token", "start_image_token", "end_image_token")  # fmt: skip


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VLMPACK_CACHE_DIR", str(tmp_path / "cache"))


def _corpus(tokenizer, seed: int) -> list[str]:
    """Texts the probes at snapshot time did not see."""
    rng = random.Random(seed)
    added = [t.content for t in tokenizer.added_tokens_decoder.values()]
    alphabet = "abc xyz ÄÖÜ ß é 的是 中文 ру с 🙂 \n\t  0123456789 .,;:!?'\"()[]{}<>/|\\-_=+*&^%$#@~`"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 400))) for _ in range(40)]
    texts += ["".join(rng.choice([*added, "x", " ", "\n", "word"]) for _ in range(rng.randint(1, 60))) for _ in range(40)]
    for turns in (1, 3, 8):
        chat = []
        for turn in range(turns):
            chat.append({"role": "user", "content": f"Question {turn}: what is in <|image_pad|> image {rng.random()}?"})
            chat.append({"role": "assistant", "content": f"Answer {turn}:\n\n  {'lorem ipsum ' * rng.randint(1, 30)}"})
        try:
            texts.append(tokenizer.apply_chat_template(chat, tokenize=False))
        except Exception:  # noqa: BLE001 - a template with role rules of its own: the other texts still run
            pass
    texts.append("".join(texts) * 3)
    return texts


@pytest.mark.parametrize("family", FOLDERS)
def test_a_snapshot_counts_exactly_as_the_folders_own_tokenizer(tmp_path, family):
    folder = str(build_processor_dir(tmp_path / "processor", family))
    oracle = load_counting_tokenizer(folder)  # the first load: AutoTokenizer (counter.load_tokenizer), snapshot saved
    snapshot = load_counting_tokenizer(folder)  # read back without transformers' classes
    assert type(oracle).__module__.startswith("transformers.")
    assert isinstance(snapshot, TokenizerSnapshot), f"{family}: no snapshot was saved"

    texts = _corpus(oracle, seed=len(family))
    for special in (False, True):
        assert snapshot(texts, add_special_tokens=special)["input_ids"] == oracle(texts, add_special_tokens=special)["input_ids"]
    assert snapshot(texts[0], add_special_tokens=False)["input_ids"] == oracle(texts[0], add_special_tokens=False)["input_ids"]
    assert snapshot.chat_template == oracle.chat_template
    assert snapshot.special_tokens_map == oracle.special_tokens_map
    assert snapshot.unk_token_id == oracle.unk_token_id
    for name in MEDIA_ATTRIBUTES:
        assert getattr(snapshot, name, None) == getattr(oracle, name, None), name
    for token in [*(t.content for t in oracle.added_tokens_decoder.values()), "<absent-token-qq>", "hello"]:
        assert snapshot.convert_tokens_to_ids(token) == oracle.convert_tokens_to_ids(token), token
    assert {i: (t.content, t.special, t.normalized, t.lstrip, t.rstrip) for i, t in snapshot.added_tokens_decoder.items()} \
        == {i: (t.content, t.special, t.normalized, t.lstrip, t.rstrip) for i, t in oracle.added_tokens_decoder.items()}


def test_a_counter_on_the_snapshot_gives_the_same_counts(tmp_path):
    from vlmpack_offline.config import VideoConfig, config_from_dict
    from vlmpack_offline.conversation import parse_conversation
    from vlmpack_offline.tokens.counter import TokenCounter
    from vlmpack_offline.tokens.media_info import ImageMedia
    from vlmpack_offline.tokens.rules import load_model_rules

    folder = build_processor_dir(tmp_path / "processor", "qwen2_5_vl")
    config = config_from_dict({"data": {"wds_dir": str(tmp_path), "work_dir": str(tmp_path / "w"),
                                        "packed_wds_dir": str(tmp_path / "o")},
                               "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}}},
                              source="test")  # fmt: skip
    rules = load_model_rules(config.model)
    load_counting_tokenizer(str(folder))
    counters = [TokenCounter(rules, tokenizer, VideoConfig()) for tokenizer in (load_tokenizer(str(folder)),
                                                                                load_counting_tokenizer(str(folder)))]
    assert isinstance(counters[1].tokenizer, TokenizerSnapshot)
    rng = random.Random(0)
    samples = []
    for index in range(30):
        messages = [{"role": "user", "content": [{"type": "image", "image": "img.jpg"},
                                                 {"type": "text", "text": "describe " * rng.randint(1, 50)}]},
                    {"role": "assistant", "content": "it is a picture of " * rng.randint(1, 80)}]  # fmt: skip
        conversation = parse_conversation(json.dumps({"messages": messages}).encode(), key=f"k{index}", parts=["img.jpg"])
        samples.append((conversation, [ImageMedia(width=rng.randint(28, 2000), height=rng.randint(28, 2000))]))
    counts = [counter.count_many(samples) for counter in counters]
    assert counts[0] == counts[1]
    assert all(not isinstance(count, Exception) for count in counts[0])


def test_a_class_with_its_own_tokenizing_code_is_not_snapshotted(tmp_path, monkeypatch):
    folder = str(build_processor_dir(tmp_path / "processor", "qwen2_5_vl"))
    tokenizer = load_tokenizer(folder)
    own = type("OwnCode", (type(tokenizer),), {"_encode_plus": lambda self, *a, **k: type(tokenizer)._encode_plus(self, *a, **k)})
    tokenizer.__class__ = own
    assert tokenizer_snapshot._snapshot_of(tokenizer) is None
    assert not isinstance(load_counting_tokenizer(folder, trust_remote_code=True), TokenizerSnapshot)
    assert not (tmp_path / "cache" / "tokenizers").exists()


def test_a_changed_folder_or_a_damaged_cache_loads_afresh(tmp_path):
    folder = build_processor_dir(tmp_path / "processor", "qwen2_5_vl")
    key = snapshot_key(str(folder))
    load_counting_tokenizer(str(folder))
    saved = tmp_path / "cache" / "tokenizers" / key
    assert (saved / "backend.json").is_file()

    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert snapshot_key(str(folder)) != key

    (saved / "backend.json").write_text("{ not json")
    assert not isinstance(tokenizer_snapshot._read(saved), TokenizerSnapshot)
    (saved / "facts.json").unlink()
    assert tokenizer_snapshot._read(saved) is None


def test_a_snapshot_read_ahead_in_a_thread_is_the_same_and_fails_over_alike(tmp_path):
    folder = str(build_processor_dir(tmp_path / "processor", "qwen2_5_vl"))
    oracle = load_counting_tokenizer(folder)  # the first load: transformers' tokenizer, snapshot saved
    texts = _corpus(oracle, seed=7)
    tokenizer_snapshot.prefetch_counting_tokenizer(folder)  # what scan.run starts once it knows it has work
    read_ahead = load_counting_tokenizer(folder)
    assert isinstance(read_ahead, TokenizerSnapshot) and not tokenizer_snapshot._READ_AHEAD
    assert read_ahead(texts, add_special_tokens=False)["input_ids"] == oracle(texts, add_special_tokens=False)["input_ids"]

    saved = tmp_path / "cache" / "tokenizers" / snapshot_key(folder)
    (saved / "backend.json").write_text("{ not json")
    tokenizer_snapshot.prefetch_counting_tokenizer(folder)
    again = load_counting_tokenizer(folder)  # the damaged read raised in its thread: transformers' tokenizer again
    assert type(again).__module__.startswith("transformers.") and not tokenizer_snapshot._READ_AHEAD
    assert again(texts, add_special_tokens=False)["input_ids"] == oracle(texts, add_special_tokens=False)["input_ids"]
    tokenizer_snapshot.prefetch_counting_tokenizer(folder, trust_remote_code=True)  # never for a folder's own code
    assert not tokenizer_snapshot._READ_AHEAD


def test_ascii_texts_skip_only_a_normalizer_that_leaves_them_as_they_are(tmp_path):
    """Qwen's NFC leaves ASCII as it is: ASCII texts are encoded with it off, the others with it, each batch as
    transformers encodes it. A normalized added token whose NFC form is ASCII (U+212A KELVIN SIGN is "K" under
    NFC, so the token matches a plain "K") keeps the normalizer on for every text."""
    plain = str(build_processor_dir(tmp_path / "plain", "qwen2_5_vl"))
    kelvin = build_processor_dir(tmp_path / "kelvin", "qwen2_5_vl")
    config = json.loads((kelvin / "tokenizer_config.json").read_text())  # Qwen2Tokenizer's added tokens are these
    added = config["added_tokens_decoder"]
    added[str(max(map(int, added)) + 1)] = {"content": "\u212a", "lstrip": False, "normalized": True, "rstrip": False,
                                            "single_word": False, "special": False}  # fmt: skip
    (kelvin / "tokenizer_config.json").write_text(json.dumps(config))
    ascii_texts = ["OK, 5 K and a Kelvin", "<|im_start|>user\nK<|im_end|>\n", "  K\tk  ", ""]
    mixed = [*ascii_texts, "caf\u00e9 \u212a K", "e\u0301 K"]
    for folder, skips in ((plain, True), (str(kelvin), False)):
        oracle = load_counting_tokenizer(folder)
        snapshot = load_counting_tokenizer(folder)
        assert isinstance(snapshot, TokenizerSnapshot)
        assert (snapshot.ascii_normalizer is not None) is skips, folder
        for texts in (ascii_texts, mixed, mixed[::-1]):
            assert snapshot(texts, add_special_tokens=False)["input_ids"] == \
                oracle(texts, add_special_tokens=False)["input_ids"], (folder, texts)
        assert type(snapshot.backend.normalizer).__name__ == "NFC"  # set back after every call
    kelvin_id = oracle.convert_tokens_to_ids("\u212a")
    assert kelvin_id in oracle("OK", add_special_tokens=False)["input_ids"]  # the case the check is for
