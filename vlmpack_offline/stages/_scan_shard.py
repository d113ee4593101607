"""Scan one shard: every sample becomes one ``SampleRecord``, counted or dropped with a reason.

Runs inside a worker process (one counter, so one tokenizer, per process)::

    tar ─ iter_samples ─► RawSample ─ parse JSON ─► Conversation ─ check + probe media ─► MediaInfo
                                                                           │
                                 count_many (batched tokenizer) ◄──────────┘ ─► token_len ─► ok

Every media part is checked whole by its own structure before its probe (``media/integrity.py``: a JPEG to
its end-of-image marker, PNG chunks and their CRCs to IEND, ...; ``media/video_integrity.py``: a video
container's sizes), and a video's packets after it against the duration and frame count its header claims;
an audio's probe walks its own packets against its header (``media/audio.py``): a file cut after its header is
a ``truncated_media`` drop here, not a failure in a training worker.
``scan.decode_check`` adds a full decode.

A sample that fails at any step keeps its member locators and gets its drop
reason and error text; the shard goes on. An error nobody foresaw (any exception
while reading, parsing, probing or counting one sample) drops that sample as
``unreadable_sample`` with the exception's type and text, never the whole scan.

A file that cannot be read as an uncompressed tar gets a shard-level reason instead
(``reasons.SHARD_REASONS``: compressed, not a tar, a symlink leading outside the
input, an error while walking it) in its shard row, with the samples it holds that
have no row counted there (``n_unread``); samples read before the failure keep their rows.
Media parts a sample holds but never references are counted per sample
(``unused_media``, a warning: the sample is still packed, without them).

The scan does not apply ``sample.max_token_len``: every countable sample is
``ok`` with its token_len, so a new capacity reruns bucket and plan only.
``bucket`` drops the samples longer than C as ``Reason.OVERLONG``.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from dataclasses import dataclass
from pathlib import Path

from ..config import Config
from ..conversation import Conversation, media_kind_of_part, parse_conversation
from ..deadline import TooSlow, handler, limit
from ..families.media_mix import check_media_kinds
from ..layouts import layouts_unfit
from ..manifest import SampleRecord, ShardRecord, StatusSums, write_shard_part
from ..manifest_parts import sums_of
from ..media import check_container, check_image, check_packets, decode_frames, open_image
from ..reasons import SHARD_REASONS, DropError, Reason
from ..tario import (
    RawSample,
    is_url,
    iter_samples,
    open_source,
    read_range,
    sample_digest,
    shard_problem,
)  # fmt: skip
from ..tokens import AudioMedia, VideoMedia, make_counter
from ._shard_task import ShardTask

__all__ = ["ShardTask", "ShardOutcome", "ShardScanner"]
_BATCH = 256  # samples per tokenizer call


def _batch_seconds(budget: float | None) -> float | None:
    """How long a batch may count before its samples are counted alone: a slow sample then holds the shard
    for at most its budget plus this (a tenth of a typical batch's 0.3 s would be too tight; 10 s at most)."""
    return None if budget is None else min(budget / 4, 10.0)


def _too_slow(item: _Pending, budget: float | None, stage: str) -> None:
    item.status = Reason.TOO_SLOW
    item.error = (f"{stage} took longer than process.max_seconds_per_sample ({budget:g} s); the worker moved on. "
                  "Raise the budget to keep samples like it, or leave it dropped")


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardOutcome:
    shard: ShardRecord  # the shard row
    samples: list[SampleRecord]  # one per sample, in tar order (none in the parts layout: they are in its part)
    seconds: float  # wall time of this shard in the worker
    sums: tuple[StatusSums, ...] | None = None  # parts layout: the part's per-status sums, for the driver to commit


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
    encoder_patches: int = 0  # the vision encoder's patches for the sample's media (cost model)
    encoder_attention: int = 0  # sum of its full-attention blocks' patches**2 (cost model)
    audio_frames: int = 0  # frames the audio encoder's layers run on (cost model)
    audio_attention: int = 0  # sum of its attention windows' frames**2 (cost model)
    unused_media: int = 0  # media parts of the sample that the conversation never references
    sha256: str = ""  # of the members' bytes, when write.check_sources is sha256
    seconds: float = 0.0  # spent reading it (JSON + media probes), counted against its budget


class ShardScanner:
    """Holds the counter of one process and scans shards with it."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.budget = config.process.max_seconds_per_sample  # seconds per sample (deadline.py)
        self.counter = make_counter(config, snapshot=True)  # the tokenizer's snapshot: no torch at start

    def scan(self, task: ShardTask) -> ShardOutcome:
        """The shard's outcome; in the parts layout its rows are written to its part here and only the shard row
        and the part's sums go back to the driver (``manifest_parts.py``)."""
        outcome = self._scan(task)
        if self.config.data.manifest_layout != "parts":
            return outcome
        write_shard_part(self.config.work_dir, task.shard, outcome.samples)
        return dataclasses.replace(outcome, samples=[], sums=sums_of(task.shard, outcome.samples))

    def _scan(self, task: ShardTask) -> ShardOutcome:
        start = time.perf_counter()
        size, mtime_ns = task.stat()
        path = task.path if is_url(task.path) else str(Path(task.path).absolute())
        row = ShardRecord(shard=task.shard, path=path, size=size, mtime_ns=mtime_ns, n_samples=0, source=task.source)
        if task.outside:
            text = f"{task.shard} is a symlink to {task.outside}, outside data.wds_dir: it was not read"
            row = dataclasses.replace(row, status=Reason.SYMLINK_OUTSIDE_INPUT, error=text)
            return ShardOutcome(shard=row, samples=[], seconds=time.perf_counter() - start)
        try:
            problem = shard_problem(task.path)
        except OSError as exc:
            problem = (Reason.UNREADABLE_SHARD, f"cannot read {task.shard}: {exc}", 0)
        if problem is not None:
            reason, text, unread = problem
            row = dataclasses.replace(row, status=reason, error=text, n_unread=unread)
            return ShardOutcome(shard=row, samples=[], seconds=time.perf_counter() - start)
        pending: list[_Pending] = []
        failure = ""
        with handler():  # the budgets' signal handler, once per shard (each sample's budget only arms the timer)
            try:
                self._walk(task, pending)
            except Exception as exc:  # noqa: BLE001 - the shard's failure is a shard-level reason, not the scan's
                failure = f"reading {task.shard} failed after {len(pending)} samples: {type(exc).__name__}: {exc}"
            self._count_ready(pending)
        bad = next((p for p in pending if p.status in SHARD_REASONS), None)
        if failure:
            row = dataclasses.replace(row, status=Reason.UNREADABLE_SHARD, error=failure[:1000])
        elif bad is not None:
            row = dataclasses.replace(row, status=bad.status, error=bad.error)
        row = dataclasses.replace(row, n_samples=len(pending))
        samples = [self._record(task.shard, p, seen_twice=p.status == Reason.DUPLICATE_KEY) for p in pending]
        return ShardOutcome(shard=row, samples=samples, seconds=time.perf_counter() - start)

    def _walk(self, task: ShardTask, pending: list[_Pending]) -> None:
        """Read every sample of the shard into ``pending`` (parsed and probed, not yet counted)."""
        seen: set[str] = set()
        text_key = self.config.data.template_text_key_of(task.shard)  # this shard's source's `texts` key
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
                    started = time.perf_counter()
                    try:
                        with limit(self.budget):
                            self._prepare(item, handle, text_key)
                    except TooSlow:
                        _too_slow(item, self.budget, "reading its JSON and probing its media")
                    except Exception as exc:  # noqa: BLE001 - one sample's failure is that sample's drop
                        _unreadable(item, exc)
                    item.seconds = time.perf_counter() - started
                seen.add(raw.key)

    def _count_ready(self, pending: list[_Pending]) -> None:
        """Count the samples read fine, a batch per tokenizer call; a batch that runs past ``_batch_seconds``
        is counted again one sample at a time, each with what is left of its own budget."""
        ready = [p for p in pending if p.status == "ok"]
        for begin in range(0, len(ready), _BATCH):
            batch = ready[begin : begin + _BATCH]
            try:
                with limit(_batch_seconds(self.budget)):
                    results = self._count(batch)
            except TooSlow:
                results = [self._count_alone(item) for item in batch]
            for item, result in zip(batch, results, strict=True):
                if isinstance(result, DropError):
                    item.status, item.error = result.reason, str(result)
                else:
                    item.token_len, item.media_tokens = result.token_len, result.media_tokens
                    item.encoder_patches, item.encoder_attention = result.encoder_patches, result.encoder_attention
                    item.audio_frames, item.audio_attention = result.audio_frames, result.audio_attention

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

    def _count_alone(self, item: _Pending):
        """``count_many`` of one sample under what is left of its budget; ``too_slow`` past it."""
        try:
            with limit(None if self.budget is None else max(self.budget - item.seconds, 0.001)):
                return self._count([item])[0]
        except TooSlow:
            _too_slow(item, self.budget, "rendering its chat template and counting its tokens")
            return DropError(item.status, item.error)

    def _prepare(self, item: _Pending, handle, text_key: str | None) -> None:
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
                template_text_key=text_key,
            )
            check_media_kinds(self.counter.rules.model_type, (ref.kind for ref in conversation.media))
        except DropError as exc:
            item.status, item.error = exc.reason, str(exc)
            return
        item.conversation = conversation
        referenced = {ref.part for ref in conversation.media}
        item.unused_media = sum(1 for part in media_parts if media_kind_of_part(part) and part not in referenced)
        if self.config.write.check_sources == "sha256":
            item.sha256 = sample_digest(handle, [(m.offset, m.size) for m in raw.members])
        media = []
        try:
            for ref in conversation.media:
                member = raw.part(ref.part)
                data = read_range(handle, member.offset, member.size)
                # the file walked to its end first (media/integrity.py, video_integrity.py): a cut header is cut too
                if ref.kind == "image":
                    check_image(data, part=ref.part)
                elif ref.kind == "video":
                    check_container(data, part=ref.part)  # (an audio's probe walks its own packets: media/audio.py)
                info = self.counter.probe(ref.kind, data, part=ref.part)
                if ref.kind == "video":  # the probe's packets against what its header claims
                    check_packets(_video_media(info).span, part=ref.part)
                if self.config.scan.decode_check:
                    _decode(ref.kind, data, info, part=ref.part)
                media.append(info)
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
            encoder_patches=item.encoder_patches,
            encoder_attention=item.encoder_attention,
            audio_frames=item.audio_frames,
            audio_attention=item.audio_attention,
            n_images=kinds.count("image"),
            n_videos=kinds.count("video"),
            n_audios=kinds.count("audio"),
            members=tuple((m.part, m.offset, m.size) for m in item.raw.members),
            status=item.status,
            error=item.error,
            unused_media=item.unused_media,
            sha256=item.sha256,
            layout_unfit=layouts_unfit(conversation.messages) if conversation and item.status == "ok" else "",
        )


