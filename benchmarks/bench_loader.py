"""Loader throughput: packs/s and tokens/s per worker, packed vs the same samples unpacked, in one run.

    python benchmarks/bench_loader.py [--capacities 8192 32768] [--packs 3]

For each capacity C, samples (1/3 text-only, 2/3 one JPEG image of 200..640 px, Qwen2.5-VL
processor settings) are counted with the scan's counter, filled in order into packs of at most C
tokens, and written twice with the write stage's tar writer: as packs, and one sample per "pack"
(the unpacked baseline). Both are read by ``PackDataset`` in this process (= one worker): decode,
image processor, tokenization, rope index, labels. Reported per worker; scale by workers.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.conversation import Conversation, MediaRef
from vlmpack_offline.loader import PackDataset, PackEncoder
from vlmpack_offline.output.tar_writer import ShardTarWriter
from vlmpack_offline.packed_format import JSON_PART, PackedSample, PackedSubSample, pack_key
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes
from vlmpack_offline.tokens import TokenCounter


def _samples(counter: TokenCounter, total_tokens: int, seed: int):
    rng = random.Random(seed)
    out, tokens = [], 0
    while tokens < total_tokens:
        answer = " ".join(rng.choice(["red", "box", "cat", "sky", "blue", "run"]) for _ in range(rng.randint(10, 120)))
        user: list[dict] = [{"type": "text", "text": "Describe it in detail."}]
        media = {}
        if rng.random() < 2 / 3:
            media = {"m.jpg": image_bytes(rng.randint(200, 640), rng.randint(200, 640), seed=rng.randint(0, 99))}
            user.insert(0, {"type": "image", "image": "m.jpg"})
        messages = ({"role": "user", "content": user}, {"role": "assistant", "content": [{"type": "text", "text": answer}]})
        refs = tuple(MediaRef(kind="image", part=p) for p in media)
        infos = [counter.probe("image", media[r.part]) for r in refs]
        count = counter.count(Conversation(messages=messages, media=refs), infos)
        out.append((messages, media, count))
        tokens += count.token_len
    return out


def _write(path: Path, groups, capacity: int) -> int:
    writer = ShardTarWriter(path / "pretrain-000000.tar")
    for pack_id, group in enumerate(groups):
        subs, parts = [], []
        for index, (messages, media, count) in enumerate(group):
            renamed = {name: f"m{len(parts) + i:04d}.jpg" for i, name in enumerate(media)}
            msgs = json.loads(json.dumps(messages).replace('"m.jpg"', f'"{renamed.get("m.jpg", "m.jpg")}"'))
            parts += [(renamed[n], data) for n, data in media.items()]
            subs.append(PackedSubSample(id=f"s{pack_id}/{index}", token_len=count.token_len,
                                        media_tokens=count.media_tokens, messages=tuple(msgs)))  # fmt: skip
        pack = PackedSample(pack_id=pack_id, capacity=capacity, split="train", samples=tuple(subs))
        writer.add_sample(pack_key(pack_id), [(JSON_PART, json.dumps(pack.to_json()).encode()), *parts])
    writer.finish()
    return len(groups)


def _fill(samples, capacity: int):
    packs, current, used = [], [], 0
    for sample in samples:
        if used + sample[2].token_len > capacity and current:
            packs.append(current)
            current, used = [], 0
        current.append(sample)
        used += sample[2].token_len
    return packs + ([current] if current else [])


def _time(path: Path, encoder: PackEncoder) -> tuple[int, int, float]:
    start = time.perf_counter()
    n, tokens = 0, 0
    for batch in PackDataset(path, encoder):
        n += 1
        tokens += batch.seq_len
    return n, tokens, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacities", type=int, nargs="+", default=[8192, 32768])
    parser.add_argument("--packs", type=int, default=3, help="packs per capacity")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        proc = build_processor_dir(root / "proc", "qwen2_5_vl")
        config = config_from_dict({"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(proc)}}})
        counter, encoder = TokenCounter.from_config(config), PackEncoder(config)
        print(f"{'C':>6} {'mode':>9} {'items':>6} {'items/s':>9} {'tokens/s':>10} {'samples/s':>10}")
        for capacity in args.capacities:
            samples = _samples(counter, int(capacity * args.packs * 0.97), seed=capacity)
            packs = [p for p in _fill(samples, capacity)]
            for mode, groups in (("packed", packs), ("unpacked", [[s] for p in packs for s in p])):
                out = root / f"{mode}_{capacity}"
                out.mkdir()
                _write(out, groups, capacity)
                n, tokens, seconds = _time(out, encoder)
                n_samples = sum(len(g) for g in groups)
                print(f"{capacity:>6} {mode:>9} {n:>6} {n / seconds:>9.2f} {tokens / seconds:>10.0f} "
                      f"{n_samples / seconds:>10.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
