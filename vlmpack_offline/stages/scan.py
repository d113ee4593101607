"""``vlmpack scan``: WebDataset tars -> ``work_dir/manifest.sqlite`` (+ ``manifest.jsonl``).

::

    discover shards ─► skip shards already in the manifest (resume)
                    ─► process.workers processes, one tokenizer each, one shard per task
                    ─► parent commits each finished shard (Manifest.write_shard)
                    ─► manifest.jsonl rewritten from sqlite, meta "fingerprint" set last

``data.manifest_layout: parts``: each task writes its shard's rows to ``manifest.parts/<shard>.sqlite`` and
returns the shard row and its sums, which the parent commits (``Manifest.commit_part``); ``manifest.jsonl``
only with ``data.manifest_jsonl: true`` (``manifest_parts.py``).

Resume: the manifest records the fingerprint of its inputs (config sections
data/sample/model/video + hashes of the processor directory's files) as
``scan_inputs``. A rerun with the same inputs scans only the shards without a
row (or whose size/mtime changed); other inputs are refused (StaleArtifactError).
``fingerprint`` (what later stages check) is set only when every shard is in.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import glob
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from ..artifacts import atomic_open, fingerprint
from ..config import Config
from ..drop_gate import Losses, gated
from ..errors import ConfigError, ShardError, StaleArtifactError
from ..executor import check_executor, stage_map
from ..families.media_mix import check_group_by
from ..manifest import MANIFEST_SCHEMA_VERSION, Manifest, manifest_path
from ..manifest_parts import part_path, remove_parts
from ..output.layout import check_folder_layout
from ..provenance import changes, stale_message
from ..reasons import Reason
from ..scan_inputs import RESCAN_HINT, manifest_report, scan_inputs_fingerprint, scan_settings
from ..stage_result import StageResult
from ..tario import is_shard_name, is_url
from ._shard_task import ShardTask

# The counting (tokenizer, processor rules, the loader's check, the family module, torch where a count needs it)
# is imported in run() past the up-to-date check: a finished scan's rerun answers without any of it.

__all__ = ["run", "discover_shards", "discover_sources", "manifest_jsonl_path"]


def manifest_jsonl_path(config: Config) -> Path:
    return config.work_dir / "manifest.jsonl"


def _expand(entry: str) -> list[Path]:
    """Files named like shards (``tario.SHARD_SUFFIXES``: plain tars and compressed ones, which get a reason)."""
    if any(ch in entry for ch in "*?["):
        return [Path(p).absolute() for p in sorted(glob.glob(entry, recursive=True)) if is_shard_name(p)]
    path = Path(entry)
    if path.is_dir():
        return sorted(p.absolute() for p in path.rglob("*") if is_shard_name(p.name) and p.is_file())
    if path.is_file():
        return [path.absolute()]
    raise ShardError(f"data.wds_dir entry {entry!r} is not a file, a directory or a glob that matches")


def _outside(path: Path, root: Path) -> str:
    """Where ``path`` leads when a symlink on the way takes it outside ``root`` (a directory entry), else ""."""
    real = path.resolve()
    return "" if real.is_relative_to(root.resolve()) else str(real)


def _discover_urls(entries: list[str]) -> list[ShardTask]:
    """``s3://b/shards/`` (searched recursively), ``s3://b/*.tar`` or a list of URLs, through fsspec."""
    import fsspec

    fs, _ = fsspec.core.url_to_fs(entries[0])
    protocol = entries[0].split("://", 1)[0]
    found: set[str] = set()
    dirs: list[str] = []
    for entry in entries:
        if not entry.startswith(f"{protocol}://"):
            raise ConfigError(f"data.wds_dir mixes {protocol}:// URLs with {entry!r}: use one filesystem")
        inner = fsspec.core.url_to_fs(entry)[1]
        if any(ch in entry for ch in "*?["):
            found.update(p for p in fs.glob(inner) if is_shard_name(p))
        elif fs.isdir(inner):
            found.update(p for p in fs.find(inner) if is_shard_name(p))
            dirs.append(inner.rstrip("/"))
        elif fs.isfile(inner):
            found.add(inner)
        else:
            raise ShardError(f"data.wds_dir entry {entry!r} is not a file, a directory or a glob that matches")
    if not found:
        raise ShardError(f"no .tar shards found in data.wds_dir = {entries!r}")
    paths = sorted(found)
    if len(entries) == 1 and dirs:
        root = dirs[0]
    else:
        root = os.path.commonpath([p.rsplit("/", 1)[0] for p in paths])
    urls = [fs.unstrip_protocol(p) for p in paths]
    return [ShardTask(shard=p[len(root):].lstrip("/"), path=u) for p, u in zip(paths, urls, strict=True)]


