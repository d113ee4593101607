"""Typed, validated configuration: parsed from YAML once, then passed around frozen.

The key names of ``data``, ``sample``, ``model``, ``packed_wds`` and ``process`` are
those of the published offline-packing tool vlmpack replaces, so its configs load
as they are. ``video``, ``packing``, ``parallel``, ``split``, ``write``, ``loss`` and ``scan`` are ours
(``parallel`` takes Megatron's own key names).
Unknown keys and wrongly typed values are errors naming the file and the key.
``configs/config.yaml`` is a commented example; docs/config.md, the reference, is generated from
the comment beside each field here (``config_reference.py``): a field without one fails the tests.

The published tool's other keys (``_published.py`` holds the table) are mapped to
ours where there is an equivalent (``data.packed_json_dir`` -> ``data.work_dir``,
``model_type: kimi-k2.5`` -> ``kimi_k25``, ``log.level``) and otherwise accepted with
one notice each, logged once, saying why the key has no effect here.

Relative paths: inside a config file they are relative to the file's folder; in
``--set`` they are relative to the current directory (where the command runs).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ._published import PATH_KEYS, translate_published
from .errors import ConfigError
from .packing.alignment import Alignment

__all__ = [
    "CONFIG_SCHEMA_VERSION",
    "Config",
    "DataConfig",
    "SampleConfig",
    "ModelConfig",
    "PackedWdsConfig",
    "ProcessConfig",
    "VideoConfig",
    "PackingConfig",
    "ParallelConfig",
    "PlanConfig",
    "SourceConfig",
    "SplitConfig",
    "WriteConfig",
    "LossConfig",
    "ScanConfig",
    "load_config",
    "config_from_dict",
    "section_fingerprint_payload",
]

CONFIG_SCHEMA_VERSION = 1
DEFAULT_SOURCE = "default"  # the one source of a config with data.wds_dir and no data.sources
MAX_BUDGET = 1e7  # seconds: process.max_seconds_per_sample at most (the interval timer's range; 115 days)
MIN_PARTITION = 1_000  # packing.partition_samples at least: smaller partitions would each leave part-filled packs

_FROZEN = dict(frozen=True, slots=True, kw_only=True)
log = logging.getLogger(__name__)


@dataclass(**_FROZEN)
class SourceConfig:
    """One data set of a mixture (``data.sources``, docs/mixtures.md): its shards and how much of it a plan uses.

    At most one of ``weight`` / ``repeat`` / ``count``; none means every sample once (``repeat: 1``).
    """

    name: str = ""  # unique; prefixes the source's sample ids ("<name>/<shard>/<key>") and names it in every report
    wds_dir: str | list[str] = ""  # its shards: a directory (searched recursively), a glob, or a list of tar paths
    template_text_key: str | None = None  # this source's `texts` key, where it differs from data.template_text_key
    # its share of the weighted part of the mixture (weights are relative; that part is as large as its sources
    # hold, by data.mix_by): up-sampled by repeating samples, down-sampled by leaving samples out (seeded)
    weight: float | None = None
    repeat: float | None = None  # uses per epoch: 2.5 = every sample twice plus a seeded half of them once more
    count: int | None = None  # exactly this many samples (or tokens, by data.mix_by) per epoch (ms-swift's `name#N`)


@dataclass(**_FROZEN)
class DataConfig:
    input_format: Literal["wds"] = "wds"  # only WebDataset tar shards are read
    wds_dir: str | list[str] = ""  # a directory (searched recursively), a glob, or a list of tar paths
    template_text_key: str | None = None  # JSON key of the published tool's `texts` layout, if used
    work_dir: str = ""  # where manifest.sqlite, bins/, pack_plan.npz and stats land
    packed_wds_dir: str = ""  # where pretrain-*.tar and .nv-meta/ are written: a path, or s3:// gs:// msc://
    # a mixture of named sources instead of wds_dir (docs/mixtures.md); their weights / repeat / count are applied
    # by bucket and plan, so changing them reuses the scan
    sources: list[SourceConfig] = field(default_factory=list)
    mix_by: Literal["samples", "tokens"] = "samples"  # what weights, counts and shares measure
    # a source whose every sample was dropped: an error naming it, or (true) a warning and the rest packed
    allow_empty_sources: bool = False
    # where the scan's rows go (docs/layout.md): single, one manifest.sqlite the driver writes (one machine); parts,
    # each scan task writes its shard's rows to work_dir/manifest.parts/<shard>.sqlite and the driver commits only
    # the shard's record and sums (a cluster: no row passes through the driver). Changing it needs a rescan
    manifest_layout: Literal["single", "parts"] = "single"
    # manifest.jsonl, one line per sample (a report; no stage reads it): true writes it after every scan, false
    # never; unset writes it in the single layout only (at a billion rows it is hundreds of GB)
    manifest_jsonl: bool | None = None

    @property
    def writes_manifest_jsonl(self) -> bool:
        """``manifest_jsonl``, or unset: written in the single layout only."""
        return self.manifest_layout == "single" if self.manifest_jsonl is None else self.manifest_jsonl

    @property
    def source_list(self) -> tuple[SourceConfig, ...]:
        """The sources to scan: ``sources``, else ``wds_dir`` as one source named ``default``."""
        if self.sources:
            return tuple(self.sources)
        return (SourceConfig(name=DEFAULT_SOURCE, wds_dir=self.wds_dir, template_text_key=self.template_text_key),)

    def template_text_key_of(self, shard: str) -> str | None:
        """The ``texts`` key of the source a shard (its manifest name) belongs to."""
        if not self.sources:
            return self.template_text_key
        name = shard.split("/", 1)[0]
        for source in self.sources:
            if source.name == name:
                return source.template_text_key or self.template_text_key
        return self.template_text_key


@dataclass(**_FROZEN)
class SampleConfig:
    max_token_len: int = 8192  # pack capacity C; a longer sample is dropped as `overlong`
    # the packed layout, written as energon's subflavor in .nv-meta/dataset.yaml: vlmpack's own, or one of the
    # published offline-packing tool's for its trainer (docs/format.md, docs/switch.md)
    sample_type: Literal[
        "vlmpack_packed", "packed_chat_mix", "packed_multi_mix_qa", "packed_captioning", "packed_vqa"
    ] = "vlmpack_packed"


@dataclass(**_FROZEN)
class ModelConfig:
    model_type: str | None = None  # HF name (qwen2_vl, qwen2_5_vl, qwen3_vl, ...); read from the processor dir if absent
    # how the processor folder is loaded: AutoProcessor (media + text), or AutoTokenizer (text-only data)
    processor_loader: Literal["auto_processor", "auto_tokenizer"] = "auto_processor"
    # passed to from_pretrained; a folder's own code (auto_map) runs only with trust_remote_code: true
    processor_kwargs: dict[str, Any] = field(default_factory=dict)
    # extra variables for the chat template (e.g. Kimi-K2.5's {thinking: false}), used by scan and loader alike
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def processor_path(self) -> str:
        path = self.processor_kwargs.get("pretrained_model_name_or_path")
        if not path:
            raise ConfigError(
                "model.processor_kwargs.pretrained_model_name_or_path is not set: "
                "point it at a local processor/tokenizer directory"
            )
        return str(path)


@dataclass(**_FROZEN)
class PackedWdsConfig:
    maxcount: int = 10000  # packs per output tar at most
    maxsize: int = 3_000_000_000  # bytes per output tar at most (a single larger pack still gets its own tar)


@dataclass(**_FROZEN)
class ProcessConfig:
    workers: int = 1  # processes for scan and write (one tokenizer per process); Ray: CPUs of a local cluster
    executor: Literal["local", "ray"] = "local"  # local: processes here; ray: one task per shard (ray_executor.py)
    ray_address: str | None = None  # Ray cluster to join ("auto", "host:port"); null: env RAY_ADDRESS, else a local one
    # Ray: how long the driver waits while the cluster has no CPU to run its tasks (every worker node gone, or an
    # autoscaler not yet started one) before it stops with one line; a rerun resumes. null: wait for ever
    ray_wait_for_cpu_s: float | None = 600.0
    # a sample that takes longer to read and count is dropped as too_slow and the worker moves on (machine-dependent:
    # the one exception to byte-identical artifacts; not in the scan's fingerprint: a rerun with a larger budget
    # rescans the shards that have too_slow samples); null: no budget
    max_seconds_per_sample: float | None = 120.0


@dataclass(**_FROZEN)
class VideoConfig:
    """Frame sampling shared by scan and loader (qwen-vl-utils semantics).

    ``None`` = not set here: the processor folder's video settings, else the family's own recipe
    (``tokens/rules.py`` resolves them; e.g. per-frame pixels 128*28*28 for Qwen2.5-VL, 128*32*32 for Qwen3-VL).
    """

    fps: float | None = None  # frames sampled per second of video (recipe: 2.0)
    min_frames: int | None = None  # lower bound on sampled frames (recipe: 4)
    max_frames: int | None = None  # upper bound on sampled frames (recipe: 768)
    min_pixels: int | None = None  # per-frame lower pixel bound after resize (recipe: 128 * factor**2)
    max_pixels: int | None = None  # per-frame upper pixel bound after resize (recipe: 768 * factor**2; qwen_vl_utils caps a larger value there, as fetch_video does)
    total_pixels: int | None = None  # budget over all sampled frames (recipe: 128000 * factor**2 * 0.9)
    # qwen_vl_utils: the recipe above; hf_processor: Qwen3VLVideoProcessor's own sampling, where min/max_pixels
    # bound frames * height * width (its size.shortest_edge / longest_edge) and total_pixels is refused (unused).
    # null: hf_processor for a Qwen3-VL folder with video processor settings, else qwen_vl_utils
    sampler: Literal["qwen_vl_utils", "hf_processor"] | None = None
    # hf_processor only: cap each frame's pixels as qwen-vl-utils does (transformers' Qwen3-VL video processor
    # cap_pixels_per_frame: per frame min(max_video_tokens * factor**2, max_pixels / frames), at least 1.05 *
    # min_pixels). null: the folder's, else what the installed transformers does by default
    cap_pixels_per_frame: bool | None = None
    max_video_tokens: int | None = None  # the cap's tokens per frame (null: the folder's, else 768)
    # whose frame count and frame rate sampling follows (they differ on variable-frame-rate and headerless
    # containers): the reader the training pipeline decodes with. null: torchcodec, the default of transformers'
    # video loading and qwen-vl-utils' first choice (docs/video-fidelity.md)
    reader: Literal["torchcodec", "decord", "pyav"] | None = None


@dataclass(**_FROZEN)
class CostConfig:
    """Coefficients of a pack's training cost (FLOPs): derived from a model ``config.json``, each overridable."""

    model_config: str | None = None  # the model's config.json (or its folder): sizes the coefficients come from
    token: float | None = None  # per token: the language model's linear layers (+ lm head), forward + backward
    attention: float | None = None  # per squared sub-sample length: the language model's causal attention
    patch: float | None = None  # per vision-encoder patch: its linear layers and windowed attention
    patch_attention: float | None = None  # per squared full-attention block (patches): the encoder's full layers
    audio_frame: float | None = None  # per audio-encoder frame: its linear layers (omni models)
    audio_attention: float | None = None  # per squared audio attention window (frames): its attention


