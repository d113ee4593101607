"""Counts equal the real processor, sample by sample, for every row of the conformance table.

For each row (``tests/_families_table.py``) and folder layout, the whole ``vlmpack scan`` stage runs on the
row's data (the generated dataset plus edge-size images: 1x1, tile and factor edges, 5000:1, past the pixel
budget). The oracle is the row's real processor (transformers' own class loaded by its own
``from_pretrained`` from the folder) run on the rendered chat and the decoded media of each sample alone:

- its ``input_ids`` length and its media ids equal the manifest's ``token_len`` / ``media_tokens``;
- ``materialize`` (what the loader feeds the model) gives its ``input_ids`` token by token, no media id is
  labelled, and a one-turn sample's labels decode to the answer and the turn's end;
- an image it refuses (``ValueError``) is a drop with the row's reason; a video of a model type without video
  is ``unsupported_media``; the kinds of samples seen (text, one image, several, video, the row's hard case)
  reach the row's minima, so a check that silently skipped samples would fail;
- ``model.processor_kwargs`` variants: the same, against the processor loaded with the same keywords.

Where the oracle needs torchvision the test is marked ``torchvision`` and runs in ``.venv-ref``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from _conformance import LAYOUTS, Row, Variant
from _families_table import ROWS
from _family_kit import samples_in, scan_config
from click.testing import CliRunner
from PIL import Image

from vlmpack_offline.cli import cli
from vlmpack_offline.config import load_config
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.tokens import load_model_rules, make_counter


def _marks(r: Row, *, whole_scan: bool) -> list:
    return ([pytest.mark.torchvision] if r.torchvision else []) + ([pytest.mark.slow] if r.slow and whole_scan else [])


SCANS = [pytest.param(r, layout, marks=_marks(r, whole_scan=True), id=f"{r.id}-{layout}") for r in ROWS for layout in r.layouts]
VARIANTS = [pytest.param(r, v, marks=_marks(r, whole_scan=True), id=f"{r.id}-{v.id}") for r in ROWS for v in r.variants]
SETTINGS = [pytest.param(r, id=r.id) for r in ROWS if r.rules]
NO_VIDEO = [pytest.param(r, id=r.id) for r in ROWS if r.no_video]


class _Built:
    """What the checks share, built on first use: a row's folder per layout, a data spec's dataset."""

    def __init__(self, root: Path) -> None:
        self.root, self._folders, self._data = root, {}, {}

    def folder(self, r: Row, layout: str) -> Path:
        key = (r.model_type, layout, r.folder_video)
        if key not in self._folders:
            self._folders[key] = r.folder(self.root / "_".join(map(str, key)), layout)
        return self._folders[key]

    def data(self, spec) -> Path:
        if spec not in self._data:
            self._data[spec] = spec.build(self.root / f"wds_{len(self._data)}")
        return self._data[spec]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> _Built:
    return _Built(tmp_path_factory.mktemp("conformance"))


def _attribute(value, dotted: str):
    for name in dotted.split("."):
        value = value[name] if isinstance(value, dict) else getattr(value, name)
    return value


def _scan_equals_oracle(tmp_path: Path, r: Row, folder: Path, wds: Path, processor, path_line: str,
                        answers, **kwargs) -> dict[str, int]:
    """Run ``vlmpack scan``; every row's counts and materialized ids equal the oracle's; the kinds seen."""
    config = scan_config(tmp_path, wds, folder, max_token_len=r.max_token_len, sections=r.scan_sections, **kwargs)
    result = CliRunner().invoke(cli, ["scan", "--config", str(config)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert path_line in result.output, result.output
    counter = make_counter(load_config(config))
    samples = samples_in(wds)
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        rows = list(manifest.iter_samples())
    assert len(rows) == len(samples)
    media_ids = r.media_ids(processor)
    kinds_seen = ("text", "image", "multi", "video", "refused", "checked") + ((r.stress.name,) if r.stress else ())
    seen = dict.fromkeys(kinds_seen, 0)
    for row in rows:
        conversation, parts = samples[row.key]
        kinds = [m.kind for m in conversation.media]
        if "video" in kinds and r.videos in ("dropped", "elsewhere"):
            expected = Reason.UNSUPPORTED_MEDIA if r.videos == "dropped" else "ok"
            assert row.status == expected, (row.key, row.status, row.error)
            seen["video"] += 1
            continue
        try:
            ids = r.reference_ids(processor, conversation, parts, counter)
        except ValueError as exc:
            assert r.refusal is not None and all(word in str(exc) for word in r.refusal.says), (row.key, exc)
            assert row.status == r.refusal.reason, (row.key, row.status, row.error)
            seen["refused"] += 1
            continue
        assert row.status == "ok", (row.key, row.status, row.error)
        n_media = sum(i in media_ids for i in ids)
        assert (row.token_len, row.media_tokens) == (len(ids), n_media), row.key
        media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
        materialized = counter.materialize(conversation, media)
        assert materialized.input_ids == ids, row.key
        learned = [i for i, m in zip(ids, materialized.assistant_mask, strict=True) if m]
        assert not media_ids & set(learned), row.key
        if (answer := answers(row.key)) is not None:
            assert processor.tokenizer.decode(learned) == r.answer_end.format(answer=answer), row.key
        if r.per_image is not None:
            assert n_media == r.per_image * len(kinds), row.key
        seen["video" if "video" in kinds else "text" if not kinds else "image" if len(kinds) == 1 else "multi"] += 1
        seen["checked"] += 1  # compared with the oracle token by token
        if r.stress is not None and "video" not in kinds:
            sizes = [Image.open(io.BytesIO(parts[m.part])).size for m in conversation.media]
            seen[r.stress.name] += r.stress.hit(processor, sizes, n_media)
    return seen


def _check_seen(seen: dict, at_least: dict, exactly: dict) -> None:
    assert all(seen[k] >= n for k, n in at_least.items()) and all(seen[k] == n for k, n in exactly.items()), seen


@pytest.mark.parametrize(("r", "layout"), SCANS)
def test_scan_counts_equal_the_real_processor(tmp_path, built, r: Row, layout: str):
    folder = built.folder(r, layout)
    assert (folder / "preprocessor_config.json").exists() == (layout == "hub")
    assert json.loads((folder / "config.json").read_text())["model_type"] == r.model_type
    processor = r.oracle(folder)
    assert {k: _attribute(processor, k) for k in r.facts} == r.facts
    seen = _scan_equals_oracle(tmp_path, r, folder, built.data(r.data), processor, r.path_line, r.data.answer)
    exactly = {"refused": r.refusal.count if r.refusal else 0, **r.exactly}
    _check_seen(seen, r.at_least, exactly)


@pytest.mark.parametrize(("r", "variant"), VARIANTS)
def test_processor_kwargs_change_the_counts_as_in_the_processor(tmp_path, built, r: Row, variant: Variant):
    """Settings from ``model.processor_kwargs``, as ``from_pretrained`` hands them to the processor."""
    folder = built.folder(r, variant.layout)
    processor = r.oracle(folder, **variant.kwargs)
    assert {k: _attribute(processor, k) for k in variant.facts} == variant.facts
    seen = _scan_equals_oracle(tmp_path, r, folder, built.data(r.data), processor, variant.path_line, r.data.answer,
                               **variant.kwargs)  # fmt: skip
    _check_seen(seen, variant.at_least, variant.exactly)


@pytest.mark.parametrize("r", SETTINGS)
def test_settings_are_read_from_both_layouts(built, make_config, r: Row):
    for layout in LAYOUTS:
        rules = load_model_rules(make_config(wds_dir="unused", processor_dir=built.folder(r, layout)).model)
        assert {k: getattr(rules, k) for k in r.rules} == r.rules, layout


@pytest.mark.parametrize("r", NO_VIDEO)
def test_a_video_item_is_dropped_as_unsupported_media(built, make_config, r: Row):
    counter = make_counter(make_config(wds_dir="unused", processor_dir=built.folder(r, "hub")))
    with pytest.raises(DropError) as caught:
        counter.probe("video", b"not even read", part="clip.mp4")
    assert caught.value.reason == Reason.UNSUPPORTED_MEDIA and r.no_video in str(caught.value)