def discover_shards(wds_dir: str | list[str]) -> list[ShardTask]:
    """Every file named like a shard under ``wds_dir`` (directory searched recursively, glob, or a list).

    Shard names are paths relative to the common root (the directory itself when
    one directory is given), with ``/`` separators: they prefix every sample id.
    Compressed tars (``.tar.gz``, ``.tgz``, ...) are listed too, so the scan reports them
    instead of skipping them; a symlink in a directory that leads outside it is listed
    with ``outside`` set and never read. URLs (``s3://``, ``gs://``, ``file://``, ...)
    are listed through fsspec and read by byte range.
    """
    entries = wds_dir if isinstance(wds_dir, list) else [wds_dir]
    if not entries or not all(entries):
        raise ConfigError("data.wds_dir is empty: set it to a folder, a glob or a list of .tar files")
    if any(is_url(entry) for entry in entries):
        return _discover_urls(entries)
    paths = sorted({p for entry in entries for p in _expand(entry)})
    if not paths:
        raise ShardError(f"no .tar shards found in data.wds_dir = {wds_dir!r}")
    if len(entries) == 1 and Path(entries[0]).is_dir():
        root = Path(entries[0]).absolute()
        return [
            ShardTask(shard=p.relative_to(root).as_posix(), path=str(p), outside=_outside(p, root)) for p in paths
        ]
    root = Path(os.path.commonpath([str(p.parent) for p in paths]))
    return [ShardTask(shard=p.relative_to(root).as_posix(), path=str(p)) for p in paths]


def discover_sources(config: Config) -> tuple[list[ShardTask], list[str]]:
    """The shards of every source (``data.sources``, else ``data.wds_dir``), and a line per source without any.

    With ``data.sources`` each shard's name is ``<source>/<relpath>``, so ids stay unique across sources;
    a shard listed by two sources is an error naming both. A source with no shard is an error naming it,
    or with ``data.allow_empty_sources`` a line of the summary.
    """
    data = config.data
    if not data.sources:
        return discover_shards(data.wds_dir), []
    tasks: list[ShardTask] = []
    owner: dict[str, str] = {}
    empty: list[str] = []
    for source in data.sources:
        try:
            found = discover_shards(source.wds_dir)
        except ShardError as exc:
            line = f"source {source.name!r}: {exc}".replace("data.wds_dir", "its wds_dir")
            if not data.allow_empty_sources:
                raise ShardError(f"{line} (data.allow_empty_sources: true packs the other sources)") from None
            empty.append(f"warning: {line}; the other sources are packed (data.allow_empty_sources)")
            continue
        for task in found:
            where = str(Path(task.path).resolve()) if not is_url(task.path) else task.path
            if where in owner:
                raise ConfigError(f"sources {owner[where]!r} and {source.name!r} both list the shard {task.path}: "
                                  "each shard belongs to one source (narrow one source's wds_dir)")
            owner[where] = source.name
            tasks.append(dataclasses.replace(task, shard=f"{source.name}/{task.shard}", source=source.name))
    if not tasks:
        raise ShardError("no .tar shards found in any of data.sources")
    return tasks, empty


def _pending(tasks: list[ShardTask], manifest: Manifest, retry_below: float | None = None) -> list[ShardTask]:
    """Shards not in the manifest, changed since, or (parts layout) whose part is gone; with ``retry_below``
    (this run's budget, inf for none), also those holding too_slow samples when it is larger than the budget
    they were dropped under (``_BUDGET_KEY``)."""
    done = {s.shard: s for s in manifest.shards()}
    retry: set[str] = set()
    if retry_below is not None and retry_below > _budget_of(manifest.get_meta(_BUDGET_KEY)):
        retry = {shard for shard, n in manifest.sums(by=("shard",), status=str(Reason.TOO_SLOW)) if n}
    parted = manifest.parted
    pending = []
    for task in tasks:
        record = done.get(task.shard)
        if record is None or (record.size, record.mtime_ns) != task.stat() or task.shard in retry:
            pending.append(task)
        elif parted and not part_path(manifest.path.parent, task.shard).is_file():
            pending.append(task)
    return pending


