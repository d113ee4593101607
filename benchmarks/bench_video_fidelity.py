"""Video fidelity: vlmpack's per-sample token count vs the model's own video pipeline, per family x reader x setting.

Run in the reference environment (torchvision, the real video processors, qwen-vl-utils, decord, PyAV, torchcodec)::

    .venv-ref/bin/python benchmarks/bench_video_fidelity.py            # full corpus, about 5 minutes on 2 shared cores
    .venv-ref/bin/python benchmarks/bench_video_fidelity.py --quick    # 12 videos, fewer settings, < 3 minutes
    .venv-ref/bin/python benchmarks/bench_video_fidelity.py --markdown # the table as markdown (docs/video-fidelity.md)

What it does:

1. encodes a corpus (``vlmpack_offline/synthetic/videos.py``: mp4 / mkv / webm / avi / mov; H.264 with B-frames, VP9, VP8, MPEG-4;
   constant and variable frame rate; start offsets; 0.2 s .. 310 s; 64x48 .. 1920x1080) and writes one WebDataset
   shard, one sample per video (a user turn ``<video>`` + a question, an assistant answer);
2. vlmpack side: the real ``vlmpack scan`` stage per family x setting x reader (``video.reader``), and each sample's
   ``token_len`` / ``media_tokens`` or drop reason from the manifest in its work_dir;
3. pipeline side (one subprocess per reader; torchcodec loads PyAV's bundled FFmpeg through
   ``synthetic/torchcodec_env.py``), never vlmpack code:

   - ``qwen_vl_utils``: qwen-vl-utils 0.0.14 ``fetch_video`` (``FORCE_QWENVL_VIDEO_READER``; for pyav, which it
     lacks, a reader registered in its table that reads with transformers' ``load_video(backend="pyav")`` and
     samples with its own ``smart_nframes``), then the real processor on the frames (``do_resize=False``,
     ``do_sample_frames=False``, as Qwen's model cards run it);
   - ``processor``: the real ``AutoProcessor`` given the video's path: its video processor loads the file itself
     (``fetch_videos`` -> ``load_video``; the harness only swaps the backend it names, torchcodec, for the reader of
     the row) and samples frames itself where its folder says ``do_sample_frames``;
   - ``recipe``: folders whose processor samples nothing (InternVL-hf, LLaVA-OneVision: ``do_sample_frames: false``
     takes every frame it is given) get the frames of the family's documented recipe, chosen from the reader's
     own metadata (InternVL: 2 fps, 4..768 frames; LLaVA-OneVision: 32 frames, ``np.linspace(.., dtype=int)``
     as its training code's ``force_sample``), loaded by ``load_video`` and handed to the real processor;

   the count is ``len(input_ids)`` of the whole rendered conversation (what the scan records as ``token_len``),
   and the media tokens among them;
4. prints one row per family x reader x setting: ``exact / total`` (equal counts, or the pipeline refused and
   vlmpack dropped), the pipeline's refusals and how many of them vlmpack dropped, and the first mismatches as
   (video, vlmpack, pipeline) with frames and size on each side.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vlmpack_offline.synthetic.videos import corpus, write

READERS = ("torchcodec", "decord", "pyav")
QUESTION = "What happens in this video?"
ANSWER = "Something moves across the frame."


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    family: str  # build_processor_dir family
    name: str  # row label
    oracle: str  # qwen_vl_utils | processor | recipe
    video: dict = field(default_factory=dict)  # vlmpack's video: section (and fetch_video's item keys)
    folder: dict = field(default_factory=dict)  # keys written over the folder's video processor settings
    quick: bool = False  # part of --quick


SETTINGS = [
    Setting(family="qwen2_5_vl", name="default", oracle="qwen_vl_utils", quick=True),
    Setting(family="qwen2_5_vl", name="max_pixels 1003520", oracle="qwen_vl_utils", video={"max_pixels": 1003520}),
    Setting(family="qwen2_5_vl", name="min=max_pixels 200704", oracle="qwen_vl_utils",
            video={"min_pixels": 200704, "max_pixels": 200704}),
    Setting(family="qwen2_5_vl", name="total_pixels 2000000", oracle="qwen_vl_utils", video={"total_pixels": 2_000_000}),
    Setting(family="qwen2_5_vl", name="fps 1, frames 2..8", oracle="qwen_vl_utils",
            video={"fps": 1.0, "min_frames": 2, "max_frames": 8}, quick=True),
    Setting(family="qwen3_vl", name="default (folder samples)", oracle="processor", quick=True),
    Setting(family="qwen3_vl", name="folder cap_pixels_per_frame", oracle="processor",
            folder={"cap_pixels_per_frame": True}),
    Setting(family="glm4v", name="default (folder samples)", oracle="processor", quick=True),
    Setting(family="internvl", name="default (recipe frames)", oracle="recipe"),
    Setting(family="internvl", name="folder do_sample_frames, fps 2", oracle="processor",
            folder={"do_sample_frames": True, "fps": 2}, quick=True),
    Setting(family="internvl", name="folder num_frames 8", oracle="processor",
            folder={"do_sample_frames": True, "num_frames": 8}),
    Setting(family="llava_onevision", name="default (recipe frames)", oracle="recipe"),
    Setting(family="llava_onevision", name="folder do_sample_frames, fps 2", oracle="processor",
            folder={"do_sample_frames": True, "fps": 2}),
    Setting(family="llava_onevision", name="folder num_frames 8", oracle="processor",
            folder={"do_sample_frames": True, "num_frames": 8}, quick=True),
]  # fmt: skip


def _messages(part: str) -> list[dict]:
    user = [{"type": "video", "video": part}, {"type": "text", "text": QUESTION}]
    return [{"role": "user", "content": user}, {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]}]


def _key(path: Path) -> str:
    """A webdataset key (no ``.``) for a corpus file."""
    return path.name.rsplit(".", 1)[0].replace(".", "_")


def build_folder(root: Path, setting: Setting, index: int) -> Path:
    """The family's offline processor folder (hub layout, with its video processor), ``setting.folder`` on top."""
    from vlmpack_offline.synthetic.processor_dir import build_processor_dir

    folder = build_processor_dir(root / f"{index:02d}-{setting.family}", setting.family, video=True)
    if setting.folder:
        path = folder / "video_preprocessor_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **setting.folder}, indent=2))
    return folder


