"""vlmpack never waits for a keyboard: a processor folder that declares its own code is one line, at once.

transformers asks ``Do you wish to run the custom code? [y/N]`` on stdin when a folder declares
``auto_map`` classes and ``trust_remote_code`` is left unset; a job scheduler keeps stdin open, so
such a job would wait forever. The scan runs here as a user's job does (the console entry point, in
its own process) with stdin an open pipe nobody writes to.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from vlmpack_offline.synthetic.shards import SyntheticSample, write_shard


def _folder_with_its_own_code(src, target):
    shutil.copytree(src, target)
    config = json.loads((target / "config.json").read_text()) if (target / "config.json").is_file() else {}
    config.update(model_type="my_custom_vlm", auto_map={"AutoConfig": "configuration_my.MyConfig"})
    (target / "config.json").write_text(json.dumps(config))
    tokenizer = json.loads((target / "tokenizer_config.json").read_text())
    tokenizer.update(tokenizer_class="MyTokenizer", auto_map={"AutoTokenizer": ["tokenization_my.MyTokenizer", None]})
    (target / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    for module in ("configuration_my.py", "tokenization_my.py"):  # would end the run loudly if ever imported
        (target / module).write_text("raise SystemExit('the folder's own code ran')\n")
    return target


def test_a_folder_that_needs_its_own_code_is_one_line_not_a_prompt(tmp_path, qwen25_processor_dir):
    folder = _folder_with_its_own_code(qwen25_processor_dir, tmp_path / "proc")
    write_shard(tmp_path / "src" / "part-000.tar", [SyntheticSample(key="a", json={"messages": [
        {"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]})])
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"data": {"wds_dir": str(tmp_path / "src"), "work_dir": str(tmp_path / "work"),
                                               "packed_wds_dir": str(tmp_path / "out")},
                                      "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}}}))
    job = subprocess.Popen([sys.executable, "-m", "vlmpack_offline", "scan", "--config", str(config)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = job.communicate(timeout=600)  # the pipe stays open: a prompt would wait past this (a hang guard)
    finally:
        job.kill()
    text = out.decode()
    assert job.returncode == 2, text
    assert "[y/N]" not in text and "own code ran" not in text
    assert ("declares its own Python code (auto_map) that loading it needs; vlmpack does not run it unless you set "
            "model.processor_kwargs.trust_remote_code: true") in text
    assert "Traceback" not in text


def test_a_tokenizer_declared_as_its_own_code_is_not_replaced_by_a_generic_one(tmp_path, qwen25_processor_dir):
    from vlmpack_offline.config import config_from_dict
    from vlmpack_offline.errors import ConfigError
    from vlmpack_offline.tokens import TokenCounter

    folder = shutil.copytree(qwen25_processor_dir, tmp_path / "proc")
    tokenizer = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer.update(tokenizer_class="MyTokenizer", auto_map={"AutoTokenizer": ["tokenization_my.MyTokenizer", None]})
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer))  # auto_map here only, not in config.json
    config = config_from_dict({"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}}})
    with pytest.raises(ConfigError, match=r"declares its own tokenizer code \(MyTokenizer.*"
                                          r"model\.processor_kwargs\.trust_remote_code: true"):
        TokenCounter.from_config(config)
