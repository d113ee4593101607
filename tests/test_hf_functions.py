"""transformers' size functions compiled from their source (hf_functions.py) are the functions themselves.

Oracle: the same function imported from its transformers module the usual way. Each compiled function gives the
same result, or raises the same error with the same text, on a sweep of sizes, factors and pixel bounds, including
the extreme aspect ratios and tiny sizes it refuses; a function that reads what its module imported is imported,
not compiled.
"""

from __future__ import annotations

import importlib
import itertools
import random

import pytest

from vlmpack_offline import hf_functions
from vlmpack_offline.hf_functions import hf_function

COMPILED = (
    ("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl", "smart_resize"),
    ("transformers.models.qwen3_vl.video_processing_qwen3_vl", "smart_resize"),
    ("transformers.models.glm4v.image_processing_pil_glm4v", "smart_resize"),
)


def _outcome(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the error is part of what must be the same
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize(("module", "name"), COMPILED)
def test_a_compiled_function_is_the_imported_one(module, name):
    compiled = hf_functions._compiled(module, name)
    assert compiled is not None, f"{module}.{name} is no longer self-contained: it is imported instead"
    imported = getattr(importlib.import_module(module), name)
    assert compiled is not imported and compiled.__code__.co_filename == imported.__code__.co_filename
    rng = random.Random(0)
    sides = [1, 2, 3, 13, 27, 28, 29, 55, 56, 57, 111, 224, 479, 480, 1079, 1080, 1919, 4096, 9999, 20000]
    sizes = list(itertools.product(sides, sides)) + [(rng.randint(1, 6000), rng.randint(1, 6000)) for _ in range(400)]
    video = "num_frames" in imported.__code__.co_varnames[: imported.__code__.co_argcount]
    for (height, width), factor in itertools.product(sizes, (14, 28, 32)):
        bounds = {"min_pixels": rng.choice((56 * 56, 128 * 28 * 28, 4 * 28 * 28)),
                  "max_pixels": rng.choice((28 * 28 * 1280, 12845056, 768 * 28 * 28))}  # fmt: skip
        if video:
            frames = rng.choice((1, 2, 3, 4, 16, 64))
            args = {"num_frames": frames, "height": height, "width": width, "factor": factor, "temporal_factor": 2}
            got, want = _outcome(compiled, **args, **bounds), _outcome(imported, **args, **bounds)
        else:
            got = _outcome(compiled, height, width, factor=factor, **bounds)
            want = _outcome(imported, height, width, factor=factor, **bounds)
        assert got == want, (module, height, width, factor, bounds)


def test_a_function_that_reads_its_modules_imports_is_imported_instead():
    module = "transformers.models.pixtral.image_processing_pil_pixtral"
    assert hf_functions._compiled(module, "get_resize_output_image_size") is None
    assert hf_function(module, "get_resize_output_image_size") is importlib.import_module(module).get_resize_output_image_size
    assert hf_functions._compiled("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl", "no_such_function") is None
