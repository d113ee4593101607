"""transformers' chat-template renderer (``render_jinja_template`` and the steps it takes), without importing transformers.

Why: the scan renders every chat through ``transformers.utils.chat_template_utils`` (the render the counts must
match), and importing that module runs transformers' package ``__init__``, whose lazy import table reads every
model folder's files: 0.5-0.8 s of a 1-sample scan, where nothing else of transformers is needed once the
tokenizer's snapshot is saved (``tokenizer_snapshot.py``). The module itself needs only jinja2, numpy, packaging
and two helpers of its own package (``logging.get_logger``, ``import_utils.is_*_available``).

So the installed file is run as a module of its own (``_standalone``), in a private package that gives it those two
helpers: a stdlib logger with transformers' ``warning_once``, and availability checks that ask whether the package
is installed (``importlib.util.find_spec``; used only to turn tool *functions* into JSON schemas, which the scan
never passes). Nothing is copied: whatever the installed release's file does, this runs.

Never assumed: a template renders through the standalone module only where a proof on this install says it renders
that template with those variables exactly as transformers' own module does (``_renders_alike``: probe
conversations of every message kind the scan reads, with and without the generation prompt, and with the assistant
masks where the template marks generation; the same texts and indices, or the same exception). The verdict is kept
(``disk_cache``, kind ``chat_render``) under a key of the installed transformers and jinja2 versions (read with
``importlib.metadata``), the file's sha256, this module's source, the template and the variables; where it is
missing it is made (importing transformers, as a folder's first scan does anyway to save the tokenizer's
snapshot); where it fails, or the file cannot run alone, transformers' own module is used.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import re
import sys
import types
from collections.abc import Mapping
from pathlib import Path

from ..disk_cache import file_sha256, key_of, read_json, write_json

__all__ = ["chat_functions", "standalone_path"]

log = logging.getLogger(__name__)

_FORMAT = 1  # bump when what the proof checks changes
_PACKAGE = f"{__name__}_transformers_utils"  # the private package the file runs in
_KIND = "chat_render"
_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")  # spans.has_generation_markers (not imported: a cycle)

# conversations the proof renders (with and without the generation prompt): every message kind the scan's layouts
# give (conversation.py), reasoning fields (``_alias_reasoning_fields``), tool calls, a message with no content
_PROBES: tuple[tuple[dict, ...], ...] = (
    ({"role": "user", "content": "Hi there."},),
    ({"role": "user", "content": "What is this?"}, {"role": "assistant", "content": "A cat."}),
    ({"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
     {"role": "user", "content": [{"type": "image", "image": "img0.jpg"}, {"type": "text", "text": "And this?"}]},
     {"role": "assistant", "content": [{"type": "text", "text": "A dog."}]},
     {"role": "user", "content": [{"type": "video", "video": "clip.mp4"}, {"type": "text", "text": "Sure?\n\n"}]},
     {"role": "assistant", "content": [{"type": "text", "text": " Yes. "}]}),
    ({"role": "system", "content": "You are helpful."}, {"role": "user", "content": [{"type": "image"}]},
     {"role": "assistant", "content": "Done.", "reasoning_content": "Look first."}),
    ({"role": "user", "content": "Weather?"},
     {"role": "assistant", "content": "", "thinking": "Call it.",
      "tool_calls": [{"type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
     {"role": "tool", "content": "sunny", "name": "weather"}, {"role": "assistant", "content": "Sunny."}),
    ({"role": "user", "content": [{"type": "audio", "audio": "a.wav"}, {"type": "text", "text": "ünï 你好 🙂"}]},
     {"role": "assistant", "content": None}),
    (),
)  # fmt: skip


def standalone_path() -> Path | None:
    """The installed ``transformers/utils/chat_template_utils.py``, found without importing transformers."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.origin:
        return None
    path = Path(spec.origin).parent / "utils" / "chat_template_utils.py"
    return path if path.is_file() else None


@functools.cache
def _standalone() -> types.ModuleType | None:
    """The installed file run as a module of its own (module doc), or None where it cannot run so."""
    path = standalone_path()
    if path is None:
        return None
    package = types.ModuleType(_PACKAGE)
    package.__path__ = []  # a package: the file's relative imports resolve in it
    helpers = {"logging": _logging_helpers(), "import_utils": _import_helpers()}
    name = f"{_PACKAGE}.chat_template_utils"
    module = types.ModuleType(name)
    module.__file__, module.__package__ = str(path), _PACKAGE
    saved = {key: sys.modules.get(key) for key in (_PACKAGE, *(f"{_PACKAGE}.{h}" for h in helpers), name)}
    try:
        sys.modules[_PACKAGE] = package
        for helper, value in helpers.items():
            setattr(package, helper, value)
            sys.modules[f"{_PACKAGE}.{helper}"] = value
        sys.modules[name] = module
        code = compile(path.read_bytes(), str(path), "exec")
        exec(code, module.__dict__)  # noqa: S102 - transformers' own installed file (module doc)
    except Exception as exc:  # noqa: BLE001 - a release whose file needs more of its package: transformers' own
        log.debug("%s does not run on its own (%s): chat templates render through transformers", path, exc)
        for key, value in saved.items():
            if value is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = value
        return None
    return module


