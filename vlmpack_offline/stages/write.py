"""Stage 4: the plan -> ``packed_wds_dir/pretrain-%06d.tar`` (+ ``.tar.idx``) and ``.nv-meta/``.

::

    (a published layout, sample.sample_type: every planned sample's JSON is checked first, in parallel,
     and a sample the layout cannot hold stops the stage before the output folder is touched)
    pack_plan.npz ──describe (parallel, chunks of 64 packs)──> .nv-meta/vlmpack-build/packs-*.bin
                    (JSON part bytes + media byte ranges per pack; gives each pack's tar size;
                     JSON header + raw bytes, bound to the run's fingerprint: output/scratch.py)
                    ──> shard assignment (pure function of plan + sizes, streamed: output/shard_plan.py)
                    ──writer threads, one shard each, as soon as it closes──> pretrain-%06d.tar.tmp -> rename
                    (process.executor: ray: describe = one Ray task per chunk, writer = one per shard;
                     the driver alone keeps the marker and writes .nv-meta, so the bytes are the same)
                    ──> .nv-meta/{dataset.yaml, split.yaml, .info.json, .info.yaml, vlmpack.json, vlmpack_write.json}

``vlmpack.json`` records the model/video/sample settings the plan was made with and a
hash of the processor files (``packed_settings.py``), for ``PackEncoder.from_packed_dir``.
The config must still be the scan's: when the manifest records the scan's inputs
fingerprint, a config (or processor directory) that no longer gives it is refused.

Resume and staleness, through ``.nv-meta/vlmpack_write.json`` = {fingerprint, complete, shards}
(``shards`` = N: runs of this fingerprint may have started ``pretrain-000000.tar`` .. ``pretrain-{N-1}``;
a shard's number is recorded before its file is created. The count is raised ahead of need,
by up to ``_RESERVE`` shards at a time, because each update is an fsync that waits for the
shard data already in flight: a run updates it a few times, not once per shard; a rebuild
deletes those names, missing ones included):

* same fingerprint, complete  -> no-op;
* same fingerprint, not complete (killed) -> only shards that are not recorded, or whose
  ``.tar`` / ``.tar.idx`` are missing or not of their expected size, are written (leftover
  ``.tmp`` files are overwritten); the result is byte-identical to an uninterrupted run;
* other fingerprint (new plan or other write/packed_wds/sample_type settings) -> the old
  output is REBUILT: the shards its marker lists (``.tar``, ``.tar.idx``, their ``.tmp``),
  our scratch files and our ``.nv-meta`` files are removed, then everything is written again.
  Nothing else is deleted: ``pretrain-000000.tar.orig`` or a user's notes stay;
* no marker, but files named as our shards or ``.nv-meta`` files -> refused (not ours).

``output/layout.py`` refuses a ``packed_wds_dir`` that overlaps ``wds_dir`` or ``work_dir``.
The fingerprint covers the plan's fingerprint, ``write``, ``packed_wds``,
``sample.sample_type``/``max_token_len``, ``data.template_text_key``, the recorded settings
(``vlmpack.json``) and ``model`` / ``video`` when token ids are stored; not
``process.workers``, which never changes a byte. Shards are fsynced once, all together,
before the marker says complete. Nothing read back from ``packed_wds_dir`` is executed.
Nothing is written outside ``data.packed_wds_dir`` (and, for a URL, its staging folder in ``work_dir``).

A URL ``packed_wds_dir`` (``s3://``, ``gs://``, ``msc://``): the same steps run in a local staging folder
(``output/object_store.py``); each writer uploads its shard (index first) once whole and deletes it locally
(also when the upload fails: the first failure ends the stage, no queued shard starts),
the marker and ``.nv-meta`` live under the prefix, "written" means listed at the expected sizes, and the
marker says complete only after one listing shows every shard and ``.nv-meta`` file.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from itertools import islice
from pathlib import Path

from ..artifacts import atomic_write_text, fingerprint
from ..config import Config, section_fingerprint_payload
from ..errors import ConfigError, LayoutError, PlanError, ShardError, StaleArtifactError
from ..executor import check_executor, stage_map
from ..layouts import Layout, layout_for
from ..manifest import Manifest, SampleRecord, manifest_path
from ..output.energon_meta import (
    INFO_FILES,
    META_DIR,
    run_energon_prepare,
    write_dataset_yaml,
    write_info_json,
    write_split_yaml,
)
from ..output.layout import check_folder_layout
from ..output.object_store import ObjectStoreOutput, object_store_output
from ..output.pack_builder import Materializer, SourceFiles, build_pack, layout_json_bytes
from ..output.scratch import SCRATCH_DIR, Described, chunk_path, clear_scratch, load_chunk, save_chunk
from ..output.shard_plan import SHARD_NAME, ShardAssigner, ShardJob
from ..output.tar_writer import ShardTarWriter, fsync_files, idx_path_for, member_bytes_in_tar, shard_is_done
from ..packed_format import IDS_PART, JSON_PART, LABELS_RULE, PACK_FORMAT, VLMPACK_JSON_PART, pack_key
from ..packed_settings import SETTINGS_NAME, WRITE_MARKER, packed_settings, write_packed_settings
from ..plan_file import SPLITS, Pack, PlanArrays, plan_path, read_plan, read_plan_arrays, read_plan_meta
from ..stage_result import StageResult
from ..tario import open_source, sample_digest, source_stat
from ._freshness import check_upstream
from ._ok_samples import ok_id_store, remove_id_store
from .bucket import closed_gate, read_bins_meta

__all__ = ["MARKER_NAME", "run", "write_fingerprint", "check_sources"]

MARKER_NAME = WRITE_MARKER
_OUR_META = ("dataset.yaml", "split.yaml", *INFO_FILES, SETTINGS_NAME, MARKER_NAME)
_SIZE_CHUNK = 64  # packs per describe task (and per scratch file)
# what .nv-meta holds; raised when it changes, so a finished folder is rewritten (2: energon's own
# CrudeWebdataset instead of vlmpack's class, and .info.yaml)
ENERGON_META_VERSION = 2
_RESERVE = 256  # most shard numbers one marker update records ahead of the shard being started
_SHARD_FILE = re.compile(r"(pretrain-\d{6}\.tar)(?:\.idx)?(?:\.tmp)?")


def write_fingerprint(config: Config, plan_fingerprint: str, settings: dict | None = None) -> str:
    """What the output depends on; ``settings`` is the ``vlmpack.json`` document (built when not given)."""
    settings = packed_settings(config, plan_fingerprint) if settings is None else settings
    payload = section_fingerprint_payload(config, "write", "packed_wds")
    payload.update(
        plan=plan_fingerprint,
        settings=fingerprint(settings),
        format=PACK_FORMAT,
        energon_meta=ENERGON_META_VERSION,
        sample_type=config.sample.sample_type,
        capacity=config.sample.max_token_len,
        template_text_key=[config.data.template_text_key, *(s.template_text_key for s in config.data.sources)],
    )
    if config.write.store_token_ids:  # ids.npy holds the learned-token mask: a new labels rule rewrites it
        payload.update(section_fingerprint_payload(config, "model", "video"), labels_rule=LABELS_RULE)
    return fingerprint(payload)


def check_sources(manifest: Manifest) -> dict[str, str]:
    """Shard relpath -> path for every source shard with ok samples; refuse one that changed since the scan."""
    used = {shard for shard, n in manifest.sums(by=("shard",), status="ok") if n}
    paths: dict[str, str] = {}
    for shard in manifest.shards():
        if shard.shard not in used:
            continue
        try:
            size, mtime_ns = source_stat(shard.path)  # a path, or a URL read through fsspec
        except FileNotFoundError:
            raise ShardError(f"source shard {shard.path} is gone since the scan: restore it or rerun `vlmpack scan`") from None
        if size != shard.size or mtime_ns != shard.mtime_ns:
            raise ShardError(
                f"source shard {shard.path} changed since the scan (size {shard.size} -> {size}, "
                f"mtime_ns {shard.mtime_ns} -> {mtime_ns}): rerun `vlmpack scan`, `bucket`, `plan`"
            )
        paths[shard.shard] = shard.path
    return paths


def check_digests(records: dict[str, SampleRecord], shard_paths: dict[str, str]) -> None:
    """``write.check_sources: sha256``: each sample's bytes must hash as they did at scan time."""
    by_shard: dict[str, list[SampleRecord]] = {}
    for record in records.values():
        by_shard.setdefault(record.shard, []).append(record)
    for shard, rows in sorted(by_shard.items()):
        with open_source(shard_paths[shard]) as handle:
            for record in sorted(rows, key=lambda r: r.seq):
                if not record.sha256:
                    raise ShardError(
                        f"sample {record.id!r} has no sha256 in the manifest: rerun `vlmpack scan` with "
                        "write.check_sources: sha256"
                    )
                found = sample_digest(handle, [(offset, size) for _, offset, size in record.members])
                if found != record.sha256:
                    raise ShardError(
                        f"source shard {shard_paths[shard]} changed since the scan: the bytes of sample "
                        f"{record.id!r} no longer hash as scanned (write.check_sources: sha256): "
                        "rerun `vlmpack scan`, `bucket`, `plan`"
                    )