def _video_media(info) -> VideoMedia:
    """A video's probe record: the fast path's own, the slow path's inside its ``RawMedia``."""
    return info if isinstance(info, VideoMedia) else info.video


def _decode(kind: str, data: bytes, info, *, part: str) -> None:
    """``scan.decode_check``: decode the pixels the loader will decode; a failure drops the sample."""
    try:
        if kind == "image":
            with open_image(data, part=part) as image:
                image.load()
        elif kind == "audio":  # every sample, as many as the probe counted (media/audio.py)
            from ..media.audio import check_decodes

            audio = info if isinstance(info, AudioMedia) else info.audio
            check_decodes(data, samples=audio.samples, part=part)
        else:
            sampling = _video_media(info).sampling
            frames = decode_frames(data, sampling, resize=False)
            if len(frames) != len(sampling.frame_indices):
                raise ValueError(f"{len(frames)} of {len(sampling.frame_indices)} sampled frames decode")
            track = getattr(_video_media(info), "audio", None)  # its own audio track (load_audio_from_video)
            if track is not None:
                from ..media.audio import check_decodes

                check_decodes(data, samples=track.samples, part=f"{part} (its audio track)")
    except DropError:
        raise
    except Exception as exc:  # noqa: BLE001 - decoders raise many types on cut or damaged data
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: decoding failed ({type(exc).__name__}: {exc})") from None