# -- vlmpack side ---------------------------------------------------------------------------------------------------
def write_corpus_shard(videos: list[Path], wds: Path) -> None:
    from vlmpack_offline.synthetic.shards import SyntheticSample, write_shard

    samples = []
    for path in videos:
        part = "v." + path.suffix[1:]
        samples.append(SyntheticSample(key=_key(path), json={"messages": _messages(part)}, media={part: path.read_bytes()}))
    write_shard(wds / "videos-000000.tar", samples)


def vlmpack_scan(root: Path, wds: Path, folder: Path, setting: Setting, reader: str) -> dict:
    """key -> {"tokens", "media"} or {"drop", "error"}, from the scan's manifest; {"error"} for the whole row when
    the config is refused. Frames and size of a count come from the same config's counter (``probe``)."""
    from vlmpack_offline.config import config_from_dict
    from vlmpack_offline.manifest import Manifest, manifest_path
    from vlmpack_offline.stages import scan

    work = root / "work"
    raw = {
        "data": {"wds_dir": str(wds), "work_dir": str(work), "packed_wds_dir": str(root / "packed")},
        "sample": {"max_token_len": 10**7},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}},
        "scan": {"max_drop_ratio": 1.0},
        "video": {**setting.video, "reader": reader},
    }
    try:
        config = config_from_dict(raw, source=f"{setting.family}/{setting.name}/{reader}")
        with contextlib.redirect_stdout(io.StringIO()):
            scan.run(config)
    except Exception as exc:  # a refused config: the whole row says why
        return {"__row_error__": f"{type(exc).__name__}: {exc}"}
    out = {}
    with Manifest(manifest_path(work)) as manifest:
        for row in manifest.iter_samples():
            if row.status == "ok":
                out[row.key] = {"tokens": row.token_len, "media": row.media_tokens}
            else:
                out[row.key] = {"drop": row.status, "error": row.error.splitlines()[0][:160] if row.error else ""}
    return out


