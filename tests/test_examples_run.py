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


@pytest.mark.parametrize(("script", "needs", "loss_line", "shorter"), [
    ("train_hf_trainer.py", "accelerate", r"^step \d+: loss=\d+\.\d+$", ["--steps", "2"]),
    ("train_automodel.py", "nemo_automodel", r"^epoch \d+ batch \d+: .* loss=\d+\.\d+$", ["--epochs", "1"]),
])  # fmt: skip
def test_demo_trains_and_prints_its_losses(script, needs, loss_line, shorter, tmp_path):
    """``shorter``: the script's own flag for fewer steps than its default (two losses printed are enough here)."""
    if importlib.util.find_spec(needs) is None:
        pytest.skip(f"{script} needs {needs}")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, str(EXAMPLES / script), "--demo", *shorter], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    losses = [line for line in done.stdout.splitlines() if re.match(loss_line, line)]
    assert len(losses) >= 2, done.stdout[-3000:]