_BUDGET_KEY = "too_slow_budget"  # manifest meta: the largest budget no too_slow row of the manifest had


def _budget_of(value: str | float | None) -> float:
    """A budget as a number: None / "none" (no budget) is infinite; no meta yet is infinite too (nothing to retry)."""
    return float("inf") if value in (None, "none") else float(value)


def _record_budget(manifest: Manifest, budget: float | None, retried: bool) -> None:
    """After a run: its budget, or the smaller of it and the one before when no too_slow shard was rescanned."""
    before = manifest.get_meta(_BUDGET_KEY)
    value = _budget_of(budget)
    if before is not None and not retried:
        value = min(value, _budget_of(before))
    manifest.set_meta({_BUDGET_KEY: "none" if value == float("inf") else repr(value)})


def _open_manifest(config: Config, settings: dict, tasks: list[ShardTask]) -> Manifest:
    path = manifest_path(config.work_dir)
    manifest = Manifest(path)
    version = manifest.get_meta("schema_version")
    if version is not None and version != str(MANIFEST_SCHEMA_VERSION):
        manifest.close()
        raise StaleArtifactError(
            f"{path} was written by another vlmpack version (manifest schema {version}, this one reads "
            f"{MANIFEST_SCHEMA_VERSION}): {RESCAN_HINT} (it replaces the manifest)"
        )
    inputs_fp = scan_inputs_fingerprint(config, settings)
    recorded = manifest.get_meta("scan_inputs")
    if recorded is not None and recorded != inputs_fp and not manifest.done_shards():
        # a scan that stopped before its first shard (a worker could not start...): start over
        recorded = None
    if recorded is not None and recorded != inputs_fp:
        found = changes(json.loads(manifest.get_meta("scan_settings") or "{}"), settings)
        manifest.close()
        raise StaleArtifactError(stale_message(
            str(path), found,
            f"the counts of the shards already scanned depend on these; {RESCAN_HINT} (it replaces the manifest), "
            "or restore the old values to resume",
            unnamed="a manifest of an older vlmpack, which did not record its settings by name",
        ))
    layout = manifest.get_meta("manifest_layout") or "single"
    if manifest.done_shards() and layout != config.data.manifest_layout:
        manifest.close()
        raise StaleArtifactError(
            f"{path} was scanned with data.manifest_layout: {layout}, the config says "
            f"{config.data.manifest_layout}: {RESCAN_HINT} (it replaces the manifest), or set it back to {layout}"
        )
    names = {t.shard for t in tasks}
    gone = sorted(s for s in manifest.done_shards() if s not in names)
    if gone:
        manifest.close()
        raise StaleArtifactError(
            f"{path} holds shards that are no longer in data.wds_dir ({', '.join(gone[:3])}...): "
            f"{RESCAN_HINT} (it replaces the manifest), or restore the shards"
        )
    if recorded is None:
        manifest.set_meta(
            {
                "schema_version": str(MANIFEST_SCHEMA_VERSION),
                "scan_inputs": inputs_fp,
                "scan_settings": json.dumps(settings, sort_keys=True),
                "processor": config.model.processor_path,
            }
        )
    manifest.set_meta({"manifest_layout": config.data.manifest_layout})
    return manifest


def _remove_manifest(config: Config) -> None:
    """``--rescan``: the scan's own files go (sqlite with its journal files, and the JSONL report), nothing else;
    the later stages' artifacts then no longer match the new manifest and are rebuilt or refused."""
    path = manifest_path(config.work_dir)
    for name in (path.name, path.name + "-journal", path.name + "-wal", path.name + "-shm"):
        (path.parent / name).unlink(missing_ok=True)
    manifest_jsonl_path(config).unlink(missing_ok=True)
    remove_parts(config.work_dir)


