"""The write stage hands shards to its writers early, and still makes exactly ``assign_shards``' shards.

``stages.write`` closes a shard that holds ``maxcount`` packs as soon as its last pack is
described (when the plan's next pack is of the same split and no other split has a shard
open), instead of when that next pack arrives. The shards, their numbers, packs, positions
and sizes must be those of ``output.shard_plan.assign_shards`` for any plan and limits.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vlmpack_offline.output.shard_plan import assign_shards
from vlmpack_offline.stages.write import _EagerAssigner


@settings(max_examples=400, deadline=None)
@given(
    splits=st.lists(st.sampled_from(["train", "train", "train", "val"]), min_size=0, max_size=60),
    sizes=st.lists(st.integers(min_value=512, max_value=40_000), min_size=60, max_size=60),
    maxcount=st.integers(min_value=1, max_value=6),
    maxsize=st.sampled_from([10_240, 50_000, 120_000, 10**12]),
)
def test_eager_closing_gives_the_shards_of_assign_shards(splits, sizes, maxcount, maxsize):
    expected = assign_shards(splits, sizes[: len(splits)], maxcount=maxcount, maxsize=maxsize)
    eager = _EagerAssigner(splits, maxcount=maxcount, maxsize=maxsize)
    jobs = [job for position in range(len(splits)) for job in eager.add(position, sizes[position])]
    jobs += eager.finish()
    assert jobs == expected


def test_a_full_shard_is_handed_over_with_its_last_pack():
    eager = _EagerAssigner(["train"] * 5, maxcount=2, maxsize=10**12)
    handed = [[job.index for job in eager.add(position, 1024)] for position in range(5)]
    assert handed == [[], [0], [], [1], []]  # ShardAssigner alone: [], [], [0], [], [1]
    assert [job.index for job in eager.finish()] == [2]
