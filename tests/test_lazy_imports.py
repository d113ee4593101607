"""A stage imports what it uses, and a finished stage's rerun loads nothing of the counting.

Each check runs a fresh interpreter (``sys.executable``) and reads its ``sys.modules``: what a ``vlmpack``
process imports is what it pays for at start-up (the issue: ``import vlmpack_offline.stages.scan`` took 5 s,
every family module and GLM-4V's image processor with torch, before any work). No clock is read here::

    import the CLI / the scan stage        no torch, no transformers, no family module
    family_for(<one type>)                 that type's module only, and no torch
    a finished work_dir, every stage again  "up to date" without transformers (so no tokenizer), torch or
                                            the processor rules; the scan's summary still names its counting path
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vlmpack_offline.families import FAMILIES, FAST_FAMILIES
from vlmpack_offline.stages import bucket, plan, scan, stats, write
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, write_shard

# The modules of vlmpack_offline/families/ that hold a family (base, media_mix, generic ... hold none).
FAMILY_MODULES = ("qwen", "gemma3", "internvl", "glm4v", "pixtral", "kimi_k25", "llava_onevision")
HEAVY = ("torch", "transformers", "transformers.processing_utils", "transformers.image_utils")

_REPORT = """
import json, sys
{body}
print(json.dumps(sorted(sys.modules)))
"""


def _modules_after(body: str, cwd: Path | None = None) -> tuple[set[str], str]:
    """The modules a fresh interpreter holds after running ``body``, and what it printed before."""
    done = subprocess.run([sys.executable, "-c", _REPORT.format(body=body)], capture_output=True, text=True,
                          cwd=cwd, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    *printed, last = done.stdout.strip().splitlines()
    return set(json.loads(last)), "\n".join(printed)


def _family_modules(modules: set[str]) -> set[str]:
    return {name for name in FAMILY_MODULES if f"vlmpack_offline.families.{name}" in modules}


def test_importing_the_cli_and_the_scan_stage_loads_no_torch_transformers_or_family():
    modules, _ = _modules_after("import vlmpack_offline.cli, vlmpack_offline.stages.scan")
    assert not modules & set(HEAVY)
    assert _family_modules(modules) == set()
    assert "vlmpack_offline.tokens" not in modules  # the tokenizer's machinery comes with the first count


def test_vlmpack_help_loads_no_stage():
    modules, printed = _modules_after("""
from vlmpack_offline.cli import cli
try:
    cli.main(["--help"], standalone_mode=False)
except SystemExit:
    pass""")
    assert "vlmpack scan" in printed
    assert not {m for m in modules if m.startswith("vlmpack_offline.stages")}
    assert "numpy" not in modules


def test_naming_the_fast_families_imports_none_of_them():
    modules, printed = _modules_after("""
from vlmpack_offline.families import FAMILIES, FAST_FAMILIES
print("glm4v" in FAST_FAMILIES, "glm4v" in FAMILIES, len(FAMILIES) == len(FAST_FAMILIES))""")
    assert printed == "True True True"
    assert _family_modules(modules) == set()


@pytest.mark.parametrize("module", FAMILY_MODULES)
def test_asking_for_one_family_imports_its_module_alone_and_no_torch(module):
    model_type = next(t for t in sorted(FAST_FAMILIES) if type(FAMILIES[t]).__module__.endswith(f".{module}"))
    modules, printed = _modules_after(f"""