def _outcomes(config: Config, tasks: list[ShardTask]):
    """Yield one ShardOutcome per task, as they finish: in this process for one worker, else a pool
    (``process.executor: ray``: one Ray task per shard, whatever the worker count).

    A worker that cannot start (processor folder, tokenizer, a missing package) ends the
    scan with its one-line error, whatever process.workers is (``executor.process_map``).
    """
    if not tasks:  # every shard already in (a rerun after the last commit): no tokenizer to load
        return
    # imported here, before a pool forks: its workers start with the counting modules loaded
    from ._scan_shard import init_worker, scan_in_worker

    workers = min(config.process.workers, len(tasks))
    try:
        yield from stage_map(
            config.process,
            scan_in_worker,
            tasks,
            workers=workers,
            initializer=init_worker,
            initargs=(config,),
            ordered=False,
            stage="scan",
        )
    finally:
        gc.unfreeze()  # init_worker froze this process's start-up objects (one worker, or before the pool forked)


_JSONL_QUERY = ("SELECT id, status, media_type, token_len, media_tokens, encoder_patches, encoder_attention, "
                "audio_frames, audio_attention, error, unused_media FROM samples ORDER BY shard, seq")


def _write_jsonl(manifest: Manifest, path: Path) -> None:
    """One JSON line per sample in (shard, seq) order, from the columns it reports (no sample record built, no
    members parsed), by one encoder (``json.dumps`` with an option builds a new one per call)."""
    encode = json.JSONEncoder(ensure_ascii=False).encode
    with atomic_open(path, "w") as handle:
        for (sample_id, status, media_type, token_len, media_tokens, patches, attention, frames, audio_attention,
             error, unused) in manifest.select_samples(_JSONL_QUERY):  # fmt: skip
            row = {
                "id": sample_id,
                "status": status,
                "media_type": media_type,
                "token_len": token_len,
                "media_tokens": media_tokens,
                "encoder_patches": patches,
                "encoder_attention": attention,
                "audio_frames": frames,
                "audio_attention": audio_attention,
                "reason": None if status == "ok" else status,
                "error": error,
                "unused_media": unused,
            }
            handle.write(encode(row) + "\n")


def _summary(manifest: Manifest, counts: dict[str, int], seconds: float,
             report: Path) -> tuple[list[str], dict[str, int]]:
    ok = manifest.status_counts().get("ok", 0)
    status = manifest.drop_counts()  # unread samples of bad shards included, under the shard's reason
    ((tokens, media, *items),) = manifest.sums(("token_len", "media_tokens", "n_images", "n_videos", "n_audios"),
                                               status="ok")
    bad_shards = [s for s in manifest.shards() if s.status != "ok"]
    unread = sum(s.n_unread for s in bad_shards)
    dropped = sum(status.values())
    ((unused,),) = manifest.sums(("unused_media",))
    counts = {
        **counts,
        "ok": ok,
        "dropped": dropped,
        "samples": ok + dropped,
        "unread": unread,
        "bad_shards": len(bad_shards),
        "unused_media": unused,
        "tokens": tokens,
        "media_tokens": media,
        **dict(zip(("images", "videos", "audios"), items, strict=True)),
    }
    counts.update({f"dropped_{reason}": n for reason, n in status.items()})
    lines = [
        f"samples: {ok + dropped} ({ok} ok, {dropped} dropped, of which {unread} could not be read at all)",
        "dropped by reason: " + (", ".join(f"{r} {n}" for r, n in sorted(status.items())) or "none"),
        f"tokens in ok samples: {tokens} ({media} media: {items[0]} images, {items[1]} videos, {items[2]} audios)",
        f"shards: {counts['shards']} ({counts['shards_scanned']} scanned now, "
        f"{counts['shards'] - counts['shards_scanned'] - counts['shards_left']} already done"
        + (f", {counts['shards_left']} not scanned yet)" if counts["shards_left"] else ")"),
    ]
    if bad_shards:
        lines.append(f"shards with a problem: {len(bad_shards)} (each with its reason in the manifest's shards table)")
        lines += [f"  {s.shard}: {s.status}: {s.error[:200]}" for s in bad_shards[:5]]
    if unused:
        lines.append(
            f"warning: {unused} media parts are in their sample but never referenced (packed without them; "
            f"per sample: unused_media in {report.name})"
        )
    if counts["shards_left"]:
        lines.append(
            "unfinished (--limit-shards): rerun without it to scan the rest; the shards done now are kept"
        )
    if counts["shards_scanned"] and seconds > 0:
        rate = counts["samples_scanned"] / seconds  # two significant digits under 10/s (0.16, not 0)
        lines.append(f"time: {seconds:.1f}s, {rate:{'.0f' if rate >= 10 else '.2g'}} samples/s")
    return lines, counts


