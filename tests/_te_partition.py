"""TransformerEngine's THD context-parallel partition on the CPU, for megatron-core's own slicer.

megatron-core's ``get_thd_batch_on_this_cp_rank`` (``megatron/core/utils.py``) asks TE for the token
indices of one CP rank (``transformer_engine_torch.thd_get_partitioned_indices``), a CUDA kernel
(``transformer_engine/common/fused_attn/context_parallel.cu``). TE's documented rule: every padded
sub-sequence is cut in ``2 * cp`` equal chunks and rank r holds chunks r and ``2 * cp - 1 - r``, in
order. That is megatron-core's own load-balanced split of one sequence (``get_batch_on_this_cp_rank``),
so the substitute applies that function to each padded sub-sequence alone: megatron-core's code, not
vlmpack's ``cp_slice`` (which the tests compare against it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from unittest import mock

import torch
from megatron.core import parallel_state
from megatron.core import utils as mcore_utils


def core_rank_indices(cu_seqlens_padded: torch.Tensor, cp_size: int, cp_rank: int) -> torch.Tensor:
    """The token indices CP rank ``cp_rank`` holds: megatron-core's split of each padded sub-sequence."""
    parts = []
    with (mock.patch.object(parallel_state, "get_context_parallel_world_size", lambda: cp_size),
          mock.patch.object(parallel_state, "get_context_parallel_rank", lambda: cp_rank)):
        for start, end in zip(cu_seqlens_padded[:-1].tolist(), cu_seqlens_padded[1:].tolist(), strict=True):
            piece = mcore_utils.get_batch_on_this_cp_rank({"tokens": torch.arange(start, end)[None]})
            parts.append(piece["tokens"][0])
    return torch.cat(parts)


def _thd_get_partitioned_indices(cu_seqlens_padded: torch.Tensor, total_tokens: int, cp_size: int,
                                 cp_rank: int) -> torch.Tensor:
    assert int(cu_seqlens_padded[-1]) == total_tokens, "TE partitions exactly the padded tokens"
    return core_rank_indices(cu_seqlens_padded, cp_size, cp_rank)


@contextmanager
def te_partition_on_cpu() -> Iterator[None]:
    """Within: megatron-core's ``get_thd_batch_on_this_cp_rank`` runs on the CPU, TE's kernel supplied as above."""
    with (mock.patch.object(mcore_utils, "tex", SimpleNamespace(thd_get_partitioned_indices=_thd_get_partitioned_indices)),
          mock.patch.object(mcore_utils, "is_te_min_version", lambda *_: True)):
        yield
