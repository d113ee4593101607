"""Benchmark: scan time of one sample against its number of turns, one render vs the prefix renders.

    python benchmarks/bench_turns.py                          # Qwen2.5-VL template, 10 .. 5,000 turns
    python benchmarks/bench_turns.py --family gemma3 --repeats 5
    python benchmarks/bench_turns.py --no-gc-freeze           # the start-up heap left to the collector

One conversation per size (user question, assistant answer, repeated), parsed from its JSON and counted
by the scan's counter (``TokenCounter.count_many``: chat template render, assistant spans, tokenizer),
timed alone in this process after a warm-up (the tokenizer load and the template compile are start-up,
not counted). Two arms in the same run:

* one render: what the scan does now (``tokens/turn_marks.py``: the spans from the one marked render,
  where the template streams its messages);
* prefix renders: the scan before it (``ChatRenderer(one_render=False)``: ``spans.linear_spans`` for more
  than ``FEW_TURNS`` answers, a few renders of the whole conversation).

Reported per size: min / median / max CPU seconds of this process over ``--repeats`` runs of each arm
(other programs sharing the machine do not inflate them as they do wall-clock seconds) and the ratio of the
medians, then the growth of each arm from 500 to 5,000 turns in CPU and in wall-clock seconds (min / median /
max of the per-run ratios; linear growth: 10).

The start-up heap is frozen (``gc.collect(); gc.freeze()``) after start-up, as the scan's workers do
(``stages/_scan_shard.init_worker``); ``--no-gc-freeze`` leaves it to the collector. The cyclic collector's full passes walk every
object the process holds (transformers' modules and the tokenizer: most of them), and a 5,000-turn sample
allocates enough to set one off where a 500-turn one does not; with that heap frozen the growth is the
conversation's own.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens import TokenCounter
from vlmpack_offline.tokens.spans import ChatRenderer

SIZES = (10, 50, 100, 500, 1000, 2000, 5000)


def _sample(turns: int) -> bytes:
    messages = []
    for i in range(turns):
        messages += [{"role": "user", "content": f"Question {i}: what comes after {i}?"},
                     {"role": "assistant", "content": f"{i + 1} comes after {i}."}]  # fmt: skip
    return json.dumps({"messages": messages}).encode()


def _seconds(counter: TokenCounter, raw: bytes, repeats: int) -> tuple[list[float], list[float]]:
    """(CPU seconds, wall-clock seconds) of each of ``repeats`` runs."""
    cpu, wall = [], []
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        conversation = parse_conversation(raw, key="k", parts=[])
        (count,) = counter.count_many([(conversation, [])])
        cpu.append(time.process_time() - started_cpu)
        wall.append(time.perf_counter() - started)
        assert not isinstance(count, Exception), count
    return cpu, wall


def _spread(values: list[float], digits: int = 3) -> str:
    return " / ".join(f"{v:.{digits}f}" for v in (min(values), statistics.median(values), max(values)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="qwen2_5_vl")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-gc-freeze", dest="gc_freeze", action="store_false",
                        help="leave the start-up heap to the collector (the scan's workers freeze it)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_processor_dir(Path(tmp) / "proc", args.family)
        config = config_from_dict({"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}},
                                   "data": {"work_dir": tmp}}, source="bench")
        one = TokenCounter.from_config(config)
        prefix = TokenCounter.from_config(config)
        prefix.chat = ChatRenderer(prefix.chat.template, prefix.chat.special_tokens_map, one_render=False)
        for counter in (one, prefix):
            _seconds(counter, _sample(10), 1)  # warm-up: template compile, tokenizer caches
        if args.gc_freeze:
            gc.collect()
            gc.freeze()
        served = one.chat.turns_many([parse_conversation(_sample(2), key="k", parts=[]).messages])[0] is not None
        print(f"{args.family}: CPU seconds to parse and count one sample, min / median / max of {args.repeats}"
              f"{'' if served else ' (this template is not served by the one render: both arms render prefixes)'}")
        print("| turns | one render | prefix renders | prefix / one (medians) |")
        print("|---|---|---|---|")
        runs: dict[str, dict[int, tuple[list[float], list[float]]]] = {"one": {}, "prefix": {}}
        for turns in SIZES:
            raw = _sample(turns)
            runs["one"][turns] = _seconds(one, raw, args.repeats)
            runs["prefix"][turns] = _seconds(prefix, raw, args.repeats)
            cpu_one, cpu_prefix = runs["one"][turns][0], runs["prefix"][turns][0]
            ratio = statistics.median(cpu_prefix) / statistics.median(cpu_one)
            print(f"| {turns:,} | {_spread(cpu_one)} | {_spread(cpu_prefix)} | {ratio:.1f}x |")
        for arm, name in (("one", "one render"), ("prefix", "prefix renders")):
            for kind, column in (("CPU", 0), ("wall-clock", 1)):
                growth = [b / a for a, b in zip(runs[arm][500][column], runs[arm][5000][column], strict=True)]
                print(f"{name}: growth 500 -> 5,000 turns in {kind} seconds {_spread(growth, 1)}x (10x is linear)")


if __name__ == "__main__":
    main()
