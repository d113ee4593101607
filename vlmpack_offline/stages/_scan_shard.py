"""Scan one shard: every sample becomes one ``SampleRecord``, counted or dropped with a reason.

Runs inside a worker process (one counter, so one tokenizer, per process)::

    tar ─ iter_samples ─► RawSample ─ parse JSON ─► Conversation ─ probe media ─► MediaInfo
                                                                     │
                                 count_many (batched tokenizer) ◄────┘ ─► token_len ─► ok

A sample that fails at any step keeps its member locators and gets its drop
reason and error text; the shard goes on. An error nobody foresaw (any exception
while reading, parsing, probing or counting one sample) drops that sample as
``unreadable_sample`` with the exception's type and text, never the whole scan.

The scan does not apply ``sample.max_token_len``: every countable sample is
``ok`` with its token_len, so a new capacity reruns bucket and plan only.
``bucket`` drops the samples longer than C as ``Reason.OVERLONG``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ..config import Config
from ..conversation import Conversation, parse_conversation
from ..manifest import SampleRecord, ShardRecord
from ..reasons import DropError, Reason
from ..tario import RawSample, is_url, iter_samples, open_source, read_range, source_stat
from ..tokens import make_counter

__all__ = ["ShardTask", "ShardOutcome", "ShardScanner"]
_BATCH = 256  # samples per tokenizer call


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardTask:
    shard: str  # relpath, e.g. "sub/shard-000001.tar"
    path: str  # absolute path


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardOutcome:
    shard: ShardRecord  # the shard row
    samples: list[SampleRecord]  # one per sample, in tar order
    seconds: float  # wall time of this shard in the worker


@dataclass(slots=True, kw_only=True)
class _Pending:
    raw: RawSample  # the tar sample
    seq: int  # its position in the shard
    conversation: Conversation | None = None  # parsed JSON, when it parsed
    media: list | None = None  # probed media, aligned with conversation.media
    status: str = "ok"  # "ok" or a drop reason
    error: str = ""  # error text of a drop
    token_len: int = 0  # counted length
    media_tokens: int = 0  # visual tokens inside token_len


class ShardScanner:
    """Holds the counter of one process and scans shards with it."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.counter = make_counter(config)

    def scan(self, task: ShardTask) -> ShardOutcome:
        start = time.perf_counter()
        size, mtime_ns = source_stat(task.path)
        pending: list[_Pending] = []
        seen: set[str] = set()
        with open_source(task.path) as handle:
            for seq, raw in enumerate(iter_samples(task.path)):
                item = _Pending(raw=raw, seq=seq)
                pending.append(item)
                if raw.problem:
                    item.status, item.error = raw.problem, raw.error
                elif raw.key in seen:
                    item.status = Reason.DUPLICATE_KEY
                    item.error = (
                        f"key {raw.key!r} appears twice in {task.shard} (members are not consecutive)"
                    )
                else:
                    try:
                        self._prepare(item, handle)
                    except Exception as exc:  # noqa: BLE001 - one sample's failure is that sample's drop
                        _unreadable(item, exc)
                seen.add(raw.key)
        ready = [p for p in pending if p.status == "ok"]
        for begin in range(0, len(ready), _BATCH):
            batch = ready[begin : begin + _BATCH]
            for item, result in zip(batch, self._count(batch), strict=True):
                if isinstance(result, DropError):
                    item.status, item.error = result.reason, str(result)
                else:
                    item.token_len, item.media_tokens = result.token_len, result.media_tokens
        truncated = next((p for p in pending if p.status == Reason.TRUNCATED_SHARD), None)
        shard = ShardRecord(
            shard=task.shard,
            path=task.path if is_url(task.path) else str(Path(task.path).resolve()),
            size=size,
            mtime_ns=mtime_ns,
            n_samples=len(pending),
            status=Reason.TRUNCATED_SHARD if truncated else "ok",
            error=truncated.error if truncated else "",
        )
        samples = [self._record(task.shard, p, seen_twice=p.status == Reason.DUPLICATE_KEY) for p in pending]
        return ShardOutcome(shard=shard, samples=samples, seconds=time.perf_counter() - start)

    def _count(self, batch: list[_Pending]) -> list:
        """Counts of a batch; when the batched call fails, each sample alone, so only the bad one drops."""
        try:
            return self.counter.count_many([(p.conversation, p.media) for p in batch])
        except Exception:  # noqa: BLE001
            results = []
            for item in batch:
                try:
                    results.extend(self.counter.count_many([(item.conversation, item.media)]))
                except Exception as exc:  # noqa: BLE001
                    _unreadable(item, exc)
                    results.append(DropError(item.status, item.error))
            return results

    def _prepare(self, item: _Pending, handle) -> None:
        raw = item.raw
        json_member = raw.part("json")
        if json_member is None:
            parts = ", ".join(m.part or m.name for m in raw.members)
            item.status = Reason.BAD_JSON
            item.error = f"sample has no .json part (members: {parts}); every sample needs <key>.json"
            return
        media_parts = [m.part for m in raw.members if m.part != "json"]
        try:
            conversation = parse_conversation(
                read_range(handle, json_member.offset, json_member.size),
                key=raw.key,
                parts=media_parts,
                template_text_key=self.config.data.template_text_key,
            )
        except DropError as exc:
            item.status, item.error = exc.reason, str(exc)
            return
        item.conversation = conversation
        media = []
        try:
            for ref in conversation.media:
                member = raw.part(ref.part)
                media.append(
                    self.counter.probe(
                        ref.kind, read_range(handle, member.offset, member.size), part=ref.part
                    )
                )
        except DropError as exc:
            item.status, item.error = exc.reason, str(exc)
            return
        item.media = media

    @staticmethod
    def _record(shard: str, item: _Pending, *, seen_twice: bool) -> SampleRecord:
        conversation = item.conversation
        kinds = [m.kind for m in conversation.media] if conversation else []
        sample_id = f"{shard}/{item.raw.key}" + (f"#{item.seq}" if seen_twice else "")
        return SampleRecord(
            id=sample_id,
            shard=shard,
            seq=item.seq,
            key=item.raw.key,
            media_type=conversation.media_type if conversation else "unknown",
            token_len=item.token_len,
            media_tokens=item.media_tokens,
            n_images=kinds.count("image"),
            n_videos=kinds.count("video"),
            members=tuple((m.part, m.offset, m.size) for m in item.raw.members),
            status=item.status,
            error=item.error,
        )


def _unreadable(item: _Pending, exc: BaseException) -> None:
    item.status = Reason.UNREADABLE_SAMPLE
    item.error = f"{type(exc).__name__}: {str(exc)[:500]}"


_SCANNER: ShardScanner | None = None


def init_worker(config: Config) -> None:
    """Pool initializer: load the tokenizer once per worker process."""
    global _SCANNER
    _SCANNER = ShardScanner(config)


def scan_in_worker(task: ShardTask) -> ShardOutcome:
    assert _SCANNER is not None, "init_worker was not called"
    return _SCANNER.scan(task)