@dataclass(**_FROZEN)
class PackingConfig:
    group_by: Literal["media_type", "none"] = "media_type"  # one pack holds one media type, or any mix
    # bin packing: best-fit decreasing (tightest), first-fit decreasing, or hashbucket (the published tool's)
    algorithm: Literal["best_fit_decreasing", "first_fit_decreasing", "hashbucket"] = "best_fit_decreasing"
    max_samples_per_pack: int | None = None  # optional cap on sub-samples in a pack
    max_media_tokens_per_pack: int | None = None  # optional cap on visual tokens in a pack
    seed: int = 0  # shuffles pack order (no length curriculum)
    balance_world_size: int | None = None  # alias of parallel.data_parallel_size (the older name)
    # pad every sub-sample to a multiple of this (bucket and plan count the padded length); null: what
    # `parallel:` implies. Must be a multiple of that (docs/training/megatron.md)
    align_to: int | None = None
    # the compute cost model the balanced plan evens out over ranks (packing/cost.py, docs/balance.md)
    cost: CostConfig = field(default_factory=CostConfig)
    # at least 1000. More ok samples than this are packed in consecutive partitions of this many (manifest order),
    # each on its own (their part-filled packs again together; a mixture's partition with copies keeps its own, a
    # few packs more); bucket reads the manifest's ok columns into memory-mapped work_dir/bucket-scratch (~35 bytes
    # a sample of disk, removed when bucket ends), plan streams its per-sample arrays through work_dir/plan-scratch,
    # and write reads the ids from work_dir/ok-ids (kept for a resumed write). Packing's scratch is then bounded by
    # this (~20 bytes x it); the peak still grows ~13 bytes per sample (docs/performance.md, "A billion samples":
    # 1.8 GiB at 100M, 4.7 GiB at 300M with 25M). At or below it nothing changes, and a changed value there
    # rebuilds nothing
    partition_samples: int = 100_000_000


