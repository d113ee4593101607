"""Chat-template helpers shared by the span and batching tests."""

from __future__ import annotations

from vlmpack_offline.tokens.spans import ChatRenderer


def renders(chat: ChatRenderer, messages) -> bool:
    """Whether the template renders these messages at all (a corpus keeps the conversations it accepts)."""
    try:
        chat.render(messages)
        return True
    except Exception:  # noqa: BLE001 - any template error: the conversation is left out
        return False
