"""A real slow sample for the time-budget tests (not a test module).

A long conversation is labelled from its one render (``tokens/turn_marks.py``) or in a few renders
(``spans.linear_spans``) unless its text holds the private-use characters both mark their renders with
(crawled text has them: icon fonts, custom emoji); then the exact turn-by-turn search runs, two renders of a growing prefix per turn, more than
quadratic in the turns: 1,000 turns took 31 s and 2,000 took 250 s on a busy 2-core machine, so a
3,000-turn sample needs many minutes, hundreds of times the tests' budgets of seconds. Only the budget
ends it in a test's time, so a test needs no clock to see that it did; the samples around it take
milliseconds.
"""

from __future__ import annotations

from pathlib import Path

from vlmpack_offline.synthetic.shards import SyntheticSample, write_shard

SLOW_TURNS = 3000


def _chat(turns: int, key: str, note: str = "") -> SyntheticSample:
    messages = []
    for i in range(turns):
        messages += [{"role": "user", "content": f"{key} question {i}?{note if i == 0 else ''}"},
                     {"role": "assistant", "content": f"{i}."}]  # fmt: skip
    return SyntheticSample(key=key, json={"messages": messages})


def slow_sample() -> SyntheticSample:
    """The sample ``slow``: ``SLOW_TURNS`` turns kept on the turn-by-turn search by private-use characters."""
    return _chat(SLOW_TURNS, "slow", note=" \ue000\ue002")


def shard_with_one_slow_sample(path: Path) -> None:
    """Samples ``before`` (2 turns), ``slow`` and ``after`` (3 turns), in that order."""
    write_shard(path, [_chat(2, "before"), slow_sample(), _chat(3, "after")])