@dataclass(**_FROZEN)
class ParallelConfig:
    """The training job's layout, under Megatron's names: bucket and plan align sub-samples for it.

    Under context parallelism Megatron's THD attention needs every sub-sample padded to a multiple of
    ``2 * cp`` (and of ``cp * tp`` with sequence parallelism): ``packing/alignment.py``.
    """

    context_parallel_size: int = 1  # CP ranks that share one sequence (Megatron's --context-parallel-size)
    tensor_model_parallel_size: int = 1  # TP ranks (--tensor-model-parallel-size); matters with sequence_parallel
    sequence_parallel: bool = False  # Megatron's --sequence-parallel: each CP share is split over the TP ranks
    # data-parallel ranks (ranks of different data); set: the plan balances each step's cost over them
    # and every loader hands rank r the pack of its slot (docs/balance.md). null: no step balancing
    data_parallel_size: int | None = None
    micro_batches_per_step: int = 1  # gradient accumulation: packs each rank reads per optimizer step
    # energon's DataLoader workers per rank must divide the per-rank pack count: the plan cuts that count to
    # a multiple of this (so 1, 2, 4 or 8 workers keep the balance with 8)
    loader_workers: int = 8


@dataclass(**_FROZEN)
class PlanConfig:
    """What the plan draws from a mixture (``data.sources``)."""

    # draws of the mixture in one plan: each draws its own seeded down-samples and repeat remainders (a sample's
    # uses add up over them); the loader reads all of them as one pass
    epochs: int = 1


