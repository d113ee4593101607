"""The model-type table of docs/families.md, derived from transformers' own tables and vlmpack's registries.

Which model types: every ``model_type`` that transformers maps to a processor (``PROCESSOR_MAPPING_NAMES``,
``models/auto/auto_mappings.py``, merged with ``processing_auto.py``'s extra names, as ``AutoProcessor`` reads
them) and to a multimodal language model (``MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES``, ``modeling_auto.py``):
the models one fine-tunes on conversations with media. What each processor takes and which hooks it has is
read from transformers' source (``ast``, no import: the answer must not depend on torchvision being installed):
the sub-processors its ``__init__`` names (as ``ProcessorMixin.get_attributes`` reads them), the methods it or a
base class in ``transformers/models`` defines, and the ``model_input_names`` of its image processor class
(``IMAGE_PROCESSOR_MAPPING_NAMES``, ``image_processing_auto.py``).

The path for each (docs/families.md says what each means)::

    hand-written fast   a module in vlmpack_offline/families (FAST_FAMILIES)
    generic fast        no module; tests/test_generic_path.py proves the generic path for it (tokens/proof.py
                        SUITE_PROVEN), and each folder proves it again at load
    generic or slow     no module; its processor has the hooks the generic path calls (replace_image_token /
                        replace_video_token) and its image processor returns a field it builds from sizes
                        (families/generic_fields.py adapter_for): generic where the folder's proof passes, else
                        slow; no test of vlmpack's proves it yet
    slow                no module and no generic rule: tokens/slow.py runs the processor on decoded media

    python scripts/families_table.py            # print the table
    python scripts/families_table.py --write    # replace it in docs/families.md
    python scripts/families_table.py --check    # exit 1 when docs/families.md holds another (tests/test_docs_families.py)
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "families.md"
BEGIN = "<!-- BEGIN scripts/families_table.py: generated, do not edit by hand -->"
END = "<!-- END scripts/families_table.py -->"
_HOOKS = ("replace_image_token", "replace_video_token", "_get_num_multimodal_tokens")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassSource:
    """What one class definition in transformers/models says, read with ``ast``."""

    bases: tuple[str, ...]  # base class names, as written
    methods: frozenset[str]  # defined in its own body
    init_params: tuple[str, ...] | None  # its own __init__'s parameters; None when it defines none
    input_names: tuple[str, ...] | None  # its own model_input_names; None when it sets none


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    model_type: str
    processor: str  # the processor class transformers maps it to
    media: str  # "image", "video", "image, video"
    path: str  # module doc
    why: str  # the reason for the path, one phrase
    torchvision: bool  # the scan needs torchvision for this type
    checked: str  # what checks it (test files under tests/, without test_ and .py)


def _transformers_dir() -> Path:
    import transformers

    return Path(transformers.__file__).resolve().parent


@functools.cache
def class_index() -> dict[str, ClassSource]:
    """Every class of transformers' processing / image processing modules (not the modular_ sources), and the
    image processors' shared bases (``image_processing_*.py``: ``model_input_names = ["pixel_values"]``) with
    their methods left out (a hook counts only where a model's own processor defines it)."""
    index: dict[str, ClassSource] = {}
    models = _transformers_dir() / "models"
    patterns = ("processing_*.py", "image_processing_*.py")
    for path in sorted({p for pattern in patterns for p in models.glob(f"*/{pattern}")}):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                index.setdefault(node.name, _class_source(node))
    for path in sorted(_transformers_dir().glob("image_processing_*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                index.setdefault(node.name, dataclasses.replace(_class_source(node), methods=frozenset()))
    return index


def _class_source(node: ast.ClassDef) -> ClassSource:
    methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    params = None if init is None else tuple(a.arg for a in (*init.args.args, *init.args.kwonlyargs))
    names = None
    for item in node.body:
        targets = item.targets if isinstance(item, ast.Assign) else [item.target] if isinstance(item, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "model_input_names" for t in targets) and item.value is not None:
            try:
                names = tuple(ast.literal_eval(item.value))
            except ValueError:  # built from a base's list (Base.model_input_names + [...]): read through the base
                names = None
    bases = tuple(b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in node.bases)
    return ClassSource(bases=bases, methods=frozenset(methods), init_params=params, input_names=names)


def _mro(name: str) -> list[ClassSource]:
    """The class and its bases defined in transformers/models, nearest first (ProcessorMixin & co. are not)."""
    index, out, todo, seen = class_index(), [], [name], set()
    while todo:
        current = todo.pop(0)
        if current in seen or current not in index:
            continue
        seen.add(current)
        out.append(index[current])
        todo.extend(index[current].bases)
    return out


def sub_processors(processor: str) -> tuple[str, ...]:
    """The sub-processors ``ProcessorMixin.get_attributes`` finds: the nearest ``__init__``'s parameters."""
    params = next((c.init_params for c in _mro(processor) if c.init_params is not None), ())
    return tuple(p for p in params if p.endswith(("_processor", "tokenizer", "feature_extractor")))


def hooks(processor: str) -> frozenset[str]:
    return frozenset(h for c in _mro(processor) for h in c.methods if h in _HOOKS)


def image_outputs(model_type: str, processor: str) -> tuple[str, ...] | None:
    """``model_input_names`` of the image processor transformers picks for the type (PIL class first), or of a
    type with the same processor class (``glm4v_moe`` folders hold ``glm4v``'s); None when unknown."""
    from transformers.models.auto import image_processing_auto, processing_auto

    table = image_processing_auto.IMAGE_PROCESSOR_MAPPING_NAMES
    owners = [model_type, *(t for t, p in processing_auto.PROCESSOR_MAPPING_NAMES.items() if p == processor)]
    classes = next((table[t] for t in owners if table.get(t)), None)
    if not classes:
        return None
    name = classes.get("pil") or classes.get("torchvision")
    return next((c.input_names for c in _mro(name) if c.input_names is not None), None)


def pil_image_processor(model_type: str, processor: str) -> bool:
    from transformers.models.auto import image_processing_auto, processing_auto

    table = image_processing_auto.IMAGE_PROCESSOR_MAPPING_NAMES
    owners = [model_type, *(t for t, p in processing_auto.PROCESSOR_MAPPING_NAMES.items() if p == processor)]
    return any((table.get(t) or {}).get("pil") for t in owners)


def model_types() -> list[tuple[str, str]]:
    """(model_type, processor class) of every multimodal LM type with a processor, sorted."""
    from transformers.models.auto import modeling_auto, processing_auto

    lms = modeling_auto.MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES
    return sorted((t, p) for t, p in processing_auto.PROCESSOR_MAPPING_NAMES.items() if t in lms and p)


def family_tests(model_type: str, module: str) -> str:
    """A hand-written family's checks: the conformance suite where the type is a row of its table
    (``tests/_families_table.py``), then its own test files ``tests/test_family_<model_type or module>*.py``."""
    files = sorted({p.name for stem in (model_type, module) for p in (ROOT / "tests").glob(f"test_family_{stem}*.py")})
    names = [*(CONFORMANCE_TESTS if model_type in _conformance_rows() else ()),
             *(f.removeprefix("test_").removesuffix(".py") for f in files)]  # fmt: skip
    return ", ".join(f"`{name}`" for name in names) or "its section below"


CONFORMANCE_TESTS = ("conformance_counts", "conformance_loader")


@functools.cache
def _conformance_rows() -> frozenset[str]:
    """The model types the conformance suite's table has a row for."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from _families_table import ROWS
    finally:
        sys.path.remove(str(ROOT / "tests"))
    return frozenset(row.model_type for row in ROWS)


# How each path is checked (docs/families.md, "What is exact, and how it is checked")
GENERIC_TESTS = ("`generic_path` (counts vs the real processor), `packed_forward_2026` (loader vs the processor, "
                 "packed forward vs alone), `synthetic_2026_folders`")
CANDIDATE_TESTS = "its folder's proof at load (`tokens/proof.py`)"
SLOW_TESTS = "the processor itself (`family_slow` runs `llava`)"
SLOW_FOLDER_TESTS = ("`generic_path` (its slow-path counts vs the real processor), `packed_forward_2026` (loader vs "
                     "the processor), `synthetic_2026_folders`")


def _generic_field(outputs: tuple[str, ...] | None) -> str:
    """The field the generic path builds from sizes for these outputs ('' when none), by its own adapter_for."""
    from vlmpack_offline.families.generic_fields import adapter_for

    fake = SimpleNamespace(image_processor=SimpleNamespace(model_input_names=list(outputs or ())), video_processor=None)
    adapter, _ = adapter_for(fake)
    return adapter.name if adapter is not None else ""


def row(model_type: str, processor: str) -> Row | None:
    """The table row for one type; None for a processor that takes neither images nor videos (audio)."""
    from vlmpack_offline.families import FAMILIES
    from vlmpack_offline.synthetic.processor_dir import FOLDER_MODULES
    from vlmpack_offline.tokens.proof import SUITE_PROVEN

    subs = sub_processors(processor)
    kinds = [k for k in ("image", "video") if f"{k}_processor" in subs]
    if not kinds:
        return None
    media = ", ".join(kinds)
    family = FAMILIES.get(model_type)
    if family is not None:
        module = type(family).__module__.rsplit(".", 1)[-1]
        return Row(model_type=model_type, processor=processor, media=media, path="hand-written fast",
                   why=f"`families/{module}.py`", torchvision=False, checked=family_tests(model_type, module))  # fmt: skip
    outputs = image_outputs(model_type, processor)
    pil = pil_image_processor(model_type, processor)
    folder = model_type in FOLDER_MODULES
    if model_type in SUITE_PROVEN or (folder and _generic_field(outputs)):  # a folder the suite builds and counts
        suite = SUITE_PROVEN.get(model_type, frozenset())
        unproven = [k for k in kinds if k not in suite and (k == "video" or not pil)]  # parts the core env cannot prove
        why = "proven per folder at load" + (f"; {' and '.join(f'{k}s' for k in kinds if k in suite)} by the suite "
                                              "where torchvision is missing (`SUITE_PROVEN`)" if suite else "")  # fmt: skip
        return Row(model_type=model_type, processor=processor, media=media, path="generic fast", why=why,
                   torchvision=bool(unproven), checked=GENERIC_TESTS)  # fmt: skip
    have = hooks(processor)
    field = _generic_field(outputs) if "image" in kinds else "video"
    needs_tv = "video" in kinds or not pil
    missing = [f"`{h}`" for h in (f"replace_{k}_token" for k in kinds) if h not in have]
    if missing:
        why = f"{processor} has no {' / '.join(missing)}"
    elif not field:
        why = f"its image processor returns {', '.join(f'`{o}`' for o in outputs or ('?',))}: none built from sizes"
    else:
        return Row(model_type=model_type, processor=processor, media=media, path="generic or slow",
                   why=f"hooks and `{field}` fields present; taken where the folder's proof passes",
                   torchvision=needs_tv, checked=CANDIDATE_TESTS)  # fmt: skip
    return Row(model_type=model_type, processor=processor, media=media, path="slow", why=why, torchvision=needs_tv,
               checked=SLOW_FOLDER_TESTS if folder else SLOW_TESTS)  # fmt: skip


def audio_types() -> list[str]:
    return [t for t, p in model_types() if not any(k in sub_processors(p) for k in ("image_processor", "video_processor"))]


def table() -> str:
    """The generated block of docs/families.md (markers included)."""
    import transformers

    rows = [r for r in (row(t, p) for t, p in model_types()) if r is not None]
    counts = {path: sum(1 for r in rows if r.path == path) for path in ("hand-written fast", "generic fast", "generic or slow", "slow")}
    lines = [
        BEGIN,
        f"transformers {transformers.__version__}: {len(rows)} vision model types "
        + ", ".join(f"{n} {path}" for path, n in counts.items()) + ".",
        "",
        "| `model_type` | processor | media | path | why | scan needs torchvision | checked by (`tests/test_*.py`) |",
        "|---|---|---|---|---|---|---|",
        *(f"| `{r.model_type}` | {r.processor} | {r.media} | {r.path} | {r.why} | {'yes' if r.torchvision else 'no'} "
          f"| {r.checked} |" for r in rows),  # fmt: skip
        "",
        f"Audio or other processors without an image or video processor ({len(audio_types())}, not counted by "
        f"vlmpack): {', '.join(f'`{t}`' for t in audio_types())}.",
        END,
    ]
    return "\n".join(lines)


def documented(doc: Path = DOC) -> str:
    text = doc.read_text(encoding="utf-8")
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < 0:
        raise SystemExit(f"{doc} has no {BEGIN!r} ... {END!r} block: add the markers where the table goes")
    return text[start:end + len(END)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help=f"replace the block in {DOC.relative_to(ROOT)}")
    group.add_argument("--check", action="store_true", help=f"exit 1 when {DOC.relative_to(ROOT)} differs")
    args = parser.parse_args(argv)
    generated = table()
    if args.write:
        DOC.write_text(DOC.read_text(encoding="utf-8").replace(documented(), generated), encoding="utf-8")
    elif args.check:
        if documented() != generated:
            print(f"{DOC.relative_to(ROOT)} is stale: run python scripts/families_table.py --write", file=sys.stderr)
            return 1
    else:
        print(generated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