def _out_dir(config: Config) -> Path:
    """Where this stage writes: ``packed_wds_dir``, or for a URL its local staging folder (output/object_store.py)."""
    store = object_store_output(config.data.packed_wds_dir, config.work_dir)
    return store.staging if store else config.packed_wds_dir


def _read_marker(out_dir: Path, store: ObjectStoreOutput | None = None) -> dict | None:
    if store is not None:
        text = store.read_text(f"{META_DIR}/{MARKER_NAME}")
        return json.loads(text) if text is not None else None
    path = out_dir / META_DIR / MARKER_NAME
    return json.loads(path.read_text()) if path.is_file() else None


def _write_marker(
    out_dir: Path, fp: str, *, complete: bool, shards: int, counts: dict | None = None,
    store: ObjectStoreOutput | None = None,
) -> None:
    """``shards``: output shards 0 .. shards-1 were started by this fingerprint's runs (what a rebuild deletes)."""
    body = {"fingerprint": fp, "complete": complete, "shards": shards, **({"counts": counts} if counts else {})}
    text = json.dumps(body, indent=2, sort_keys=True) + "\n"
    if store is not None:
        store.put_text(f"{META_DIR}/{MARKER_NAME}", text)
    else:
        atomic_write_text(out_dir / META_DIR / MARKER_NAME, text)