@dataclass(**_FROZEN)
class SplitConfig:
    val_ratio: float = 0.0  # fraction of packs that go to the `val` split
    val_packs: int | None = None  # exact number of `val` packs (wins over val_ratio)


@dataclass(**_FROZEN)
class WriteConfig:
    store_token_ids: bool = False  # also store input_ids + assistant mask per pack (ids.npy)
    energon_prepare: bool = False  # also run energon's own prepare for its full sqlite index
    # how write checks a source shard is the one scanned: its size + mtime, or also a sha256 of every
    # sample's bytes (recorded by the scan, so setting it needs a rescan; reads every byte twice)
    check_sources: Literal["size_mtime", "sha256"] = "size_mtime"


@dataclass(**_FROZEN)
class LossConfig:
    """Which tokens get labels (scan drops what would learn nothing; the loader builds labels)."""

    train_on: Literal["assistant", "all"] = "assistant"  # assistant turns (content + end-of-turn), or all text


@dataclass(**_FROZEN)
class ScanConfig:
    """How the scan checks samples and its outcome (``max_drop_ratio`` is not in its fingerprint: no rescan)."""

    # the drop gate of every stage: when the samples lost so far (the scan's drops, then bucket's overlong and
    # layout_unfit too) are more than this share of the input samples, the stage exits 1 after its reports, and
    # plan, write and verify say the same; 1.0 = never
    max_drop_ratio: float = 0.05
    # decode every image and every sampled video frame it counts and drop what fails (corrupt_media); slow.
    # Part of the scan's fingerprint: it changes which samples are ok.
    decode_check: bool = False


