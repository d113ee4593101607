"""Audio facts read from the container, and the decode the loader hands the feature extractor.

An audio item's tokens are a function of one number: its length in samples at the feature extractor's
sampling rate, after the loader decodes it to mono and resamples it. The scan reads the stream's own
length at its native rate (``probe_audio``) and maps it with ``resampled_length``; the loader decodes and
resamples (``decode_audio``) to exactly that length, so the two cannot drift.
"""

from __future__ import annotations

__all__ = ["resampled_length"]


def resampled_length(samples: int, rate: int, target: int) -> int:
    """The length of ``samples`` samples at ``rate`` Hz resampled to ``target`` Hz: ``ceil(samples * target /
    rate)``, librosa's convention (``librosa.resample`` fixes its output to this length), which the loader's
    decode keeps whatever the resampler's own filter delay gives (swresample's varies by a sample)."""
    if rate <= 0 or target <= 0:
        raise ValueError(f"sampling rates must be positive, got {rate} -> {target}")
    return samples if rate == target else -(-samples * target // rate)