def run(config: Config, *, limit_shards: int | None = None, rescan: bool = False) -> StageResult:
    """Scan every shard not yet in the manifest; a finished, unchanged scan is a no-op.

    ``limit_shards``: a trial on the first N shards (sorted by path). They are kept in the
    manifest, which stays unfinished (later stages refuse it) until a run without the limit
    scans the rest. ``rescan``: replace the manifest instead of resuming it (a manifest counted with
    other settings is refused, naming them, until then).
    """
    start = time.perf_counter()
    if limit_shards is not None and limit_shards < 1:
        raise ConfigError(f"--limit-shards must be >= 1, got {limit_shards}")
    check_executor(config.process)  # executor: ray without ray installed: one line, before anything
    check_folder_layout(config)  # the scan must never read the pipeline's own output as input
    listing = functools.cache(lambda: discover_sources(config))  # listed once: a store's listing is not free
    finished = None if rescan else _up_to_date(config, limit_shards, listing)
    if finished is not None:
        return finished
    from ..remote_code import trusted
    from ..tokens.tokenizer_snapshot import prefetch_counting_tokenizer

    # the tokenizer's saved snapshot is read in a thread from here (what of it frees the GIL overlaps the set-up)
    prefetch_counting_tokenizer(config.model.processor_path, trust_remote_code=trusted(config.model.processor_kwargs))
    from ..loader.servable import check_servable
    from ..tokens.factory import counting_path, video_sampling
    from ..tokens.rules import load_model_rules

    # a wrong processor path, model_type or video sampler, said before anything is read
    rules = load_model_rules(config.model, config.video)
    check_servable(rules, config.model.processor_kwargs)  # what the loader cannot serve is refused here, not at step one
    check_group_by(rules.model_type, config.packing.group_by)  # packs its forward refuses: said before reading
    counting = [counting_path(rules), *filter(None, [video_sampling(rules)])]
    tasks, empty_sources = listing()
    selected = tasks[:limit_shards] if limit_shards else tasks
    settings = scan_settings(config)
    jsonl = manifest_jsonl_path(config)
    if rescan:
        _remove_manifest(config)
    with _open_manifest(config, settings, tasks) as manifest:
        # what a rerun that finds the scan finished prints without loading the rules (_up_to_date)
        manifest.set_meta({_COUNTING_KEY: json.dumps({"model_type": rules.model_type, "lines": counting})})
        budget = _budget_of(config.process.max_seconds_per_sample)
        pending = _pending(selected, manifest, budget)
        # every shard with too_slow samples is rescanned under this larger budget (none left out by --limit)
        retried = budget > _budget_of(manifest.get_meta(_BUDGET_KEY)) and len(selected) == len(tasks)
        report_done = jsonl.exists() or not config.data.writes_manifest_jsonl
        if not pending and manifest.get_meta("fingerprint") and report_done:
            return _skipped(config, manifest, len(tasks), counting, empty_sources)
        remove_parts(config.work_dir, only_unfinished=True)  # the temporary files of tasks killed while writing
        manifest.conn.execute("DELETE FROM meta WHERE key = 'fingerprint'")  # unfinished until the end
        manifest.conn.commit()
        scanned = 0
        from tqdm import tqdm

        with tqdm(total=len(pending), desc="scan", unit="shard", disable=None, dynamic_ncols=True) as bar:
            for outcome in _outcomes(config, pending):
                if outcome.sums is None:
                    manifest.write_shard(outcome.shard, outcome.samples)
                else:  # parts layout: the task wrote the rows
                    manifest.commit_part(outcome.shard, outcome.sums)
                scanned += outcome.shard.n_samples
                bar.update(1)
                bar.set_postfix(
                    samples=scanned, samples_per_s=f"{scanned / max(bar.format_dict['elapsed'], 1e-9):.0f}"
                )
        _record_budget(manifest, config.process.max_seconds_per_sample, retried)
        if config.data.writes_manifest_jsonl:
            _write_jsonl(manifest, jsonl)
        else:  # asked not to: an older one would no longer match the rows
            jsonl.unlink(missing_ok=True)
        left = len(_pending(tasks, manifest))
        if not left:
            shard_rows = [(s.shard, s.size, s.mtime_ns, s.n_samples, s.status) for s in manifest.shards()]
            inputs_fp = scan_inputs_fingerprint(config, settings)
            manifest.set_meta({"fingerprint": fingerprint({"inputs": inputs_fp, "shards": shard_rows})})
        seconds = time.perf_counter() - start
        base = {
            "shards": len(tasks),
            "shards_scanned": len(pending),
            "samples_scanned": scanned,
            "shards_left": left,
        }
        lines, counts = _summary(manifest, base, seconds, manifest_report(config))
    return _checked(config, StageResult(stage="scan", summary=[*counting, *lines, *empty_sources], counts=counts,
                                        seconds=seconds))