def _shard_files(out_dir: Path, name: str) -> list[Path]:
    """A shard and what its writer leaves: ``.tar``, ``.tar.idx`` and their ``.tmp``."""
    return [out_dir / (name + suffix) for suffix in ("", ".idx", ".tmp", ".idx.tmp")]


def _shard_names_present(out_dir: Path) -> list[str]:
    """Files named exactly as this stage names its shards (not ``pretrain-000000.tar.orig`` and the like)."""
    names = {m.group(1) for p in out_dir.glob("pretrain-*") if (m := _SHARD_FILE.fullmatch(p.name)) and p.is_file()}
    return sorted(names)


def _recorded_shards(marker: dict | None) -> int:
    shards = (marker or {}).get("shards", 0)
    return shards if type(shards) is int and shards >= 0 else 0


def _clear_output(out_dir: Path, marker: dict, store: ObjectStoreOutput | None = None) -> None:
    """Delete what an earlier write recorded in its marker (a marker from before the count: files named as ours);
    under a URL, the same names under its prefix."""
    if "shards" in marker:
        names = [SHARD_NAME.format(i) for i in range(_recorded_shards(marker))]
    elif store is not None:
        names = sorted({m.group(1) for n in store.listing() if (m := _SHARD_FILE.fullmatch(n))})
    else:
        names = _shard_names_present(out_dir)
    if store is not None:  # the marker goes last: a kill in between leaves it to say what is still ours
        store.remove([f for name in names for f in (name, name + ".idx")]
                     + [f"{META_DIR}/{n}" for n in _OUR_META if n != MARKER_NAME] + [f"{META_DIR}/{MARKER_NAME}"])
    for name in names:
        for path in _shard_files(out_dir, name):
            path.unlink(missing_ok=True)
    clear_scratch(out_dir)
    for name in _OUR_META:
        (out_dir / META_DIR / name).unlink(missing_ok=True)


_MATERIALIZERS: dict[str, Materializer] = {}  # one tokenizer per worker process, by config fingerprint


def _materializer(config: Config) -> Materializer | None:
    """``TokenCounter.materialize`` over media probed from bytes, or None without store_token_ids."""
    if not config.write.store_token_ids:
        return None
    key = fingerprint(section_fingerprint_payload(config, "model", "video"))
    if key not in _MATERIALIZERS:
        from ..tokens import make_counter

        counter = make_counter(config)
        if not hasattr(counter, "materialize"):
            raise ConfigError(
                f"{config.source}: write.store_token_ids needs the fast token path (Qwen-VL families or text-only); "
                f"model {config.model.model_type!r} has none: set write.store_token_ids: false"
            )

        def materialize(conversation, media_bytes):
            infos = [counter.probe(ref.kind, data, part=ref.part) for ref, data in zip(conversation.media, media_bytes, strict=True)]
            done = counter.materialize(conversation, infos)
            return done.input_ids, done.assistant_mask

        _MATERIALIZERS[key] = materialize
    return _MATERIALIZERS[key]


# -- worker side ----------------------------------------------------------------------------
def _records_for(config: Config, packs: Iterable[Pack]) -> dict:
    with Manifest(manifest_path(config.work_dir)) as manifest:
        return manifest.get_samples(sample_id for pack in packs for sample_id in pack.sample_ids)


def _pack_members(config: Config, pack: Pack, records: dict, files: SourceFiles, materialize: Materializer | None):
    return build_pack(
        materialize=materialize,
        pack_id=pack.pack_id,
        split=pack.split,
        capacity=config.sample.max_token_len,
        sample_ids=pack.sample_ids,
        records=records,
        files=files,
        text_key_of=config.data.template_text_key_of,
        sample_type=config.sample.sample_type,
    )


def _pack_parts(layout: Layout, json_bytes: bytes) -> list[tuple[str, bytes]]:
    """The JSON members of a pack: the layout's ``json``, and vlmpack's pack as ``vlmpack.json`` beside a
    published layout's (layouts/base.py)."""
    parts = [(JSON_PART, layout_json_bytes(layout, json_bytes))]
    return [*parts, (VLMPACK_JSON_PART, json_bytes)] if layout.published else parts