def vlmpack_sampling(folder: Path, setting: Setting, reader: str, data: bytes, part: str) -> str:
    """``frames@fps HxW`` as vlmpack's counter samples this video (for a mismatch line)."""
    from vlmpack_offline.config import config_from_dict
    from vlmpack_offline.tokens import make_counter

    raw = {"data": {"wds_dir": "unused", "work_dir": "/tmp/unused", "packed_wds_dir": "/tmp/unused2"},
           "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}},
           "video": {**setting.video, "reader": reader}}  # fmt: skip
    try:
        sampling = make_counter(config_from_dict(raw, source="probe")).probe("video", data, part=part).sampling
    except Exception as exc:
        return f"({type(exc).__name__})"
    return (f"{sampling.n_frames}f of {sampling.total_frames}@{sampling.native_fps:.3g}fps "
            f"{sampling.resized_height}x{sampling.resized_width}")  # fmt: skip


# -- pipeline side (a subprocess per reader) ------------------------------------------------------------------------
LOADED: dict = {}  # the last video metadata the patched fetch_videos returned


def _use_reader_in_transformers(reader: str) -> None:
    """The video processors' own loading (``fetch_videos`` -> ``load_video``) with ``reader`` as the backend it names
    (transformers names torchcodec, with a torchvision fallback); nothing else changes."""
    from transformers import video_processing_utils
    from transformers.video_utils import load_video

    def fetch_videos(self, video_url_or_urls, sample_indices_fn=None):
        if isinstance(video_url_or_urls, list):
            return list(zip(*[self.fetch_videos(x, sample_indices_fn=sample_indices_fn) for x in video_url_or_urls], strict=True))
        video, metadata = load_video(video_url_or_urls, backend=reader, sample_indices_fn=sample_indices_fn)
        LOADED["metadata"] = metadata  # for the report: what the processor sampled from
        return video, metadata

    video_processing_utils.BaseVideoProcessor.fetch_videos = fetch_videos


def _use_reader_in_qwen_vl_utils(reader: str) -> None:
    """qwen-vl-utils reads with ``reader`` (``FORCE_QWENVL_VIDEO_READER``); a reader failure is a refusal, not its
    silent torchvision fallback; pyav (which it lacks) is registered as its decord reader is written, over
    transformers' ``load_video(backend="pyav")``."""
    import torch
    from qwen_vl_utils import vision_process as vp

    def read_pyav(ele):
        from transformers.video_utils import load_video

        picked = {}

        def pick(metadata, **kwargs):
            start, end, total = vp.calculate_video_frame_range(ele, metadata.total_num_frames, metadata.fps)
            nframes = vp.smart_nframes(ele, total_frames=total, video_fps=metadata.fps)
            picked.update(total=total, fps=metadata.fps, n=nframes)
            return torch.linspace(start, end, nframes).round().long().tolist()

        frames, metadata = load_video(ele["video"], backend="pyav", sample_indices_fn=pick)
        video = torch.from_numpy(frames).permute(0, 3, 1, 2)
        info = dict(fps=metadata.fps, frames_indices=list(metadata.frames_indices), total_num_frames=picked["total"],
                    video_backend="pyav")  # fmt: skip
        return video, info, picked["n"] / max(picked["total"], 1e-6) * picked["fps"]

    vp.VIDEO_READER_BACKENDS["pyav"] = read_pyav
    failure = {}
    original = vp.VIDEO_READER_BACKENDS[reader]

    def guarded(ele):
        try:
            return original(ele)
        except Exception as exc:
            failure["error"] = exc
            raise

    def no_fallback(ele):
        raise RuntimeError(f"{reader}: {failure.get('error')!r} (qwen-vl-utils would fall back to torchvision)")

    vp.VIDEO_READER_BACKENDS[reader] = guarded
    vp.VIDEO_READER_BACKENDS["torchvision"] = no_fallback
    vp.FORCE_QWENVL_VIDEO_READER = reader
    vp.get_video_reader_backend.cache_clear()