@dataclass(**_FROZEN)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    packed_wds: PackedWdsConfig = field(default_factory=PackedWdsConfig)
    process: ProcessConfig = field(default_factory=ProcessConfig)
    video: VideoConfig = field(default_factory=VideoConfig)
    packing: PackingConfig = field(default_factory=PackingConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    write: WriteConfig = field(default_factory=WriteConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    scan: ScanConfig = field(default_factory=ScanConfig)
    source: str = "<dict>"  # the file this config came from, for messages
    notices: tuple[str, ...] = ()  # one line per published-tool key that has no effect here (logged once)

    @property
    def work_dir(self) -> Path:
        return Path(self.data.work_dir)

    @property
    def packed_wds_dir(self) -> Path:
        return Path(self.data.packed_wds_dir)

    @property
    def data_parallel_size(self) -> int | None:
        """``parallel.data_parallel_size``, or its alias ``packing.balance_world_size``."""
        return self.parallel.data_parallel_size or self.packing.balance_world_size

    @property
    def alignment(self) -> Alignment:
        """The sub-sample alignment ``parallel:`` and ``packing.align_to`` ask for."""
        return Alignment(context_parallel_size=self.parallel.context_parallel_size,
                         tensor_model_parallel_size=self.parallel.tensor_model_parallel_size,
                         sequence_parallel=self.parallel.sequence_parallel, align_to=self.packing.align_to)


def _type_ok(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin is Literal:
        return value in typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_type_ok(v, item) for v in value)
    if origin is dict:
        return isinstance(value, dict)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _build(cls: type, raw: Any, where: str, source: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: `{where}` must be a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls) if f.name not in ("source", "notices")}
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        dotted = f"{where}.{key}" if where else str(key)
        if key not in known:
            raise ConfigError(f"{source}: unknown key `{dotted}` (known: {', '.join(sorted(known))})")
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            kwargs[key] = _build(hint, value if value is not None else {}, dotted, source)
        elif typing.get_origin(hint) is list and dataclasses.is_dataclass(typing.get_args(hint)[0]):
            if not isinstance(value, list):
                raise ConfigError(f"{source}: `{dotted}` must be a list of mappings, got {type(value).__name__}")
            kwargs[key] = [_build(typing.get_args(hint)[0], item, f"{dotted}[{i}]", source)
                           for i, item in enumerate(value)]
        elif not _type_ok(value, hint):
            raise ConfigError(f"{source}: `{dotted}` = {value!r} is not a valid {_describe(hint)}{_int_hint(value, hint)}")
        else:
            kwargs[key] = float(value) if hint is float else value
    return cls(**kwargs)


def _int_hint(value: Any, hint: Any) -> str:
    """How to write a number YAML reads as a float or a string (``1e8``) where an int is wanted."""
    wants_int = hint is int or int in typing.get_args(hint)
    try:
        number = float(value) if isinstance(value, (str, float)) and not isinstance(value, bool) else None
    except ValueError:
        number = None
    if not wants_int or number is None or not number.is_integer():
        return ""
    return f" (write it in digits: {int(number):_})"


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) is Literal:
        return "choice of " + " | ".join(repr(a) for a in typing.get_args(hint))
    args = typing.get_args(hint)
    if type(None) in args and len(args) == 2:  # Optional[X]: X's words, or null
        return _describe(next(a for a in args if a is not type(None))) + " or null"
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def _apply_override(raw: dict, assignment: str, source: str, base: Path | None = None) -> None:
    """Set one ``section.key=value``; a path key's relative value is resolved against ``base`` when given."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected section.key=value")
    dotted, text = assignment.split("=", 1)
    parts = dotted.strip().split(".")
    node = raw
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{source}: --set {dotted}: `{part}` is not a section")
    value = yaml.safe_load(text) if text.strip() else None
    node[parts[-1]] = _resolve_path_value(tuple(parts), value, base) if base is not None else value


def config_from_dict(
    raw: dict, *, source: str = "<dict>", overrides: tuple[str, ...] = (), override_base: Path | None = None
) -> Config:
    """Validate a plain dict (as read from YAML) and apply ``--set`` overrides.

    ``override_base``: the folder relative ``--set`` paths resolve against (``load_config`` passes the
    current directory); None leaves them as written.
    """
    raw = json.loads(json.dumps(raw or {}))  # deep copy, and rejects non-JSON values early
    for assignment in overrides:
        _apply_override(raw, assignment, source, override_base)
    raw, notices, log_level = translate_published(raw, source)
    config = _build(Config, raw, "", source)
    config = dataclasses.replace(config, source=source, notices=tuple(notices))
    _check(config)
    if log_level is not None:
        logging.getLogger(__package__).setLevel(log_level)
    for notice in notices:
        _notice_once(notice)
    return config


_NOTICED: set[str] = set()


def _notice_once(text: str) -> None:
    """Log a notice the first time this process sees it (each stage loads the config once, tests many times)."""
    if text not in _NOTICED:
        _NOTICED.add(text)
        log.warning("%s", text)


def load_config(path: str | Path, overrides: tuple[str, ...] = ()) -> Config:
    """Read and validate a YAML config.

    Relative paths written in the file resolve against the file's folder; relative paths given with
    ``--set`` resolve against the current directory.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if isinstance(raw, dict):
        raw = json.loads(json.dumps(raw))
        for keys in PATH_KEYS:
            _resolve_raw_path(raw, keys, path.parent.resolve())
        if isinstance(raw.get("data"), dict) and "sources" in raw["data"]:
            raw["data"]["sources"] = _resolve_path_value(("data", "sources"), raw["data"]["sources"],
                                                         path.parent.resolve())
    return config_from_dict(raw, source=str(path), overrides=overrides, override_base=Path.cwd())


