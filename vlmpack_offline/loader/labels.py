"""Labels and loss weights of one sub-sample, built before sub-samples are concatenated.

Labels follow HF's convention: ``labels`` is aligned with ``input_ids`` (NOT
shifted); the model's loss shifts them, so ``logits[t]`` is scored against
``labels[t + 1]``. Worked example for two sub-samples (A = assistant token)::

    input_ids   s0 s1 A2 A3 | t0 A1 A2
    mask         0  0  1  1 |  0  1  1
    labels     -100 -100 A2 A3 | -100 A1 A2      <- labels[0] of every sub-sample is -100
    scored by  logits[1..2 ]     logits[4..5]    <- logits[3] (last of A) would score t0: it is -100

Because every sub-sample's first label is -100 (nothing inside a sub-sample can
predict its first token), the last token of one sub-sample is never trained to
predict the first token of the next: no label crosses a sub-sample boundary, and
HF's summed loss over the pack equals the sum of the sub-samples' own losses.

``loss_weights`` (optional) holds ``1 / n_label_tokens`` of the sub-sample on its
label positions and 0 elsewhere (aligned with ``labels``, shift it the same
way), so ``sum(token_loss * weight) / n_samples`` averages per sample instead of
per token.
"""

from __future__ import annotations

import torch

__all__ = ["IGNORE_INDEX", "sub_sample_labels", "sub_sample_loss_weights", "weighted_loss_sum", "scored_segments"]

IGNORE_INDEX = -100  # HF's ignore_index for cross entropy


def sub_sample_labels(input_ids: torch.Tensor, assistant_mask: torch.Tensor) -> torch.Tensor:
    """``[L]`` labels: the token where ``assistant_mask`` is set (assistant content + its end-of-turn), else -100."""
    labels = torch.where(assistant_mask.bool(), input_ids.long(), torch.full_like(input_ids, IGNORE_INDEX, dtype=torch.long))
    if labels.numel():
        labels[0] = IGNORE_INDEX  # nothing inside this sub-sample predicts its first token
    return labels


def sub_sample_loss_weights(labels: torch.Tensor) -> torch.Tensor:
    """``[L]`` float weights: ``1/n`` on the ``n`` label positions, 0 elsewhere (all 0 when ``n == 0``)."""
    counted = labels != IGNORE_INDEX
    n = int(counted.sum())
    return counted.float() / n if n else torch.zeros(labels.shape, dtype=torch.float32)


def weighted_loss_sum(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """``sum(token_loss * weight)`` over a pack, with HF's shift (``logits[t]`` scores ``labels[t + 1]``):
    divided by ``scored_segments`` it is the mean over sub-samples of each one's mean token loss.
    ``weights=None``: every scored token weighs 1 (the summed token loss, for a per-token mean)."""
    token_loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=IGNORE_INDEX, reduction="none"
    )
    return token_loss.sum() if weights is None else (token_loss * weights[:, 1:].flatten()).sum()


def scored_segments(labels: torch.Tensor, cu_seqlens: torch.Tensor) -> int:
    """Sub-samples of a pack (``labels [1, S]``, boundaries ``cu_seqlens``) with at least one scored label."""
    scored = labels[0] != IGNORE_INDEX
    bounds = cu_seqlens.tolist()
    return sum(bool(scored[a:b].any()) for a, b in zip(bounds[:-1], bounds[1:], strict=True))