def _recipe_indices(family: str, metadata) -> list[int]:
    """The family's documented frame recipe on the reader's metadata (see the module doc)."""
    import math

    import numpy as np

    total = int(metadata.total_num_frames)
    if family == "llava_onevision":  # LLaVA-NeXT training code: frames_upbound 32, force_sample
        return np.linspace(0, total - 1, 32, dtype=int).tolist()
    n = total / metadata.fps * 2.0  # InternVL: 2 fps, 4..768 frames, any count (one tile per frame)
    n = math.floor(min(max(n, 4), min(768, total), total))
    return np.linspace(0, total - 1, n).round().astype(int).tolist()


def _count(processor, out, family: str) -> dict:
    ids = list(out["input_ids"][0])
    tokens = {"qwen2_5_vl": "<|video_pad|>", "qwen3_vl": "<|video_pad|>"}.get(family)
    pad = processor.tokenizer.convert_tokens_to_ids(tokens) if tokens else processor.image_token_id
    if family == "llava_onevision":
        pad = processor.tokenizer.convert_tokens_to_ids(processor.video_token)
    if family == "glm4v":
        pad = processor.tokenizer.convert_tokens_to_ids("<|image|>")
    shape = ""
    if out.get("video_grid_thw") is not None:
        t, h, w = (int(x) for x in out["video_grid_thw"][0])
        shape = f"grid {t}x{h}x{w}"
    return {"tokens": len(ids), "media": sum(int(i) == pad for i in ids), "shape": shape}


def oracle_one(processor, setting: Setting, path: str, reader: str) -> dict:
    import numpy as np
    from transformers.video_utils import VideoMetadata, load_video

    messages = _messages(path)
    text = processor.apply_chat_template(messages, tokenize=False)
    if setting.oracle == "qwen_vl_utils":
        from qwen_vl_utils.vision_process import fetch_video

        patch = processor.video_processor.patch_size
        video, metadata = fetch_video({"video": path, **setting.video}, image_patch_size=patch, return_video_metadata=True)
        out = processor(text=[text], videos=[video], video_metadata=[VideoMetadata(**metadata)], do_resize=False,
                        do_sample_frames=False)  # fmt: skip
        info = f"{video.shape[0]}f of {metadata['total_num_frames']}@{float(metadata['fps']):.3g}fps " \
               f"{video.shape[2]}x{video.shape[3]}"  # fmt: skip
    elif setting.oracle == "recipe":
        seen = {}

        def pick(metadata, **kwargs):
            seen["meta"] = metadata
            return _recipe_indices(setting.family, metadata)

        frames, metadata = load_video(path, backend=reader, sample_indices_fn=pick)
        frames = np.asarray(frames)
        out = processor(text=[text], videos=[frames], video_metadata=[metadata])
        meta = seen["meta"]
        info = f"{len(frames)}f of {meta.total_num_frames}@{float(meta.fps):.3g}fps"
    else:
        LOADED.clear()
        out = processor(text=[text], videos=[path])
        m = LOADED["metadata"]
        info = f"{len(m.frames_indices)}f of {m.total_num_frames}@{float(m.fps):.3g}fps"
    return {**_count(processor, out, setting.family), "info": info}


