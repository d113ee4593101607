"""Every packed layout opens with megatron-energon alone, in an environment without vlmpack.

``.venv-energon`` (``make install-energon``, requirements/energon.txt) holds energon, torch and their
dependencies and nothing of vlmpack: a training image such as a Megatron container. vlmpack writes one
folder per ``sample.sample_type`` here; ``scripts/energon_only_check.py`` runs there, finds
``vlmpack_offline`` not importable, and reads every pack of every split with energon's own
``get_train_dataset`` / ``get_val_dataset``, as many as ``.nv-meta/.info.json`` counts.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from _layout_samples import CAPTIONS, CONVERSATIONS, SINGLE_IMAGE, SYSTEM, pack_through_plan

from vlmpack_offline.plan_file import read_plan
from vlmpack_offline.stages import write

ROOT = Path(__file__).resolve().parents[1]
ENERGON_PYTHON = ROOT / ".venv-energon" / "bin" / "python"

LAYOUTS = {"vlmpack_packed": CONVERSATIONS | SYSTEM, "packed_chat_mix": CONVERSATIONS | SYSTEM,
           "packed_multi_mix_qa": CONVERSATIONS, "packed_captioning": CAPTIONS, "packed_vqa": SINGLE_IMAGE}  # fmt: skip


def test_every_layout_opens_with_energon_alone(tmp_path, qwen25_processor_dir):
    if not ENERGON_PYTHON.is_file():
        pytest.fail(f"{ENERGON_PYTHON} is missing: run `make install-energon` (make test does)")
    folders, packs = [], {}
    for sample_type, samples in LAYOUTS.items():
        config = pack_through_plan(tmp_path / sample_type, qwen25_processor_dir, samples, sample_type,
                                   split={"val_packs": 1})  # fmt: skip
        assert write.run(config).exit_code == 0
        folders.append(config.packed_wds_dir)
        packs[sample_type] = list(read_plan(config.work_dir))
    done = subprocess.run([str(ENERGON_PYTHON), str(ROOT / "scripts" / "energon_only_check.py"), *map(str, folders)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["sample_type"] for r in reports] == list(LAYOUTS)
    for report in reports:
        plan = packs[report["sample_type"]]
        assert (report["train"], report["val"]) == (sum(p.split == "train" for p in plan), sum(p.split == "val" for p in plan))
        assert report["val"] == 1 and "json" in report["parts"]
        assert ("vlmpack.json" in report["parts"]) == (report["sample_type"] != "vlmpack_packed")