def _logging_helpers() -> types.ModuleType:
    """``get_logger`` as the file uses it: a stdlib logger that also has transformers' ``warning_once``."""
    helpers = types.ModuleType(f"{_PACKAGE}.logging")
    helpers.get_logger = _Logger
    return helpers


class _Logger(logging.LoggerAdapter):
    """A stdlib logger with ``warning_once`` / ``info_once`` (each message said once per process)."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(logging.getLogger(name or _PACKAGE), {})

    @functools.cache  # noqa: B019 - a handful of loggers per process, as transformers' own warning_once caches
    def warning_once(self, *args, **kwargs) -> None:
        self.warning(*args, **kwargs)

    @functools.cache  # noqa: B019
    def info_once(self, *args, **kwargs) -> None:
        self.info(*args, **kwargs)


def _import_helpers() -> types.ModuleType:
    helpers = types.ModuleType(f"{_PACKAGE}.import_utils")
    for name, package in (("jinja", "jinja2"), ("torch", "torch"), ("vision", "PIL")):
        setattr(helpers, f"is_{name}_available", functools.partial(_installed, package))
    return helpers


def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def _theirs() -> types.ModuleType:
    from transformers.utils import chat_template_utils

    return chat_template_utils


def chat_functions(template: str | None, variables: Mapping | None = None) -> types.ModuleType:
    """The module whose ``render_jinja_template`` (and ``_compile_jinja_template``, ``_plain_template_data``,
    ``_alias_reasoning_fields`` where the release has them) renders ``template`` with ``variables`` (the extra
    template variables: special tokens, ``chat_template_kwargs``): the standalone one where proven, else
    transformers' own (module doc)."""
    try:
        text = json.dumps(dict(variables or {}), sort_keys=True)
    except (TypeError, ValueError):  # variables that are not JSON: no key to keep a proof under
        return _theirs()
    return _chosen(template, text)


@functools.lru_cache(maxsize=64)
def _chosen(template: str | None, variables: str) -> types.ModuleType:
    standalone = _standalone()
    if standalone is None or not isinstance(template, str):
        return _theirs()
    path = Path(standalone.__file__)
    key = key_of(sources=("tokens/hf_chat.py",), packages=("transformers", "jinja2"),
                 extra=[_FORMAT, file_sha256(path).hex(), template, variables])  # fmt: skip
    kept = read_json(_KIND, key)
    if isinstance(kept, dict) and isinstance(kept.get("same"), bool):
        same = kept["same"]
    else:
        problem = _renders_alike(standalone, _theirs(), template, json.loads(variables))
        if problem:
            log.info("chat template rendered through transformers' own module: %s", problem)
        same = not problem
        write_json(_KIND, key, {"same": same, "problem": problem})
    return standalone if same else _theirs()


def _renders_alike(ours: types.ModuleType, theirs: types.ModuleType, template: str, variables: dict) -> str:
    """What differs between the two modules' renders of ``template`` on the probes ("" when nothing does)."""
    marks = (False, True) if _GENERATION.search(template) else (False,)  # HF warns of masks without markers
    for probe in _PROBES:
        for generation in (False, True):
            for mask in marks:
                calls = {"conversations": [list(probe)], "chat_template": template, "add_generation_prompt": generation,
                         "return_assistant_tokens_mask": mask, **variables}  # fmt: skip
                a, b = _outcome(ours, calls), _outcome(theirs, calls)
                if a != b:
                    return f"probe of {len(probe)} messages (generation prompt {generation}, masks {mask}): {a!r} vs {b!r}"
    every = {"conversations": [list(p) for p in _PROBES], "chat_template": template, **variables}
    if _outcome(ours, every) != _outcome(theirs, every):
        return "the probes rendered in one call"
    return ""


def _outcome(module: types.ModuleType, calls: dict) -> object:
    """The render's result, or the exception it raised, as something to compare."""
    try:
        rendered, indices = module.render_jinja_template(**json.loads(json.dumps(calls)))
        return [list(rendered), [[list(span) for span in spans] for spans in indices]]
    except Exception as exc:  # noqa: BLE001 - a template that raises must raise alike in both
        return ["raised", type(exc).__qualname__, str(exc)]  # the module differs for the file's own classes
