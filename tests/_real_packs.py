"""A packed directory built by the real stages (scan -> bucket -> plan -> write -> verify) in tmp_path.

Not a test module: the framework-adapter tests share it.
"""

from __future__ import annotations

from pathlib import Path

from vlmpack_offline.config import Config, config_from_dict
from vlmpack_offline.stages import bucket, plan, scan, verify, write

TINY_VIDEO = {"min_pixels": 4 * 28 * 28, "max_pixels": 16 * 28 * 28, "min_frames": 4, "fps": 2.0}

__all__ = ["TINY_VIDEO", "build_packed"]


def build_packed(root: Path, src: Path, processor_dir: Path, *, capacity: int = 4096,
                 video: dict | None = TINY_VIDEO, **sections) -> Config:
    """Pack ``src`` with ``processor_dir`` into ``root/packed``; ``sections`` are config sections on top
    (``video=None`` for a family that takes no video)."""
    raw = {
        "data": {"wds_dir": str(src), "work_dir": str(root / "work"), "packed_wds_dir": str(root / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
        "sample": {"max_token_len": capacity}, **({"video": video} if video else {}),
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    config = config_from_dict(raw, source="test")
    for stage in (scan, bucket, plan, write, verify):
        result = stage.run(config)
        assert result.exit_code == 0, (stage.__name__, result.summary)
    return config