def _describe_packs(
    args: tuple[Config, str, dict[str, str], int, tuple[Pack, ...]]
) -> tuple[list[int], list[tuple[str, str]]]:
    """Build the JSON part and media locators of a chunk of packs; keep them in a scratch file.

    Returns the bytes each pack takes inside a tar, and (sample id, why) for every sub-sample the
    layout cannot hold (then the chunk is not kept: the stage refuses before writing). Reads only the
    source JSON members; the write pass then copies media without touching the manifest or parsing again.
    """
    config, fp, shard_paths, chunk_no, packs = args
    path = chunk_path(_out_dir(config), chunk_no)
    pack_ids = [pack.pack_id for pack in packs]
    if config.write.check_sources == "sha256":  # every time, also when the chunk was described before
        check_digests(_records_for(config, packs), shard_paths)
    # left by an interrupted run of this fingerprint, else None (never executed: output/scratch.py)
    described = load_chunk(path, fingerprint=fp, chunk_no=chunk_no, pack_ids=pack_ids)
    if described is None:
        records = _records_for(config, packs)
        files = SourceFiles(shard_paths)
        refusals: list[tuple[str, str]] = []
        try:
            described = []
            for pack in packs:
                built = _pack_members(config, pack, records, files, _materializer(config))
                refusals.extend(built.refusals)
                media = tuple((m.part, m.shard, m.offset, m.size) for m in built.media)
                described.append((built.json_bytes, media, built.ids_npy))
        finally:
            files.close()
        if refusals:
            return [], refusals
        save_chunk(path, fingerprint=fp, chunk_no=chunk_no, pack_ids=pack_ids, described=described)
    layout = layout_for(config.sample.sample_type)
    return [
        sum(member_bytes_in_tar(len(data)) for _, data in _pack_parts(layout, json_bytes))
        + sum(member_bytes_in_tar(m[3]) for m in media)
        + (member_bytes_in_tar(len(ids_npy)) if ids_npy is not None else 0)
        for json_bytes, media, ids_npy in described
    ], []


