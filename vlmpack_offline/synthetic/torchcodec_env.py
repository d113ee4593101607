"""Run torchcodec, the default video reader of transformers and qwen-vl-utils, on a machine without FFmpeg.

torchcodec loads FFmpeg's shared libraries (``libavcodec.so.62`` ...) by their plain names; PyPI's torchcodec
wheel ships none, and a machine may have none installed. PyAV's wheel bundles FFmpeg under names auditwheel
made unique (``av.libs/libavcodec-5e6b81c2.so.62.28.102``). ``ffmpeg_library_dir`` links those under their
plain names in a folder, and ``torchcodec_env`` is the environment a subprocess needs to load them
(``LD_LIBRARY_PATH`` is read when a process starts, so it cannot be set for the running one). ``make test-ref``
runs the reference suite so (``python -m vlmpack_offline.synthetic.torchcodec_env DIR`` prints the folder), and
transformers and qwen-vl-utils there decode with torchcodec, their default, as a user's training does;
vlmpack itself never needs it (``media/video_meta.py`` reads its numbers from the container through PyAV).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

__all__ = ["ffmpeg_library_dir", "torchcodec_env"]

_FFMPEG = ("avcodec", "avdevice", "avfilter", "avformat", "avutil", "swresample", "swscale")


def ffmpeg_library_dir(dest: str | Path) -> Path:
    """``dest`` holding PyAV's bundled FFmpeg libraries under their sonames (``libavutil.so.60`` ...)."""
    import av

    bundled = Path(av.__file__).resolve().parent.parent / "av.libs"
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for path in bundled.glob("lib*.so*"):  # each under its own name too: the libraries' $ORIGIN is this folder
        match = re.fullmatch(r"lib([a-z]+)-[0-9a-f]{8}\.so\.(\d+)(?:\.[\d.]+)?", path.name)
        names = [path.name] + ([f"lib{match[1]}.so.{match[2]}"] if match and match[1] in _FFMPEG else [])
        for name in names:
            if not (dest / name).exists():
                (dest / name).symlink_to(path)
    return dest


def torchcodec_env(dest: str | Path) -> dict[str, str]:
    """``os.environ`` plus the library path a subprocess needs to import torchcodec over PyAV's FFmpeg."""
    env = dict(os.environ)
    libs = str(ffmpeg_library_dir(dest))
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libs, env.get("LD_LIBRARY_PATH", "")) if p)
    return env


if __name__ == "__main__":  # LD_LIBRARY_PATH=$(python -m vlmpack_offline.synthetic.torchcodec_env DIR) python ...
    print(ffmpeg_library_dir(Path(sys.argv[1] if len(sys.argv) > 1 else ".ffmpeg_libs").resolve()))