from vlmpack_offline.families import family_for
print(family_for({model_type!r}).name)""")
    assert printed == FAMILIES[model_type].name
    assert _family_modules(modules) == {module}
    assert not modules & set(HEAVY)


def test_every_family_module_serves_exactly_the_types_it_is_listed_for():
    """The lazy table (type -> module) agrees with each module's own ``model_types``, for every module."""
    import importlib

    declared: dict[str, str] = {}
    for name in FAMILY_MODULES:
        module = importlib.import_module(f"vlmpack_offline.families.{name}")
        for value in vars(module).values():
            if isinstance(getattr(value, "model_types", None), frozenset) and not isinstance(value, type):
                declared.update(dict.fromkeys(value.model_types, name))
    assert set(declared) == FAST_FAMILIES
    assert {t: type(FAMILIES[t]).__module__.rsplit(".", 1)[1] for t in FAST_FAMILIES} == declared
    assert all(t in FAMILIES[t].model_types for t in FAST_FAMILIES)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, qwen25_processor_dir) -> Path:
    """A work_dir where scan, bucket, plan, write and stats have run (two image samples, one text sample)."""
    root = tmp_path_factory.mktemp("finished")
    messages = [{"role": "user", "content": [{"type": "image", "image": "img.jpg"}, {"type": "text", "text": "What?"}]},
                {"role": "assistant", "content": "A house."}]  # fmt: skip
    text = [{"role": "user", "content": "Hello?"}, {"role": "assistant", "content": "Hi."}]
    write_shard(root / "wds" / "shard-000000.tar", [
        SyntheticSample(key="a", json={"messages": messages}, media={"img.jpg": image_bytes(320, 240)}),
        SyntheticSample(key="b", json={"messages": messages}, media={"img.jpg": image_bytes(200, 400, seed=1)}),
        SyntheticSample(key="c", json={"messages": text}),
    ])  # fmt: skip
    raw = {
        "data": {"wds_dir": str(root / "wds"), "work_dir": str(root / "work"), "packed_wds_dir": str(root / "packed")},
        "sample": {"max_token_len": 4096},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(qwen25_processor_dir)}},
        "process": {"workers": 1},
        "split": {"val_ratio": 0.0},
    }
    (root / "config.yaml").write_text(yaml.safe_dump(raw))
    from vlmpack_offline.config import load_config

    config = load_config(root / "config.yaml")
    for stage in (scan, bucket, plan, write, stats):
        result = stage.run(config)
        assert result.exit_code == 0, result.render()
    return root


_RERUN = """
from vlmpack_offline.cli import cli
try:
    cli.main(["{stage}", "--config", "config.yaml"], standalone_mode=False)
except SystemExit as exc:
    assert not exc.code, exc.code"""


def test_a_finished_scan_rerun_answers_up_to_date_without_loading_the_tokenizer(finished):
    modules, printed = _modules_after(_RERUN.format(stage="scan"), cwd=finished)
    assert printed.startswith("[scan] up to date")
    assert "qwen2_5_vl: fast path (sizes from headers)" in printed  # the counting path, as the scan printed it
    assert "samples: 3 (3 ok, 0 dropped" in printed
    # the tokenizer is transformers' (tokens/counter.py load_tokenizer): without transformers there is none
    assert not modules & set(HEAVY)
    assert not {"vlmpack_offline.tokens", "vlmpack_offline.tokens.rules", "vlmpack_offline.loader"} & modules
    assert _family_modules(modules) == set()


def test_a_changed_processor_folder_is_not_up_to_date(finished, tmp_path, qwen25_processor_dir):
    """The no-op answer reads the folder's file hashes: one changed setting sends the scan down its full path,
    which refuses the manifest naming the changed file."""
    import shutil

    from vlmpack_offline.config import load_config
    from vlmpack_offline.errors import StaleArtifactError

    folder = shutil.copytree(qwen25_processor_dir, tmp_path / "processor")
    raw = yaml.safe_load((finished / "config.yaml").read_text())
    raw["model"]["processor_kwargs"]["pretrained_model_name_or_path"] = str(folder)
    raw["data"]["work_dir"] = str(tmp_path / "work")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(raw))
    assert not scan.run(load_config(tmp_path / "config.yaml")).skipped
    assert scan.run(load_config(tmp_path / "config.yaml")).skipped
    preprocessor = folder / "preprocessor_config.json"
    settings = json.loads(preprocessor.read_text())
    settings["max_pixels"] = settings["max_pixels"] // 2
    preprocessor.write_text(json.dumps(settings))
    with pytest.raises(StaleArtifactError, match="preprocessor_config.json"):
        scan.run(load_config(tmp_path / "config.yaml"))


@pytest.mark.parametrize("stage", ["bucket", "plan", "write", "stats"])
def test_a_finished_later_stage_rerun_loads_no_torch_or_transformers(finished, stage):
    modules, printed = _modules_after(_RERUN.format(stage=stage), cwd=finished)
    assert printed.startswith(f"[{stage}] up to date")
    assert not modules & set(HEAVY)
    assert _family_modules(modules) == set()
