"""Pick the counter for a config: size arithmetic for Qwen-VL (and text-only), the processor otherwise."""

from __future__ import annotations

from ..config import Config
from .counter import TokenCounter, load_tokenizer
from .rules import load_model_rules

__all__ = ["make_counter"]


def make_counter(config: Config):
    """``TokenCounter`` (fast) or ``SlowCounter``; both offer ``probe``, ``count_many`` and ``count``."""
    rules = load_model_rules(config.model)
    if rules.fast or rules.text_only:
        return TokenCounter(rules, load_tokenizer(rules.processor_path), config.video, config.loss.train_on,
                            config.model.chat_template_kwargs)  # fmt: skip
    from .slow import SlowCounter

    return SlowCounter(rules, config)
