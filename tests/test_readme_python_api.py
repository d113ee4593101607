"""The README's "Python API" snippet runs as written, on data it generates itself."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _snippet() -> str:
    section = README.read_text().split("## Python API", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the Python API section holds one runnable snippet"
    return blocks[0]


def test_python_api_snippet_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the snippet's relative paths land here
    namespace: dict = {}
    exec(compile(_snippet(), str(README) + ":Python API", "exec"), namespace)  # noqa: S102 - our own README
    out = capsys.readouterr().out
    for stage in ("scan", "bucket", "plan", "write", "verify"):
        assert f"[{stage}] done" in out
    batch = namespace["batch"]
    assert batch.input_ids.shape[0] == 1 and int(batch.cu_seqlens[-1]) == batch.input_ids.shape[1]
    assert (tmp_path / "mine" / "packed" / ".nv-meta" / "dataset.yaml").is_file()
    assert type(namespace["task_encoder"]).__name__ == "PackTaskEncoder"
