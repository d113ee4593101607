"""Run as a script under ``torchcodec_env``: each video's metadata and frames as the real readers give them.

    python tests/_reader_oracle.py DIR   ->  JSON {file: {reader: {n, fps, height, width} | {error}}}

The readers are transformers' own ``load_video`` backends (torchcodec, decord, pyav: ``video_utils.py``),
the functions its processors and qwen-vl-utils call; frames are written beside each file as
``<file>.<reader>.npy`` (every ``step``-th frame) for the decode check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def main(folder: str) -> None:
    from transformers.video_utils import load_video

    out: dict = {}
    for path in sorted(Path(folder).iterdir()):
        if path.suffix == ".npy":
            continue
        out[path.name] = {}
        for reader in ("torchcodec", "decord", "pyav"):
            seen: dict = {}

            def every_frame(metadata, seen=seen, **_):
                seen["metadata"] = metadata
                return np.arange(metadata.total_num_frames)

            try:
                frames, metadata = load_video(str(path), backend=reader, sample_indices_fn=every_frame)
                frames = np.asarray(frames)
                if frames.ndim == 4 and frames.shape[1] == 3:  # torchcodec: T, C, H, W
                    frames = frames.transpose(0, 2, 3, 1)
                np.save(f"{path}.{reader}.npy", frames)
                out[path.name][reader] = {"n": metadata.total_num_frames, "fps": metadata.fps,
                                          "height": metadata.height, "width": metadata.width,
                                          "decoded": len(frames)}  # fmt: skip
            except Exception as exc:  # the reader's own failure is the answer
                meta = seen.get("metadata")  # what the reader reported before it failed, if anything
                out[path.name][reader] = {"error": f"{type(exc).__name__}: {exc}"[:200],
                                          "n": getattr(meta, "total_num_frames", None), "fps": getattr(meta, "fps", None),
                                          "height": getattr(meta, "height", None), "width": getattr(meta, "width", None)}  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
