"""The framework examples run as a user runs them: ``python examples/<script> --demo`` packs a small
generated dataset with the real stages, then trains on it on CPU and prints each step's loss."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("script", "needs", "loss_line"), [
    ("train_hf_trainer.py", "accelerate", r"^step \d+: loss=\d+\.\d+$"),
    ("train_automodel.py", "nemo_automodel", r"^epoch \d+ batch \d+: .* loss=\d+\.\d+$"),
])  # fmt: skip
def test_demo_trains_and_prints_its_losses(script, needs, loss_line, tmp_path):
    if importlib.util.find_spec(needs) is None:
        pytest.skip(f"{script} needs {needs}")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, str(EXAMPLES / script), "--demo"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    losses = [line for line in done.stdout.splitlines() if re.match(loss_line, line)]
    assert len(losses) >= 2, done.stdout[-3000:]
