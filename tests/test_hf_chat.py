"""transformers' chat-template renderer run without importing transformers (tokens/hf_chat.py).

Oracle: transformers' own ``render_jinja_template`` (``transformers.utils.chat_template_utils``). The standalone
module serves a template only where the proof on this install found it renders alike; otherwise (a proof that
finds a difference, a file that cannot run alone) transformers' own module renders it. A scan whose proofs and
tokenizer snapshot are kept never imports transformers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest
from transformers.utils import chat_template_utils as theirs

from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens import hf_chat
from vlmpack_offline.tokens.counter import load_tokenizer

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "gemma3", "internvl", "glm4v", "llava_onevision")
HELD_OUT = [  # conversations the proof did not render
    [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": [{"type": "text", "text": "a"},
     {"type": "image", "image": "x.png"}, {"type": "text", "text": "b\n"}]}, {"role": "assistant", "content": "c"},
     {"role": "user", "content": "d  "}, {"role": "assistant", "content": [{"type": "text", "text": "e"}]}],
    [{"role": "user", "content": "only a question " * 20}],
]  # fmt: skip


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VLMPACK_CACHE_DIR", str(tmp_path / "cache"))
    hf_chat._chosen.cache_clear()
    yield
    hf_chat._chosen.cache_clear()


@pytest.mark.parametrize("family", FAMILIES)
def test_the_standalone_module_renders_every_family_template_as_transformers_does(tmp_path, family):
    tokenizer = load_tokenizer(str(build_processor_dir(tmp_path / "processor", family)))
    template, special = tokenizer.chat_template, tokenizer.special_tokens_map
    chat = hf_chat.chat_functions(template, special)
    assert chat is not theirs and chat.__name__.startswith("vlmpack_offline."), "the proof failed on this install"
    for generation in (False, True):
        for conversation in HELD_OUT:
            calls = {"conversations": [conversation], "chat_template": template, "add_generation_prompt": generation,
                     **special}  # fmt: skip
            assert _rendered(chat, calls) == _rendered(theirs, calls)


def _rendered(module: types.ModuleType, calls: dict) -> object:
    try:
        return module.render_jinja_template(**json.loads(json.dumps(calls)))
    except Exception as exc:  # noqa: BLE001 - a template's own refusal must be the same in both
        return type(exc).__qualname__, str(exc)


def test_the_verdict_is_kept_per_install_and_template(tmp_path, monkeypatch):
    template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    assert hf_chat.chat_functions(template) is hf_chat._standalone()
    kept = list((tmp_path / "cache" / "chat_render").glob("*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text()) == {"same": True, "problem": ""}
    hf_chat._chosen.cache_clear()
    monkeypatch.setattr(hf_chat, "_renders_alike", lambda *a: pytest.fail("proved again although the verdict is kept"))
    assert hf_chat.chat_functions(template) is hf_chat._standalone()
    import vlmpack_offline.disk_cache as disk_cache

    monkeypatch.setattr(disk_cache, "version_of", lambda package: f"{package}-another-release")
    hf_chat._chosen.cache_clear()
    with pytest.raises(pytest.fail.Exception):  # another transformers (or jinja2) release: proved afresh
        hf_chat.chat_functions(template)


def test_a_template_the_standalone_module_renders_otherwise_goes_to_transformers(monkeypatch):
    standalone = hf_chat._standalone()
    differing = types.ModuleType("differing")
    differing.__file__ = standalone.__file__

    def render(**kwargs):
        rendered, indices = standalone.render_jinja_template(**kwargs)
        return [text + " " for text in rendered], indices

    differing.render_jinja_template = render
    monkeypatch.setattr(hf_chat, "_standalone", lambda: differing)
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert hf_chat.chat_functions(template) is theirs
    assert hf_chat.chat_functions(template, {"bos_token": "<s>"}) is theirs


def test_a_file_that_cannot_run_alone_goes_to_transformers(tmp_path, monkeypatch):
    needs_more = tmp_path / "chat_template_utils.py"
    needs_more.write_text("from .tokenization_utils_base import PreTrainedTokenizerBase\n")
    monkeypatch.setattr(hf_chat, "standalone_path", lambda: needs_more)
    hf_chat._standalone.cache_clear()
    try:
        assert hf_chat._standalone() is None
        assert hf_chat.chat_functions("{{ messages }}") is theirs
    finally:
        hf_chat._standalone.cache_clear()


_WARM_SCAN = """
import sys
from vlmpack_offline.config import config_from_dict
from vlmpack_offline.stages import scan
config = config_from_dict({"data": {"wds_dir": sys.argv[1], "work_dir": sys.argv[2], "packed_wds_dir": sys.argv[3]},
                           "sample": {"max_token_len": 4096}, "process": {"workers": 1},
                           "model": {"processor_kwargs": {"pretrained_model_name_or_path": sys.argv[4]}}}, source="t")
result = scan.run(config)
assert result.counts["ok"] == 1, result.summary
print("transformers imported:", sorted(m for m in sys.modules if m == "transformers" or m.startswith("transformers.")))
"""


def test_a_scan_with_its_proofs_kept_does_not_import_transformers(tmp_path):
    from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, write_shard

    processor = build_processor_dir(tmp_path / "processor", "qwen2_5_vl")
    messages = [{"role": "user", "content": [{"type": "image", "image": "img0.jpg"}, {"type": "text", "text": "What?"}]},
                {"role": "assistant", "content": "A house."}]  # fmt: skip
    write_shard(tmp_path / "wds" / "shard-000000.tar",
                [SyntheticSample(key="s0", json={"messages": messages}, media={"img0.jpg": image_bytes(64, 48)})])  # fmt: skip
    env = {"VLMPACK_CACHE_DIR": str(tmp_path / "cache"), "TQDM_DISABLE": "1", "PATH": "/usr/bin:/bin"}
    lines = []
    for run in ("first", "later"):
        done = subprocess.run([sys.executable, "-c", _WARM_SCAN, str(tmp_path / "wds"), str(tmp_path / f"work-{run}"),
                               str(tmp_path / f"out-{run}"), str(processor)], capture_output=True, text=True, env=env,
                              check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        lines.append(done.stdout.strip().splitlines()[-1])
    assert lines[0] != "transformers imported: []"  # the folder's first scan: AutoTokenizer, and the proofs made
    assert lines[1] == "transformers imported: []"
