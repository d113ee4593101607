"""The locks under requirements/ install the same thing on any machine, on any day (docs/install.md).

Every package is pinned and hashed, no registry address is written into the repository, the core
environment keeps the CPU build of torch, the locks satisfy pyproject.toml's ranges, and the oldest
lock pins exactly pyproject.toml's lower bounds.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
REQ = ROOT / "requirements"
LOCKS = sorted(REQ.glob("*.txt"))
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _lock_check():
    spec = importlib.util.spec_from_file_location("lock_check", ROOT / "scripts" / "lock_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _requirements(*extras: str) -> list[Requirement]:
    reqs = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"][extra]]
    return reqs


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_locks_are_there():
    assert {p.name for p in LOCKS} == {"core.txt", "ref.txt", "oldest.txt", "tools.txt", "energon.txt",
                                       "automodel.txt"}


def test_the_no_deps_file_pins_only_what_its_in_names_and_no_lock_pins_it_too():
    """requirements/automodel.txt (installed with --no-deps, written by hand) holds exactly automodel.in's pins."""
    check = _lock_check()
    assert check.NO_DEPS_LOCKS == ("automodel.txt",)
    pins = check.read_pins(REQ / "automodel.txt")
    assert pins == check.read_pins(REQ / "automodel.in") == {"nemo-automodel": "0.7.0"}
    for lock in ("core.txt", "ref.txt", "oldest.txt", "energon.txt"):
        assert not set(pins) & set(check.read_pins(REQ / lock)), lock
    makefile = (ROOT / "Makefile").read_text()
    assert "--no-deps --require-hashes -r $(3)" in makefile and "NODEPS_LOCK := requirements/automodel.txt" in makefile


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_every_package_is_pinned_with_a_hash_and_no_registry_is_named(lock):
    text = (REQ / lock.name).read_text()
    for source in [text, *(p.read_text() for p in REQ.glob("*.in"))]:
        assert not re.search(r"(?m)^\s*(-i|-f|--index-url|--extra-index-url|--find-links|--trusted-host)\b", source)
        assert not re.search(r"(https?|file)://", source)
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n\n# The following packages are considered")[0])
    packages = [e for e in entries if re.match(r"[A-Za-z0-9]", e)]
    assert packages
    for entry in packages:
        assert re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*==\S+", entry), entry.splitlines()[0]
        assert "--hash=sha256:" in entry, entry.splitlines()[0]


def test_the_energon_lock_is_energon_alone_at_the_core_versions():
    core, energon = _lock_check().read_pins(REQ / "core.txt"), _lock_check().read_pins(REQ / "energon.txt")
    assert "vlmpack-offline" not in energon and "transformers" not in energon
    assert all(core[name] == version for name, version in energon.items()), "requirements/energon.in: -c core.txt"


def test_the_core_lock_keeps_the_cpu_build_of_torch_and_ref_the_one_torchvision_pairs_with():
    core, ref = _lock_check().read_pins(REQ / "core.txt"), _lock_check().read_pins(REQ / "ref.txt")
    assert core["torch"].endswith("+cpu") and "torchvision" not in core
    assert not ref["torch"].endswith("+cpu") and "torchvision" in ref and "qwen-vl-utils" in ref


@pytest.mark.parametrize(("lock", "extras"), [("core.txt", ("test", "docs")), ("ref.txt", ("test", "ref")),
                                              ("oldest.txt", ("test",))])  # fmt: skip
def test_each_lock_satisfies_pyproject(lock, extras):
    pins = _lock_check().read_pins(REQ / lock)
    for req in _requirements(*extras):
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            assert _norm(req.name) in pins, f"{lock} lacks {req.name}"
            assert req.specifier.contains(Version(pins[_norm(req.name)]), prereleases=True), (lock, str(req))


def test_the_oldest_lock_pins_every_lower_bound_of_pyproject():
    pins = _lock_check().read_pins(REQ / "oldest.txt")
    for req in _requirements("test"):
        if _norm(req.name) == "ruff":
            continue  # a linter: its newest release, whatever the floor
        (lower,) = [s.version for s in req.specifier if s.operator == ">="]
        pinned = pins[_norm(req.name)]
        assert Version(Version(pinned).public) == Version(lower), f"{req.name}: oldest.txt {pinned}, pyproject >={lower}"


def test_lock_check_names_each_difference():
    compare = _lock_check().compare
    pins = {"torch": "2.13.0+cpu", "numpy": "2.4.6"}
    assert compare(pins, {"torch": "2.13.0+cpu", "numpy": "2.4.6", "pip": "26.3", "vlmpack-offline": "0.1.0"}) == []
    assert compare(pins, {"torch": "2.15.0", "rich": "14.0"}) == [
        "numpy: lock 2.4.6, installed nothing",
        "torch: lock 2.13.0+cpu, installed 2.15.0",
        "rich: installed 14.0, not in the lock",
    ]
    # a package of a no-deps file beside the lock: may be absent, must be at its pin when installed
    beside = {"nemo-automodel": "0.7.0"}
    assert compare(pins, {"torch": "2.13.0+cpu", "numpy": "2.4.6"}, beside) == []
    assert compare(pins, {"torch": "2.13.0+cpu", "numpy": "2.4.6", "nemo-automodel": "0.7.0"}, beside) == []
    assert compare(pins, {"torch": "2.13.0+cpu", "numpy": "2.4.6", "nemo-automodel": "0.6.0"}, beside) == [
        "nemo-automodel: lock 0.7.0, installed 0.6.0"]
    assert compare(pins, {"torch": "2.13.0+cpu", "numpy": "2.4.6", "nemo-automodel": "0.7.0"}) == [
        "nemo-automodel: installed 0.7.0, not in the lock"]


def test_lock_check_reads_the_no_deps_file_beside_the_lock_and_requires_it_with_with(tmp_path, monkeypatch, capsys):
    check = _lock_check()
    lock, nodeps = tmp_path / "core.txt", tmp_path / "automodel.txt"
    lock.write_text("torch==2.13.0+cpu \\\n    --hash=sha256:00\n")
    nodeps.write_text("nemo-automodel==0.7.0 \\\n    --hash=sha256:00\n")

    def run(*args, **have):
        monkeypatch.setattr(check, "installed", lambda: {"pip": "23.2.1", **have})
        return check.main(["--quiet", str(lock), *args])

    assert run(torch="2.13.0+cpu") == 0  # .venv-energon: nemo-automodel is not installed there
    assert run(torch="2.13.0+cpu", **{"nemo-automodel": "0.7.0"}) == 0
    assert run(torch="2.13.0+cpu", **{"nemo-automodel": "0.6.0"}) == 1
    assert run("--with", str(nodeps), torch="2.13.0+cpu") == 1  # make install: it must be there
    assert run("--with", str(nodeps), torch="2.13.0+cpu", **{"nemo-automodel": "0.7.0"}) == 0
    nodeps.unlink()
    assert run(torch="2.13.0+cpu", **{"nemo-automodel": "0.7.0"}) == 1  # no file beside: a stray
    assert "nemo-automodel: installed 0.7.0, not in the lock" in capsys.readouterr().out
