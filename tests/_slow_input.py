"""A real slow sample for the time-budget tests (not a test module).

A long conversation is labelled in a few renders (``spans.linear_spans``) unless its text holds the
private-use characters that search marks contents with (crawled text has them: icon fonts, custom
emoji); then the exact turn-by-turn search runs, two renders of a growing prefix per turn, quadratic
in the turns. A 3,000-turn sample takes about a minute that way; the samples around it, milliseconds.
"""

from __future__ import annotations

from pathlib import Path

from vlmpack_offline.synthetic.shards import SyntheticSample, write_shard

SLOW_TURNS = 3000


def shard_with_one_slow_sample(path: Path) -> None:
    def chat(turns: int, key: str, note: str = "") -> SyntheticSample:
        messages = []
        for i in range(turns):
            messages += [{"role": "user", "content": f"{key} question {i}?{note if i == 0 else ''}"},
                         {"role": "assistant", "content": f"{i}."}]  # fmt: skip
        return SyntheticSample(key=key, json={"messages": messages})

    write_shard(path, [chat(2, "before"), chat(SLOW_TURNS, "slow", note=" \ue000"), chat(3, "after")])