def _unreadable(item: _Pending, exc: BaseException) -> None:
    item.status = Reason.UNREADABLE_SAMPLE
    item.error = f"{type(exc).__name__}: {str(exc)[:500]}"


_SCANNER: ShardScanner | None = None


def init_worker(config: Config) -> None:
    """Pool initializer: load the tokenizer once per worker process, then freeze what start-up left (``gc.freeze``).

    Why freeze: every full collection walks all objects the process holds, most of them the tokenizer's and
    transformers' from start-up; a long sample allocates enough to set one off, so its cost grew faster than its
    length (500 to 5,000 turns: 13x CPU, 10.5x frozen; ``benchmarks/bench_turns.py``, ``--no-gc-freeze`` for the
    unfrozen growth). Frozen objects are never walked again, and forked workers share their pages instead of
    copying them. ``scan.run`` unfreezes when its workers are done.

    Only the young generations are collected first (``gc.collect(1)``), as the ``gc.freeze`` docs advise no full
    pass either: a full one walks the whole heap, 0.3 s where the caller holds transformers and torch (a benchmark,
    a notebook), more than a small scan's work; what start-up garbage reached the oldest generation stays frozen
    with it until ``scan.run`` unfreezes."""
    global _SCANNER
    _SCANNER = ShardScanner(config)
    gc.collect(1)
    gc.freeze()


def scan_in_worker(task: ShardTask) -> ShardOutcome:
    assert _SCANNER is not None, "init_worker was not called"
    return _SCANNER.scan(task)
