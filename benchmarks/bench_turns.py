"""Benchmark: scan time of one sample against its number of turns, linear span search vs the exact one.

    python benchmarks/bench_turns.py                          # Qwen2.5-VL template, 10 .. 5,000 turns
    python benchmarks/bench_turns.py --family gemma3 --baseline-max 500

One conversation per size (user question, assistant answer, repeated), parsed from its JSON and counted
by the scan's counter (``TokenCounter.count_many``: chat template render, assistant spans, tokenizer),
timed alone in this process after a warm-up (the tokenizer load and the template compile are start-up,
not counted). Two arms in the same run:

* linear: what the scan does now (``spans.linear_spans`` for more than ``FEW_TURNS`` answers);
* exact: the turn-by-turn search alone (``FEW_TURNS`` raised past every size), the scan before this
  change, up to ``--baseline-max`` turns (it grows with the square of the turns: minutes at 5,000).

Reported per size: seconds of each arm and their ratio, then the growth of the linear arm from 500 to
5,000 turns (linear growth: about 10).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens import TokenCounter
from vlmpack_offline.tokens import spans as spans_module

SIZES = (10, 50, 100, 500, 1000, 2000, 5000)


def _sample(turns: int) -> bytes:
    messages = []
    for i in range(turns):
        messages += [{"role": "user", "content": f"Question {i}: what comes after {i}?"},
                     {"role": "assistant", "content": f"{i + 1} comes after {i}."}]  # fmt: skip
    return json.dumps({"messages": messages}).encode()


def _seconds(counter: TokenCounter, raw: bytes, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        conversation = parse_conversation(raw, key="k", parts=[])
        (count,) = counter.count_many([(conversation, [])])
        best = min(best, time.perf_counter() - started)
        assert not isinstance(count, Exception), count
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="qwen2_5_vl")
    parser.add_argument("--baseline-max", type=int, default=1000, help="largest size the exact arm runs")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_processor_dir(Path(tmp) / "proc", args.family)
        config = config_from_dict({"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}},
                                   "data": {"work_dir": tmp}}, source="bench")
        counter = TokenCounter.from_config(config)
        _seconds(counter, _sample(10), 1)  # warm-up: template compile, tokenizer caches
        print(f"{args.family}: seconds to parse and count one sample (best of {args.repeats})")
        print("| turns | linear | exact (before) | exact / linear |")
        print("|---|---|---|---|")
        linear = {}
        few = spans_module.FEW_TURNS
        for turns in SIZES:
            raw = _sample(turns)
            linear[turns] = _seconds(counter, raw, args.repeats)
            exact = None
            if turns <= args.baseline_max:
                spans_module.FEW_TURNS = 10**9
                try:
                    exact = _seconds(counter, raw, 1 if turns >= 500 else args.repeats)
                finally:
                    spans_module.FEW_TURNS = few
            shown = f"{exact:.3f}" if exact is not None else "(not run)"
            ratio = f"{exact / linear[turns]:.1f}x" if exact is not None else ""
            print(f"| {turns:,} | {linear[turns]:.3f} | {shown} | {ratio} |")
        print(f"linear growth 500 -> 5,000 turns: {linear[5000] / linear[500]:.1f}x (10x is linear)")


if __name__ == "__main__":
    main()