def _resolve_raw_path(raw: dict, keys: tuple[str, ...], base: Path) -> None:
    node: Any = raw
    for key in keys[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict) and keys[-1] in node:
        node[keys[-1]] = _resolve_path_value(keys, node[keys[-1]], base)


def _resolve_path_value(keys: tuple[str, ...], value: Any, base: Path) -> Any:
    """``value`` with relative local paths made absolute against ``base`` (URLs and hub ids left alone)."""
    if keys == ("data", "sources") and isinstance(value, list):  # each source's shards, like data.wds_dir
        return [{**item, "wds_dir": _resolve_path_value(("data", "wds_dir"), item["wds_dir"], base)}
                if isinstance(item, dict) and "wds_dir" in item else item for item in value]
    if keys not in PATH_KEYS:
        return value
    if isinstance(value, list):
        return [_resolve_path_value(keys, v, base) for v in value]
    if not isinstance(value, str) or not value or "://" in value or Path(value).is_absolute():
        return value
    if keys[-1] == "pretrained_model_name_or_path":
        # a hub id like "Qwen/Qwen2-VL-2B" is left alone; "./" or "../" marks a path even before it exists,
        # e.g. the demo processor written after the config is read
        if not ((base / value).exists() or value.startswith(("./", "../"))):
            return value
    return str((base / value).resolve())