_COUNTING_KEY = "counting"  # manifest meta: {"model_type", "lines"}: the counting path the scan printed


def _skipped(config: Config, manifest: Manifest, shards: int, counting: list[str], empty: list[str]) -> StageResult:
    """The result of a rerun that finds every shard in and the manifest finished: nothing to do."""
    lines, counts = _summary(
        manifest, {"shards": shards, "shards_scanned": 0, "samples_scanned": 0, "shards_left": 0}, 0,
        manifest_report(config),
    )
    return _checked(config, StageResult(stage="scan", skipped=True, summary=[*counting, *lines, *empty], counts=counts))


def _up_to_date(
    config: Config, limit_shards: int | None, listing: Callable[[], tuple[list[ShardTask], list[str]]]
) -> StageResult | None:
    """The no-op rerun's answer, decided from the config, the manifest's meta and the shards' sizes and times
    before the processor rules, the tokenizer or the loader's check load; None where anything needs the full
    path (no manifest, other settings, a shard new, changed or gone, a too_slow retry, a manifest of an older
    vlmpack without the counting lines), which then decides or refuses as before.

    The processor folder is in the settings by its files' hashes (``scan_inputs.scan_settings``): a changed
    folder is not up to date. ``packing.group_by`` is no scan setting, so it is checked here too. ``listing``:
    ``discover_sources(config)``, made once for this run and the full path after it."""
    path = manifest_path(config.work_dir)
    if not path.is_file() or (config.data.writes_manifest_jsonl and not manifest_jsonl_path(config).exists()):
        return None
    tasks, empty_sources = listing()
    selected = tasks[:limit_shards] if limit_shards else tasks
    with Manifest(path) as manifest:
        keys = ("schema_version", "scan_inputs", "fingerprint", _COUNTING_KEY, "manifest_layout")
        meta = {key: manifest.get_meta(key) for key in keys}
        if meta["schema_version"] != str(MANIFEST_SCHEMA_VERSION) or not meta["fingerprint"] or not meta[_COUNTING_KEY]:
            return None
        if (meta["manifest_layout"] or "single") != config.data.manifest_layout:  # refused on the full path
            return None
        if meta["scan_inputs"] != scan_inputs_fingerprint(config):
            return None
        names = {t.shard for t in tasks}
        if any(s not in names for s in manifest.done_shards()):
            return None
        if _pending(selected, manifest, _budget_of(config.process.max_seconds_per_sample)):
            return None
        counting = json.loads(meta[_COUNTING_KEY])
        check_group_by(counting["model_type"], config.packing.group_by)  # packs its forward refuses: said here too
        return _skipped(config, manifest, len(tasks), counting["lines"], empty_sources)


def _checked(config: Config, result: StageResult) -> StageResult:
    """``result`` with exit code 1 and one line naming the top reasons when too many samples were dropped
    (``drop_gate``: the same gate and line as every later stage).

    Checked after the manifest and its report are written, so the drops can be read; a rerun
    (a no-op) fails the same way until the data or ``scan.max_drop_ratio`` changes.
    """
    counts = result.counts
    losses = Losses(total=counts.get("samples", 0),
                    by_reason={k.removeprefix("dropped_"): n for k, n in counts.items() if k.startswith("dropped_")})
    return gated(result, losses, config.scan.max_drop_ratio, [manifest_report(config)])
