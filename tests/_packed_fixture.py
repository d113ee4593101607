"""Tiny real inputs for the write stage: source tars, their manifest and a plan, built in tmp_path.

Not a test module. The scan and planner are not needed: the manifest rows take
their byte locators from ``tario.iter_samples`` over the real tars, token lengths
are small made-up numbers (write copies them, it does not count them).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from vlmpack_offline.config import Config, config_from_dict
from vlmpack_offline.manifest import Manifest, SampleRecord, ShardRecord, manifest_path
from vlmpack_offline.plan_file import Pack, write_plan
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, video_bytes, write_shard
from vlmpack_offline.tario import iter_samples

CAPACITY = 4096


@dataclass
class Inputs:
    raw_config: dict  # the config as plain data (for a YAML file)
    config: Config
    packs: list[Pack]
    # sample id -> media bytes in the order its conversation names them
    media_in_order: dict[str, list[bytes]] = field(default_factory=dict)
    source_tars: list[Path] = field(default_factory=list)

    def with_config(self, **sections: dict) -> Config:
        raw = {k: dict(v) for k, v in self.raw_config.items()}
        for name, values in sections.items():
            raw.setdefault(name, {}).update(values)
        return config_from_dict(raw, source="test")

    def config_file(self, path: Path, **sections: dict) -> Path:
        raw = {k: dict(v) for k, v in self.raw_config.items()}
        for name, values in sections.items():
            raw.setdefault(name, {}).update(values)
        path.write_text(yaml.safe_dump(raw))
        return path


def _samples(shard_no: int, n: int, blob_bytes: int) -> tuple[list[SyntheticSample], dict[str, list[bytes]]]:
    """Cycle through text-only, HF image, ShareGPT multi-image and video samples."""
    rng = random.Random(shard_no)
    samples, media = [], {}
    for i in range(n):
        key = f"sub/dir/s{shard_no}_{i:03d}" if i % 2 else f"s{shard_no}_{i:03d}"
        kind = i % 4
        answer = {"role": "assistant", "content": f"answer {shard_no}.{i}"}
        if kind == 0:
            js = {"messages": [{"role": "user", "content": f"question {i}"}, answer]}
            parts: dict[str, bytes] = {}
            order: list[str] = []
        elif kind == 1:
            parts = {"img0.jpg": image_bytes(40 + i, 32, seed=shard_no * 100 + i)}
            if blob_bytes:
                parts["img1.png"] = rng.randbytes(blob_bytes)  # large part for size/throughput tests
            order = list(parts)
            user = [{"type": "image", "image": p} for p in order] + [{"type": "text", "text": "what?"}]
            js = {"messages": [{"role": "user", "content": user}, answer]}
        elif kind == 2:
            parts = {"a.png": image_bytes(24, 24, fmt="PNG", seed=i), "b.jpg": image_bytes(30, 20, seed=i + 1)}
            order = ["b.jpg", "a.png"]  # the text names them out of member order
            js = {
                "conversations": [{"from": "human", "value": "<image> then <image> compare"},
                                  {"from": "gpt", "value": "same"}],
                "images": order,
            }
        else:
            parts = {"clip.mp4": video_bytes(4, 2, 32, 32, seed=shard_no * 10 + i)}
            order = ["clip.mp4"]
            js = {"messages": [{"role": "user", "content": [{"type": "video", "video": "clip.mp4"}]}, answer]}
        samples.append(SyntheticSample(key=key, json=js, media=parts))
        media[key] = [parts[p] for p in order]
    return samples, media


def build_inputs(
    tmp_path: Path,
    *,
    n_shards: int = 2,
    per_shard: int = 8,
    pack_size: int = 3,
    val_packs: int = 1,
    blob_bytes: int = 0,
    **sections: dict,
) -> Inputs:
    """Source tars + manifest (one dropped sample per shard) + plan of ``pack_size`` samples per pack."""
    src = tmp_path / "src"
    raw = {
        "data": {"wds_dir": str(src), "work_dir": str(tmp_path / "work"), "packed_wds_dir": str(tmp_path / "packed")},
        "sample": {"max_token_len": CAPACITY},
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    config = config_from_dict(raw, source="test")
    inputs = Inputs(raw_config=raw, config=config, packs=[])
    ok: list[tuple[str, int]] = []
    with Manifest(manifest_path(config.work_dir)) as manifest:
        for shard_no in range(n_shards):
            name = f"part-{shard_no:03d}.tar"
            samples, media = _samples(shard_no, per_shard, blob_bytes)
            path = write_shard(src / name, samples)
            inputs.source_tars.append(path)
            records = []
            for seq, raw_sample in enumerate(iter_samples(path)):
                sample_id = f"{name}/{raw_sample.key}"
                status = "bad_json" if seq == per_shard - 1 else "ok"  # the last one is a drop
                n_media = len(media[raw_sample.key])
                token_len = 50 + 7 * seq + 100 * n_media
                records.append(SampleRecord(
                    id=sample_id, shard=name, seq=seq, key=raw_sample.key,
                    media_type="image" if n_media else "text", token_len=token_len, media_tokens=100 * n_media,
                    n_images=n_media, n_videos=0, members=tuple((m.part, m.offset, m.size) for m in raw_sample.members),
                    status=status, error="" if status == "ok" else "made-up drop",
                ))
                if status == "ok":
                    ok.append((sample_id, token_len))
                    inputs.media_in_order[sample_id] = media[raw_sample.key]
            stat = path.stat()
            manifest.write_shard(
                ShardRecord(shard=name, path=str(path), size=stat.st_size, mtime_ns=stat.st_mtime_ns,
                            n_samples=len(records)),
                records,
            )
    chunks = [ok[i : i + pack_size] for i in range(0, len(ok), pack_size)]
    rng = random.Random(7)
    rng.shuffle(chunks)  # training order is not input order
    for pack_id, chunk in enumerate(chunks):
        inputs.packs.append(Pack(
            pack_id=pack_id,
            split="val" if pack_id >= len(chunks) - val_packs else "train",
            media_type="mixed",
            sample_ids=tuple(s for s, _ in chunk),
            sample_token_lens=tuple(n for _, n in chunk),
        ))
    write_plan(config.work_dir, inputs.packs, {"fingerprint": "plan-fp-test", "capacity": CAPACITY})
    return inputs