def _check(config: Config) -> None:
    src = config.source
    if config.sample.max_token_len <= 0:
        raise ConfigError(f"{src}: sample.max_token_len must be > 0, got {config.sample.max_token_len}")
    if config.process.workers < 1:
        raise ConfigError(f"{src}: process.workers must be >= 1, got {config.process.workers}")
    budget = config.process.max_seconds_per_sample
    if budget is not None and not 0 < budget <= MAX_BUDGET:
        raise ConfigError(f"{src}: process.max_seconds_per_sample must be > 0 and at most {MAX_BUDGET:g} seconds, "
                          f"or null for no budget; got {budget:g}")
    if config.process.ray_wait_for_cpu_s is not None and not config.process.ray_wait_for_cpu_s > 0:
        raise ConfigError(f"{src}: process.ray_wait_for_cpu_s = {config.process.ray_wait_for_cpu_s!r} must be a positive "
                          "number of seconds, or null to wait for ever")
    if config.process.ray_address is not None and config.process.executor != "ray":
        raise ConfigError(f"{src}: process.ray_address is set but process.executor is {config.process.executor!r}: "
                          "set process.executor: ray, or remove process.ray_address")
    if not 0.0 <= config.split.val_ratio < 1.0:
        raise ConfigError(f"{src}: split.val_ratio must be in [0, 1), got {config.split.val_ratio}")
    if config.packed_wds.maxcount < 1 or config.packed_wds.maxsize < 1:
        raise ConfigError(f"{src}: packed_wds.maxcount and packed_wds.maxsize must be >= 1")
    for name in ("max_samples_per_pack", "max_media_tokens_per_pack", "balance_world_size"):
        value = getattr(config.packing, name)
        if value is not None and value < 1:
            raise ConfigError(f"{src}: packing.{name} must be >= 1 or null, got {value}")
    if config.packing.partition_samples < MIN_PARTITION:
        raise ConfigError(f"{src}: packing.partition_samples must be >= {MIN_PARTITION:,} (smaller partitions each "
                          f"leave a part-filled pack or two), got {config.packing.partition_samples}")
    if config.sample.sample_type != "vlmpack_packed" and config.packing.group_by != "media_type":
        raise ConfigError(f"{src}: sample.sample_type {config.sample.sample_type} holds one media kind per pack "
                          f"(its media_type), but packing.group_by is {config.packing.group_by!r}: set "
                          "packing.group_by: media_type, or sample.sample_type: vlmpack_packed")
    _check_alignment(config)
    _check_balance(config)
    _check_sources(config)
    _check_outputs(config)
    low, high = config.video.min_frames, config.video.max_frames
    if (low is not None and low < 1) or (high is not None and high < max(low or 1, 1)):
        said = " and ".join(f"video.{name} {value}" for name, value in (("min_frames", low), ("max_frames", high))
                            if value is not None)  # fmt: skip
        raise ConfigError(f"{src}: need 1 <= video.min_frames <= video.max_frames, got {said}")
    if config.video.fps is not None and not config.video.fps > 0:
        raise ConfigError(f"{src}: video.fps must be > 0 (frames sampled per second of video), got {config.video.fps}")
    if config.video.max_video_tokens is not None and config.video.max_video_tokens < 1:
        raise ConfigError(f"{src}: video.max_video_tokens must be >= 1, got {config.video.max_video_tokens}")
    low, high = config.video.min_pixels, config.video.max_pixels
    if (low is not None and low < 1) or (high is not None and high < max(low or 1, 1)):
        said = " and ".join(f"video.{name} {value}" for name, value in (("min_pixels", low), ("max_pixels", high))
                            if value is not None)  # fmt: skip
        raise ConfigError(f"{src}: need 1 <= video.min_pixels <= video.max_pixels, got {said}")


def _check_alignment(config: Config) -> None:
    src, parallel, align_to = config.source, config.parallel, config.packing.align_to
    for name in ("context_parallel_size", "tensor_model_parallel_size", "micro_batches_per_step", "loader_workers"):
        if getattr(parallel, name) < 1:
            raise ConfigError(f"{src}: parallel.{name} must be a positive integer, got {getattr(parallel, name)}")
    if align_to is not None and align_to < 1:
        raise ConfigError(f"{src}: packing.align_to must be a positive integer or null, got {align_to}")
    implied = config.alignment.implied
    if align_to is not None and align_to % implied:
        raise ConfigError(
            f"{src}: packing.align_to {align_to} is not a multiple of {implied}, the alignment parallel: needs "
            f"(context_parallel_size {parallel.context_parallel_size}, tensor_model_parallel_size "
            f"{parallel.tensor_model_parallel_size}, sequence_parallel {str(parallel.sequence_parallel).lower()}): "
            f"set packing.align_to to a multiple of {implied}, or remove it"
        )


def _check_balance(config: Config) -> None:
    src, alias, size = config.source, config.packing.balance_world_size, config.parallel.data_parallel_size
    if size is not None and size < 1:
        raise ConfigError(f"{src}: parallel.data_parallel_size must be a positive integer or null, got {size}")
    if alias is not None and size is not None and alias != size:
        raise ConfigError(f"{src}: packing.balance_world_size {alias} and parallel.data_parallel_size {size} "
                          "disagree (the first is an alias of the second): keep parallel.data_parallel_size only")
    cost = config.packing.cost
    for name in ("token", "attention", "patch", "patch_attention", "audio_frame", "audio_attention"):
        value = getattr(cost, name)
        if value is not None and not (value >= 0 and math.isfinite(value)):
            raise ConfigError(f"{src}: packing.cost.{name} must be a finite number >= 0 or null, got {value}")