def oracle_worker(job_path: Path, out_path: Path) -> None:
    """Run every setting of ``job`` through the pipelines with one reader; write the results as JSON."""
    import warnings

    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    from transformers import AutoProcessor
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    job = json.loads(job_path.read_text())
    reader = job["reader"]
    _use_reader_in_transformers(reader)
    _use_reader_in_qwen_vl_utils(reader)
    results = {}
    for row in job["rows"]:
        setting = Setting(**row["setting"])
        processor = AutoProcessor.from_pretrained(row["folder"])
        per_video = {}
        for path in job["videos"]:
            try:
                per_video[_key(Path(path))] = oracle_one(processor, setting, path, reader)
            except Exception as exc:
                per_video[_key(Path(path))] = {"refused": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"}
        results[row["id"]] = per_video
    out_path.write_text(json.dumps(results))


def check_torchcodec(env: dict, video: Path) -> None:
    probe = (f"from torchcodec.decoders import VideoDecoder; d = VideoDecoder({str(video)!r}); "
             "assert d.get_frames_at([0]).data.shape[0] == 1; print(d.metadata.num_frames)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"torchcodec cannot decode {video.name} with PyAV's FFmpeg: {done.stderr.strip().splitlines()[-1:]}")


# -- table ----------------------------------------------------------------------------------------------------------
def compare(keys: list[str], ours: dict, theirs: dict) -> dict:
    if "__row_error__" in ours:
        return {"exact": 0, "total": len(keys), "refused": 0, "dropped": 0, "mismatches": [], "error": ours["__row_error__"]}
    exact = refused = dropped = 0
    mismatches = []
    for key in keys:
        mine, real = ours.get(key, {"drop": "missing"}), theirs.get(key, {"refused": "missing"})
        if "refused" in real:
            refused += 1
            dropped += "drop" in mine
            exact += "drop" in mine
            if "drop" not in mine:
                mismatches.append((key, mine, real))
        elif "drop" not in mine and (mine["tokens"], mine["media"]) == (real["tokens"], real["media"]):
            exact += 1
        else:
            mismatches.append((key, mine, real))
    return {"exact": exact, "total": len(keys), "refused": refused, "dropped": dropped, "mismatches": mismatches}


def _side(result: dict) -> str:
    if "drop" in result:
        return f"drop {result['drop']}"
    if "refused" in result:
        return f"refused ({result['refused'][:90]})"
    return f"{result['tokens']} ({result.get('info', '')} {result.get('shape', '')})".replace(" )", ")")


def render(rows: list[dict], *, markdown: bool, show: int = 3) -> str:
    lines = []
    if markdown:
        lines += ["| family | reader | setting | exact / total | refused (dropped) | mismatches |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
    for row in rows:
        shown = "; ".join(f"`{k}`: vlmpack {_side(a)} vs pipeline {_side(b)}" for k, a, b in row["mismatches"][:show])
        more = len(row["mismatches"]) - show
        shown += f"; +{more} more" if more > 0 else ""
        if row.get("error"):
            shown = f"config refused: {row['error'][:200]}"
        cells = [row["family"], row["reader"], row["setting"], f"{row['exact']} / {row['total']}",
                 f"{row['refused']} ({row['dropped']})", shown or "-"]  # fmt: skip
        if markdown:
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        else:
            lines.append(f"{cells[0]:16s} {cells[1]:10s} {cells[2]:32s} {cells[3]:>9s}  refused {cells[4]:7s} {cells[5]}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="12 videos and 6 settings (< 3 minutes)")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--readers", default=",".join(READERS), help="comma-separated subset of " + ",".join(READERS))
    parser.add_argument("--families", default="", help="comma-separated subset of the families")
    parser.add_argument("--jobs", type=int, default=2, help="pipeline subprocesses at once (one per reader)")
    parser.add_argument("--json", type=Path, help="also write every result here")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    parser.add_argument("--oracle-worker", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.oracle_worker:
        return oracle_worker(*args.oracle_worker)
    from vlmpack_offline.synthetic.torchcodec_env import torchcodec_env

    started = time.time()
    readers = [r for r in args.readers.split(",") if r]
    families = set(filter(None, args.families.split(",")))
    settings = [s for s in SETTINGS if (s.quick or not args.quick) and (not families or s.family in families)]
    with contextlib.ExitStack() as stack:
        root = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="video_fidelity_")))
        (root / "videos").mkdir(parents=True, exist_ok=True)
        videos = [write(spec, root / "videos", seed=i) for i, spec in enumerate(corpus(quick=args.quick))]
        write_corpus_shard(videos, root / "wds")
        keys = [_key(v) for v in videos]
        env = torchcodec_env(root / "ffmpeg_libs")
        env["TORCHCODEC_NUM_THREADS"] = "1"
        if "torchcodec" in readers:
            check_torchcodec(env, videos[0])
        folders = {i: build_folder(root / "folders", s, i) for i, s in enumerate(settings)}
        jobs = []
        for reader in readers:
            job = {"reader": reader, "videos": [str(v) for v in videos],
                   "rows": [{"id": str(i), "setting": asdict(s), "folder": str(folders[i])} for i, s in enumerate(settings)]}  # fmt: skip
            (root / f"job-{reader}.json").write_text(json.dumps(job))
            jobs.append(reader)
        running: dict[str, subprocess.Popen] = {}
        pending = list(jobs)

        def launch() -> None:
            while pending and len(running) < args.jobs:
                reader = pending.pop(0)
                command = [sys.executable, __file__, "--oracle-worker", str(root / f"job-{reader}.json"),
                           str(root / f"out-{reader}.json")]  # fmt: skip
                log = open(root / f"log-{reader}.txt", "w")  # noqa: SIM115 (closed with the process)
                running[reader] = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)

        launch()
        ours = {}
        for i, setting in enumerate(settings):  # the scans run here while the pipelines run in subprocesses
            for reader in readers:
                ours[(str(i), reader)] = vlmpack_scan(root / "scans" / f"{i}-{reader}", root / "wds", folders[i], setting, reader)
                for name, process in list(running.items()):
                    if process.poll() is not None:
                        del running[name]
                launch()
        while running or pending:
            for name, process in list(running.items()):
                if process.wait() is not None:
                    del running[name]
            launch()
        theirs = {}
        for reader in readers:
            out = root / f"out-{reader}.json"
            if not out.exists():
                sys.exit(f"the {reader} pipeline worker failed:\n" + (root / f"log-{reader}.txt").read_text()[-3000:])
            theirs[reader] = json.loads(out.read_text())
        rows = []
        data = {v.name: v.read_bytes() for v in videos}
        by_key = {_key(v): v for v in videos}
        for i, setting in enumerate(settings):
            for reader in readers:
                row = compare(keys, ours[(str(i), reader)], theirs[reader][str(i)])
                for key, mine, _real in row["mismatches"][:3]:  # what vlmpack sampled, for the report
                    if "drop" not in mine:
                        video = by_key[key]
                        mine["info"] = vlmpack_sampling(folders[i], setting, reader, data[video.name], "v" + video.suffix)
                rows.append({"family": setting.family, "reader": reader, "setting": setting.name, **row})
        print(render(rows, markdown=args.markdown))
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()  # fmt: skip
        dirty = " (with uncommitted changes)" if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                                                 capture_output=True, text=True).stdout else ""  # fmt: skip
        total = sum(r["total"] for r in rows)
        exact = sum(r["exact"] for r in rows)
        print(f"\n{exact} / {total} agree over {len(rows)} rows, {len(videos)} videos; "
              f"{time.time() - started:.0f} s; {datetime.date.today()} on commit {commit}{dirty}")  # fmt: skip
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
