"""The one vocabulary of drop reasons, and the one exception that carries a reason.

Every stage records why a sample (or a whole shard) is not packed with a ``Reason``;
code that finds a problem raises ``DropError(reason, text)`` and the stage that
catches it writes both into the manifest. ``Reason`` is a ``str`` enum, so the
manifest, the JSON reports and the summary hold the plain names below.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Reason", "DropError", "SHARD_REASONS"]


class Reason(StrEnum):
    """Why a sample is not in any pack. Sample-level first, then shard-level."""

    # one sample
    BAD_JSON = "bad_json"  # no .json part, or JSON that does not parse / is hostile
    UNKNOWN_FORMAT = "unknown_format"  # parsed JSON in no layout vlmpack reads
    MISSING_MEDIA = "missing_media"  # a referenced media part is not in the sample
    MEDIA_MISMATCH = "media_mismatch"  # <image>/<video> tags and media lists disagree in count
    CORRUPT_MEDIA = "corrupt_media"  # a media part cannot be read (header, container, or decode_check)
    TRUNCATED_MEDIA = "truncated_media"  # a media part's data ends before its own structure says it does
    UNSUPPORTED_ASPECT = "unsupported_aspect"  # aspect ratio the family's resize refuses
    UNSUPPORTED_MEDIA = "unsupported_media"  # a media kind the model family cannot take
    NO_LABELS = "no_labels"  # nothing to learn: no assistant token under loss.train_on=assistant
    OVERLONG = "overlong"  # longer than sample.max_token_len (applied at bucket)
    LAYOUT_UNFIT = "layout_unfit"  # the published sample.sample_type cannot hold this sample (applied at bucket)
    DUPLICATE_KEY = "duplicate_key"  # the key appears twice in one shard
    BAD_MEMBER_NAME = "bad_member_name"  # a tar member name that is not valid UTF-8
    DUPLICATE_MEMBER = "duplicate_member"  # the same member name twice in one sample (which copy is meant?)
    UNSUPPORTED_MEMBER = "unsupported_member"  # a symlink, device or fifo member, or a hard link to no earlier file
    UNREADABLE_SAMPLE = "unreadable_sample"  # any unforeseen error reading or counting this sample
    TOO_SLOW = "too_slow"  # reading and counting it took longer than process.max_seconds_per_sample
    MEDIA_OUTSIDE_ROOT = "media_outside_root"  # vlmpack convert: a record's media path leaves --media-root
    # a whole shard (its row in the shards table; its samples are counted there)
    TRUNCATED_SHARD = "truncated_shard"  # the tar ends inside a member
    DAMAGED_HEADER = "damaged_header"  # a header fails its checksum; reading resumed at the next valid one
    COMPRESSED_SHARD = "compressed_shard"  # gzip/bzip2/xz/zstd data: vlmpack reads uncompressed tars only
    NOT_A_TAR = "not_a_tar"  # the file does not start with a tar header
    SYMLINK_OUTSIDE_INPUT = "symlink_outside_input"  # a shard symlink that points outside data.wds_dir
    UNREADABLE_SHARD = "unreadable_shard"  # any other error opening or walking the shard


SHARD_REASONS = frozenset(
    {
        Reason.TRUNCATED_SHARD,
        Reason.DAMAGED_HEADER,
        Reason.COMPRESSED_SHARD,
        Reason.NOT_A_TAR,
        Reason.SYMLINK_OUTSIDE_INPUT,
        Reason.UNREADABLE_SHARD,
    }
)


class DropError(ValueError):
    """One sample (or shard) cannot be used; ``reason`` is what the manifest records, the text says why."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = Reason(reason)