def _check_outputs(config: Config) -> None:
    """``data.work_dir`` must be a path (sqlite, renames): a URL there would become a local folder named ``s3:``
    with exit 0. ``data.packed_wds_dir`` may be an object-store URL (``s3://``, ``gs://``, ``msc://``: the write
    stage uploads each finished shard, output/object_store.py), but not ``file://``."""
    work = config.data.work_dir
    if isinstance(work, str) and "://" in work:
        raise ConfigError(
            f"{config.source}: data.work_dir = {work!r} is a URL; vlmpack keeps its work_dir (manifest.sqlite, bins, "
            "plan, the write stage's staging folder) on a local or shared POSIX path only: point it at a path "
            "(data.packed_wds_dir and the input shards may be URLs)"
        )
    packed = config.data.packed_wds_dir
    if isinstance(packed, str) and packed.startswith("file://"):
        raise ConfigError(
            f"{config.source}: data.packed_wds_dir = {packed!r}: write a local folder as a path "
            f"({packed.removeprefix('file://')!r}), not a file:// URL"
        )
    if isinstance(packed, str) and "://" in packed:
        scheme, _, rest = packed.partition("://")
        bucket, _, prefix = rest.strip("/").partition("/")
        if not prefix.strip("/"):  # the whole bucket would be vlmpack's: listed every run, our names refused there
            root = "PROFILE" if scheme == "msc" else "BUCKET"
            raise ConfigError(
                f"{config.source}: data.packed_wds_dir = {packed!r} names {'no bucket' if not bucket else 'a bucket root'}:"
                f" write it as {scheme}://{bucket or root}/PREFIX (a prefix of its own, e.g. "
                f"{scheme}://{bucket or root}/packed/v1; vlmpack lists and rewrites what is under it)"
            )


def _check_sources(config: Config) -> None:
    src, data = config.source, config.data
    if config.plan.epochs < 1:
        raise ConfigError(f"{src}: plan.epochs must be a positive integer, got {config.plan.epochs}")
    if not data.sources:
        return
    if data.wds_dir:
        raise ConfigError(f"{src}: data.wds_dir and data.sources are both set: move data.wds_dir into data.sources "
                          "as one more source (with a name), or remove data.sources")
    seen: set[str] = set()
    for i, source in enumerate(data.sources):
        where = f"data.sources[{i}]"
        if not source.name or "/" in source.name or source.name.strip() != source.name or source.name in (".", ".."):
            raise ConfigError(f"{src}: {where}.name {source.name!r} must be a non-empty name without '/' or spaces "
                              "around it (it prefixes the source's sample ids)")
        if source.name in seen:
            raise ConfigError(f"{src}: two sources are named {source.name!r} (data.sources): names must be unique")
        seen.add(source.name)
        if not source.wds_dir:
            raise ConfigError(f"{src}: {where} ({source.name}) has no wds_dir: set its shards (a folder, a glob or "
                              "a list of .tar files)")
        rules = [k for k in ("weight", "repeat", "count") if getattr(source, k) is not None]
        if len(rules) > 1:
            raise ConfigError(f"{src}: source {source.name!r} sets {' and '.join(rules)}: give one of weight "
                              "(share of the mixture), repeat (uses per sample) or count (samples or tokens)")
        for key in ("weight", "repeat"):
            value = getattr(source, key)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{src}: source {source.name!r} {key} must be a finite number >= 0, got {value}")
        if source.count is not None and source.count < 0:
            raise ConfigError(f"{src}: source {source.name!r} count must be >= 0, got {source.count}")
    weights = [s.weight for s in data.sources if s.weight is not None]
    if weights and not sum(weights) > 0:
        raise ConfigError(f"{src}: every source weight is 0 (data.sources): give at least one source a weight > 0")


def section_fingerprint_payload(config: Config, *sections: str) -> dict:
    """The config sections a stage depends on, as plain data for its fingerprint."""
    return {name: dataclasses.asdict(getattr(config, name)) for name in sections}
