"""docs/quickstart.md runs as written: its Python block, and every bash block marked `<!-- runnable -->`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "quickstart.md"
RUNNABLE = "<!-- runnable -->"


def _python_block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 1, "the quickstart holds one Python block, the runnable API example"
    return blocks[0]


def _runnable_bash_blocks() -> list[str]:
    text = DOC.read_text()
    blocks = re.findall(re.escape(RUNNABLE) + r"\s*\n```bash\n(.*?)```", text, flags=re.S)
    assert len(blocks) == text.count(RUNNABLE), f"every {RUNNABLE} marker is followed by a ```bash block"
    assert blocks, f"the quickstart marks its CLI flow {RUNNABLE}"
    return blocks


def test_python_block_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the block's relative paths land here
    namespace: dict = {}
    exec(compile(_python_block(), f"{DOC}:python", "exec"), namespace)  # noqa: S102 - our own docs
    out = capsys.readouterr().out
    for stage in ("scan", "bucket", "plan", "write", "verify"):
        assert f"[{stage}] done" in out
    batch = namespace["batch"]
    assert batch.input_ids.shape[0] == 1 and int(batch.cu_seqlens[-1]) == batch.input_ids.shape[1]
    assert (tmp_path / "mine" / "packed" / ".nv-meta" / "dataset.yaml").is_file()
    assert type(namespace["task_encoder"]).__name__ == "PackTaskEncoder"


def test_runnable_bash_blocks_run(tmp_path):
    """The blocks run in order, in one shell, from a folder laid out like the repository root."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")  # demo.yaml's ../demo_out lands in tmp_path
    (tmp_path / "scripts").symlink_to(ROOT / "scripts")
    env = {k: v for k, v in os.environ.items() if k not in ("VLMPACK", "PYTHON")}
    # this interpreter's environment first: its `python` and `vlmpack`; then the repository's scripts
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), str(ROOT / "scripts"), env.get("PATH", "")])
    script = "set -euo pipefail\n" + "\n".join(_runnable_bash_blocks())
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"exit {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    assert "all checks passed" in done.stdout  # verify ran on the demo output
    assert (tmp_path / "demo_out" / "packed" / ".nv-meta" / "dataset.yaml").is_file()
