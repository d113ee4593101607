"""A tiny random model whose token losses differ, for the gradient tests (not a test module).

A freshly initialised LM head (std 0.02) scores every token at about ln(vocab), so any loss
normalisation gives the same loss; a unit-std head spreads the token losses over tens of nats, and
then a wrong normaliser changes the gradient. The embeddings and the LM head (19 of the 20 million
weights, the same in every run) are frozen: every other weight is trained and compared.
"""

from __future__ import annotations

import torch

from vlmpack_offline.synthetic.tiny_models import tiny_gemma3_config, tiny_qwen_vl

__all__ = ["trainable", "uneven_model"]


def uneven_model(family: str, processor: str | None = None) -> torch.nn.Module:
    """The tiny random model of ``family`` (``processor``: the Gemma3 folder its token ids come from), its LM
    head redrawn at unit std and frozen with the embeddings."""
    if family == "gemma3":
        from transformers import Gemma3ForConditionalGeneration

        torch.manual_seed(0)
        model = Gemma3ForConditionalGeneration(tiny_gemma3_config(processor))
    else:
        model = tiny_qwen_vl(family, "sdpa", seed=0)
    head = model.get_output_embeddings().weight
    with torch.no_grad():
        head.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(1))
    head.requires_grad_(False)
    model.get_input_embeddings().weight.requires_grad_(False)
    return model


def trainable(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """The weights the optimizer steps (everything but the frozen embeddings and LM head)."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}