def _chunk_ids(n_packs: int, job: ShardJob) -> dict[int, list[int]]:
    """The pack ids of every scratch chunk ``job`` reads (what its task needs of the plan; ids are positions)."""
    chunks = sorted({position // _SIZE_CHUNK for position in job.positions})
    return {c: list(range(c * _SIZE_CHUNK, min((c + 1) * _SIZE_CHUNK, n_packs))) for c in chunks}


def _chunk_for_writing(config: Config, fp: str, pack_ids: list[int], chunk_no: int) -> list[Described]:
    path = chunk_path(_out_dir(config), chunk_no)
    described = load_chunk(path, fingerprint=fp, chunk_no=chunk_no, pack_ids=pack_ids)
    if described is None:
        raise ShardError(f"{path} changed while `vlmpack write` ran: another process writes to "
                         f"{config.packed_wds_dir}? Run one write at a time; rerun to resume")
    return described


def _write_shard(
    config: Config, fp: str, shard_paths: dict[str, str], job: tuple[ShardJob, dict[int, list[int]]]
) -> tuple[str, int, int]:
    """Write one output shard from the described packs of its scratch chunks (``_chunk_ids``)."""
    job, chunk_ids = job
    files = SourceFiles(shard_paths)
    store = object_store_output(config.data.packed_wds_dir, config.work_dir)
    writer = ShardTarWriter(_out_dir(config) / job.name)
    layout = layout_for(config.sample.sample_type)
    loaded: dict[int, list] = {}
    try:
        for position in job.positions:
            chunk_no = position // _SIZE_CHUNK
            if chunk_no not in loaded:
                loaded = {chunk_no: _chunk_for_writing(config, fp, chunk_ids[chunk_no], chunk_no)}
            json_bytes, media, ids_npy = loaded[chunk_no][position % _SIZE_CHUNK]
            members: list = _pack_parts(layout, json_bytes)
            members.extend((part, files.range(shard, offset, size)) for part, shard, offset, size in media)
            if ids_npy is not None:
                members.append((IDS_PART, ids_npy))
            writer.add_sample(pack_key(position), members)
            files.settle()  # the pack's source ranges are copied: their files may be closed
        size = writer.bytes_written
        writer.finish()
    except BaseException:
        writer.abort()
        raise
    finally:
        files.close()
    if store is not None:  # the index first: a listing that shows the tar shows a shard whose files are both up
        staged = _out_dir(config) / job.name
        try:
            store.upload(idx_path_for(staged), job.name + ".idx")
            store.upload(staged, job.name)
        except BaseException:  # the staging folder keeps no failed shard: the rerun writes it again from scratch
            for path in (staged, idx_path_for(staged)):
                path.unlink(missing_ok=True)
            raise
    return job.name, job.n_packs, size


def _described_sizes(
    config: Config, chunks: Iterable[tuple], *, n_chunks: int
) -> Iterator[tuple[list[int], list[tuple[str, str]]]]:
    """``_describe_packs`` over the chunks in plan order: in ``workers`` forked processes (one at
    ``workers: 1``, so this process's writer threads never wait on the describing for the GIL; in
    this process when there is a single chunk), or one Ray task per chunk (``process.executor: ray``).

    The pool forks its processes at the first submit, before any writer thread exists; a worker
    killed from outside ends the stage with one line (``executor.WorkerDiedError``).
    """
    yield from _map_chunks(config, _describe_packs, chunks, n_chunks=n_chunks, stage="write-describe")


def _map_chunks(config: Config, fn, chunks: Iterable[tuple], *, n_chunks: int, stage: str) -> Iterator:
    """``fn`` over chunks of packs in plan order, in ``process.workers`` processes (this one for a single chunk)."""
    yield from stage_map(config.process, fn, chunks, workers=min(config.process.workers, n_chunks), ordered=True,
                         stage=stage, own_process=n_chunks > 1)  # fmt: skip


def _shard_writers(config: Config, shared: tuple):
    """Where shards are written: threads here, or one Ray task per output shard (tar to .tmp, renamed).

    Either way ``submit(job).result()`` gives (name, packs, bytes) back to this driver, which alone
    keeps the marker.
    """
    if config.process.executor == "ray":
        from ..ray_executor import RayTaskPool

        return RayTaskPool(_write_shard, shared, workers=config.process.workers,
                           address=config.process.ray_address, stage="write",
                           wait_for_cpu_s=config.process.ray_wait_for_cpu_s)  # fmt: skip
    return _ThreadWriters(shared, max(1, config.process.workers))


class _Abandoned(Exception):
    """A queued shard not started because an earlier one failed (never the error the stage reports)."""


class _ThreadWriters(ThreadPoolExecutor):
    """Writing is mostly ``pread``/``write`` system calls that release the GIL: threads suffice here.

    After the first failure no queued shard starts (a thread freed by the failure would otherwise take
    the next one at once), and leaving the ``with`` drops the queue: only shards already in flight finish.
    """

    def __init__(self, shared: tuple, workers: int) -> None:
        super().__init__(max_workers=workers, thread_name_prefix="vlmpack-write")
        self._shared = shared
        self._failed = threading.Event()

    def submit(self, job):  # type: ignore[override]
        return super().submit(self._write, job)

    @property
    def failed(self) -> bool:
        return self._failed.is_set()

    def _write(self, job):
        if self._failed.is_set():
            raise _Abandoned
        try:
            return _write_shard(*self._shared, job)
        except BaseException:
            self._failed.set()
            raise

    def __exit__(self, *exc) -> bool | None:
        self.shutdown(wait=True, cancel_futures=exc[0] is not None)
        return False


class _EagerAssigner:
    """``ShardAssigner`` that hands a shard over as soon as its last pack is known, not one pack later.

    ``ShardAssigner.add`` closes a full shard when the next pack of its split arrives, so
    writing a shard would wait for the next describe chunk. Knowing the plan, this closes a
    shard holding ``maxcount`` packs at once when the plan's next pack is of the same split and
    no other split has a shard open: exactly when that next ``add`` would close it, with
    nothing able to close in between, so the shards, their numbers and their packs are the
    ones ``assign_shards`` gives (tests/test_write_stage_assigner.py).
    """

    def __init__(self, splits: Sequence[str], *, maxcount: int, maxsize: int) -> None:
        self._splits = splits  # each plan position's split
        self._maxcount = maxcount
        self._inner = ShardAssigner(maxcount=maxcount, maxsize=maxsize)
        self._open: dict[str, int] = {}  # packs in each split's open shard

    def add(self, position: int, size: int) -> list[ShardJob]:
        split = self._splits[position]
        closed = self._inner.add(split, position, size)
        for job in closed:
            self._open[job.split] -= job.n_packs
        self._open[split] = self._open.get(split, 0) + 1
        following = self._splits[position + 1] if position + 1 < len(self._splits) else None
        if (
            self._open[split] >= self._maxcount
            and following == split
            and not any(n for other, n in self._open.items() if other != split)
        ):
            closed += self._inner.finish()  # closes only this split's shard: the others are empty
            self._open[split] = 0
        return closed

    def finish(self) -> list[ShardJob]:
        self._open.clear()
        return self._inner.finish()


def _reserve_through(needed: int) -> int:
    """The marker's count when shards 0 .. needed-1 must be in it: ahead by ``needed`` (at least 8,
    at most ``_RESERVE``), so a run updates its marker a few times, not once per shard."""
    return needed + min(max(needed, 8), _RESERVE)


def _describe_and_write(
    config: Config, fp: str, shard_paths: dict[str, str], plan: PlanArrays, recorded: int, reserved: int,
    store: ObjectStoreOutput | None = None, uploaded: dict[str, int] | None = None,
) -> tuple[list[ShardJob], int]:
    """Describe packs in plan order and write each shard as soon as its last pack is described.

    Writing runs on threads (or Ray tasks, ``_shard_writers``): it is mostly ``pread``/``write`` system calls that release
    the GIL, so it overlaps the describing. A shard's name goes into the marker's
    ``shards`` count (``reserved`` ahead, ``_reserve_through``) before its file is created; a
    shard counts as already written only when the marker of an earlier run recorded it
    (``recorded``) and its files have their exact sizes (under a URL: in the listing ``uploaded``, taken at the
    start). Returns (all shards, shards written).

    The plan stays in its arrays: ``Pack`` records (with their sample ids) exist only for the chunks
    being described, streamed from ``read_plan``.
    """
    out_dir = _out_dir(config)
    packs = read_plan(config.work_dir, plan, ids_on_disk=_ids_on_disk(config))
    chunks = (
        (config, fp, shard_paths, first // _SIZE_CHUNK, tuple(islice(packs, _SIZE_CHUNK)))
        for first in range(0, plan.n_packs, _SIZE_CHUNK)
    )
    splits = _SplitsOf(plan)
    assigner = _EagerAssigner(splits, maxcount=config.packed_wds.maxcount, maxsize=config.packed_wds.maxsize)
    jobs: list[ShardJob] = []
    started = [reserved]  # shards 0 .. started-1 are in the marker
    kept_before = 0  # shards an earlier run uploaded, kept

    def stop_at_a_failure(writers, futures: list) -> None:
        """The first failed shard ends the stage (threads): nothing more is submitted, the queue is dropped."""
        if not getattr(writers, "failed", False):
            return
        writers.shutdown(wait=True, cancel_futures=True)  # the queue dropped; the shards in flight end (or fail)
        done = [f for f in futures if not f.cancelled()]
        errors = [exc for f in done if (exc := f.exception()) is not None and not isinstance(exc, _Abandoned)]
        _raise_first(errors[0], store, kept=kept_before + sum(1 for f in done if f.exception() is None))

    with _shard_writers(config, (config, fp, shard_paths)) as writers, \
            contextlib.closing(_described_sizes(config, chunks, n_chunks=-(-plan.n_packs // _SIZE_CHUNK))) as sizes_of:
        futures = []

        def submit(ready: list[ShardJob]) -> None:  # runs on this thread only
            nonlocal kept_before
            for job in ready:
                stop_at_a_failure(writers, futures)
                jobs.append(job)
                done = job.index < recorded and (  # kept only if an earlier run recorded it
                    _uploaded_whole(uploaded or {}, job) if store is not None
                    else shard_is_done(out_dir / job.name, tar_bytes=job.tar_bytes, n_samples=job.n_packs)
                )
                kept_before += done
                if not done:
                    if job.index >= started[0]:
                        started[0] = _reserve_through(job.index + 1)
                        _write_marker(out_dir, fp, complete=False, shards=started[0], store=store)
                    futures.append(writers.submit((job, _chunk_ids(plan.n_packs, job))))

        position = 0
        for sizes, refusals in sizes_of:
            if refusals:  # _check_layout_holds ran first: only a source changed since then gets here
                _refuse(config, refusals)
            for size in sizes:
                submit(assigner.add(position, size))
                position += 1
        submit(assigner.finish())
        if isinstance(writers, _ThreadWriters):  # a Ray task's error comes with its result, in order
            wait(futures, return_when=FIRST_EXCEPTION)
            stop_at_a_failure(writers, futures)
        written = [future.result() for future in futures]
    return jobs, len(written)


def _raise_first(exc: BaseException, store: ObjectStoreOutput | None, *, kept: int) -> None:
    """Re-raise a writer's error; under a URL say whether shards already up are kept for the rerun."""
    if store is not None and isinstance(exc, ShardError):
        kept_line = (f"; the {kept} shards already uploaded are kept and the rerun uploads only the missing ones"
                     if kept else "")
        raise ShardError(f"{exc}{kept_line}") from None
    raise exc


def _uploaded_whole(listing: dict[str, int], job: ShardJob) -> bool:
    """A shard's ``.tar`` and ``.tar.idx`` listed under the prefix with their exact sizes (an object exists only
    whole: a killed multipart upload leaves none)."""
    return listing.get(job.name) == job.tar_bytes and listing.get(job.name + ".idx") == 8 * (job.n_packs + 1)


def _layout_refusals(args: tuple[Config, dict[str, str], tuple[Pack, ...]]) -> list[tuple[str, str]]:
    """(sample id, why) for each planned sub-sample of these packs the layout cannot hold (reads their JSON)."""
    config, shard_paths, packs = args
    records = _records_for(config, packs)
    files = SourceFiles(shard_paths)
    try:  # no materializer: the refusals need the conversations only
        return [r for pack in packs for r in _pack_members(config, pack, records, files, None).refusals]
    finally:
        files.close()


def _check_layout_holds(config: Config, shard_paths: dict[str, str], plan: PlanArrays) -> None:
    """A published layout must hold every planned sample: checked over the whole plan (the JSON members
    only) before the output folder is touched, so a refusal deletes and writes nothing."""
    packs = read_plan(config.work_dir, plan, ids_on_disk=_ids_on_disk(config))
    chunks = ((config, shard_paths, tuple(islice(packs, _SIZE_CHUNK))) for _ in range(0, plan.n_packs, _SIZE_CHUNK))
    n_chunks = -(-plan.n_packs // _SIZE_CHUNK)
    refusals = [r for chunk in _map_chunks(config, _layout_refusals, chunks, n_chunks=n_chunks, stage="write-check")
                for r in chunk]  # fmt: skip
    if refusals:
        _refuse(config, refusals)


REFUSED_NAME = "layout_refused.jsonl"  # in work_dir: every sample the layout refused, with why


def _refuse(config: Config, refusals: list[tuple[str, str]]) -> None:
    """A ``LayoutError`` with each reason's count and an example; every refused sample listed in
    ``work_dir/layout_refused.jsonl`` (``{"id", "reason", "sample_type"}`` per line), so it can be filtered out."""
    layout = layout_for(config.sample.sample_type)
    listing = config.work_dir / REFUSED_NAME
    atomic_write_text(listing, "".join(
        json.dumps({"id": sample_id, "reason": why, "sample_type": layout.name}, ensure_ascii=False) + "\n"
        for sample_id, why in refusals))  # fmt: skip
    by_reason = Counter(why for _, why in refusals)
    first = {why: sample_id for sample_id, why in reversed(refusals)}
    lines = [f"  {n} with {why} (e.g. {first[why]})" for why, n in by_reason.most_common()]
    others = [name for name in ("packed_chat_mix", "vlmpack_packed") if name != layout.name]
    raise LayoutError(
        f"{config.source}: sample.sample_type {layout.name} holds {layout.holds}; {len(refusals)} of the planned "
        f"samples cannot be written in it without loss (nothing was written or removed):\n" + "\n".join(lines) + "\n"
        f"  every one is listed in {listing}. bucket drops such samples as layout_unfit from what the scan "
        "recorded, so the manifest did not record these (not made by this vlmpack's scan): rerun `vlmpack scan "
        f"--rescan`, bucket and plan, or use sample.sample_type: {' or '.join(others)} for such data "
        "(vlmpack_packed holds every sample; docs/switch.md)"
    )


# -- driver ----------------------------------------------------------------------------------
def _refuse_foreign_output(out_dir: Path, listing: dict[str, int] | None = None, url: str = "") -> None:
    """Without our marker, refuse a folder (or, given its ``listing``, a prefix) holding files this stage would
    overwrite."""
    ours = ("dataset.yaml", "split.yaml", *INFO_FILES, SETTINGS_NAME)
    if listing is not None:
        names = sorted({m.group(1) for n in listing if (m := _SHARD_FILE.fullmatch(n))})
        meta = [n for n in ours if f"{META_DIR}/{n}" in listing]
    else:
        names = _shard_names_present(out_dir)
        meta = [n for n in ours if (out_dir / META_DIR / n).exists()]
    if names or meta:
        found = ", ".join(names[:3] + [f"{META_DIR}/{n}" for n in meta])
        where, what = (url, "objects") if url else (out_dir, "files")
        raise StaleArtifactError(
            f"{where} holds {what} vlmpack did not record writing ({found}): "
            f"move them away or point data.packed_wds_dir at an empty {'prefix' if url else 'folder'}"
        )


_UPLOADED_META = ("dataset.yaml", "split.yaml", *INFO_FILES, SETTINGS_NAME)  # the marker goes up last, alone


def _upload_meta(store: ObjectStoreOutput, staging: Path, jobs: list[ShardJob]) -> None:
    """Put ``.nv-meta`` under the prefix, then check one listing holds every shard whole and every ``.nv-meta``
    file: only then may the marker say complete."""
    for name in _UPLOADED_META:
        store.upload(staging / META_DIR / name, f"{META_DIR}/{name}")
    listing = store.listing()
    missing = [job.name for job in jobs if not _uploaded_whole(listing, job)]
    missing += [f"{META_DIR}/{n}" for n in _UPLOADED_META if f"{META_DIR}/{n}" not in listing]
    if missing:
        raise ShardError(
            f"{store.url}: after uploading, the listing lacks {', '.join(missing[:3])}"
            f"{f' and {len(missing) - 3} more' if len(missing) > 3 else ''} (another process deletes there, or the "
            "store lists late): the dataset is not marked complete; rerun `vlmpack write` to upload them again"
        )


def _clear_staging(staging: Path) -> None:
    """Remove the staging folder's files by the names this stage gives them, then the folders if empty."""
    for path in staging.glob("pretrain-*"):
        if _SHARD_FILE.fullmatch(path.name):
            path.unlink(missing_ok=True)
    for name in _OUR_META:
        (staging / META_DIR / name).unlink(missing_ok=True)
    for folder in (staging / META_DIR / SCRATCH_DIR, staging / META_DIR, staging, staging.parent):
        try:
            folder.rmdir()
        except OSError:  # missing, or someone else's file is in there: leave it
            pass


class _SplitsOf(Sequence):
    """Each plan position's split name, read from the plan's int8 array (no per-pack objects)."""

    def __init__(self, plan: PlanArrays) -> None:
        self._codes = plan.split

    def __len__(self) -> int:
        return len(self._codes)

    def __getitem__(self, position):  # type: ignore[override]
        return SPLITS[self._codes[position]]


def _ids_on_disk(config: Config) -> bool:
    """Past ``packing.partition_samples`` ok samples (bins/meta.json's count) the packs' ids come from the id
    store ``work_dir/ok-ids`` (``plan_file.read_plan``), so this driver holds no billion ids (issue 37)."""
    return int((read_bins_meta(config) or {}).get("n_ok", 0)) > config.packing.partition_samples


def _load_plan(config: Config) -> tuple[dict, PlanArrays]:
    meta = read_plan_meta(config.work_dir)
    if meta is None or not plan_path(config.work_dir).is_file():
        raise PlanError(f"no finished plan in {config.work_dir}: run `vlmpack plan --config {config.source}` first")
    if not meta.get("fingerprint"):
        raise PlanError(f"{config.work_dir}/pack_plan.meta.json has no fingerprint: rerun `vlmpack plan`")
    return meta, read_plan_arrays(config.work_dir)


def run(config: Config) -> StageResult:
    started = time.perf_counter()
    if not config.data.packed_wds_dir:
        raise ConfigError(f"{config.source}: data.packed_wds_dir is not set")
    store = object_store_output(config.data.packed_wds_dir, config.work_dir)
    out_dir = _out_dir(config)  # local: packed_wds_dir itself, or the staging folder of a URL
    shown = store.url if store else out_dir
    if store is not None and config.write.energon_prepare:
        raise ConfigError(
            f"{config.source}: write.energon_prepare builds energon's index.sqlite from local tars; with "
            f"data.packed_wds_dir {store.url!r} set it to false (energon loads the output without it)"
        )
    check_executor(config.process)  # executor: ray without ray installed: one line, before anything
    check_folder_layout(config)
    if closed := closed_gate(config):  # bucket closed the drop gate (and plan said so): nothing is written
        return StageResult(stage="write", summary=[closed], exit_code=1)
    meta, plan = _load_plan(config)
    check_upstream(config, "write")  # manifest, bins and plan are this config's (before out_dir is touched)
    settings = packed_settings(config, meta["fingerprint"], meta.get("schedule"), meta.get("mixture"))
    fp = write_fingerprint(config, meta["fingerprint"], settings)
    marker = _read_marker(out_dir, store)
    if marker and marker.get("fingerprint") == fp and marker.get("complete"):
        c = marker.get("counts", {})
        summary = [f"{c.get('packs', '?')} packs ({c.get('samples', '?')} samples) in {c.get('shards', '?')} shards -> {shown}"]
        return StageResult(stage="write", skipped=True, summary=summary, counts=c, seconds=time.perf_counter() - started)
    with Manifest(manifest_path(config.work_dir)) as manifest:
        shard_paths = check_sources(manifest)
        # media items of the samples the plan drew from (the packs hold at most these): a 0 tells the loader it
        # needs no video reader, a trainer that no rank waits on an audio tower (packed_settings.may_hold)
        (media,) = manifest.sums(("n_images", "n_videos", "n_audios"), status="ok")
    if _ids_on_disk(config):  # written (or found current) here, before any describe or write task starts
        ok_id_store(config.work_dir)
    else:  # one left by a larger manifest's write: gigabytes nothing reads
        remove_id_store(config.work_dir)
    if layout_for(config.sample.sample_type).published:
        _check_layout_holds(config, shard_paths, plan)  # before the old output is cleared
    (config.work_dir / REFUSED_NAME).unlink(missing_ok=True)  # a listing of an earlier refusal no longer holds
    rebuilt = False
    listing = store.listing() if store is not None else None  # one listing: what a resume keeps, what is foreign
    if marker and marker.get("fingerprint") != fp:
        _clear_output(out_dir, marker, store)
        rebuilt = True
        listing = {} if store is not None else None
    elif marker is None:
        _refuse_foreign_output(out_dir, listing, store.url if store else "")
    recorded = _recorded_shards(marker) if not rebuilt else 0
    _materializer(config)  # fail early on a bad tokenizer setup, before any output
    (out_dir / META_DIR).mkdir(parents=True, exist_ok=True)
    reserved = _reserve_through(recorded)  # names for the first shards, recorded before any describing
    _write_marker(out_dir, fp, complete=False, shards=reserved, store=store)

    jobs, n_written = _describe_and_write(config, fp, shard_paths, plan, recorded, reserved, store, listing)
    if store is None:
        fsync_files([out_dir / name for job in jobs for name in (job.name, job.name + ".idx")])
    clear_scratch(out_dir)

    split_parts: dict[str, list[str]] = {}
    for job in jobs:
        split_parts.setdefault(job.split, []).append(job.name)
    split_parts.setdefault("train", [])
    write_dataset_yaml(out_dir, config.sample.sample_type)
    write_split_yaml(out_dir, split_parts)
    write_info_json(out_dir, {job.name: job.n_packs for job in jobs})
    write_packed_settings(out_dir, settings)
    if config.write.energon_prepare:
        run_energon_prepare(out_dir, split_parts, config.process.workers)
    if store is not None:
        _upload_meta(store, out_dir, jobs)
    counts = {
        "packs": plan.n_packs,
        "samples": int(plan.pack_offsets[-1]) if plan.n_packs else 0,
        "shards": len(jobs),
        "shards_written": n_written,
        # a shard is whole at exactly job.tar_bytes (shard_is_done / _uploaded_whole): under a URL the listing said so
        "bytes": sum(job.tar_bytes if store else (out_dir / job.name).stat().st_size for job in jobs),
        **{kind: int(n) for kind, n in zip(("images", "videos", "audios"), media, strict=True)},
    }
    stable = {k: v for k, v in counts.items() if k != "shards_written"}  # the marker must not depend on resumes
    _write_marker(out_dir, fp, complete=True, shards=len(jobs), counts=stable, store=store)
    if store is not None:
        _clear_staging(out_dir)
    seconds = time.perf_counter() - started
    summary = [
        f"{counts['packs']} packs ({counts['samples']} samples) in {counts['shards']} shards, "
        f"{counts['bytes'] / 1e6:.1f} MB -> {shown}",
        f"wrote {n_written} shards" + (f", kept {len(jobs) - n_written} from an interrupted run" if n_written < len(jobs) else "")
        + (" (previous output was stale and was rebuilt)" if rebuilt else ""),
        "splits: " + ", ".join(f"{name} {len(files)} shards" for name, files in split_parts.items()),
    ]
    return StageResult(stage="write", summary=summary, counts=counts, seconds=seconds)
