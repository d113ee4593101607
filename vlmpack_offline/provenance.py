"""What an artifact was built from, by name: so a stale artifact says which settings changed and what to rerun.

Every stage hashes the settings it depends on into its fingerprint (``artifacts.fingerprint``) and also
records them flat, one dotted key per value, beside it::

    {"model.processor_kwargs.max_pixels": 1003520, "video.fps": 2.0,
     "processor_file preprocessor_config.json": "3f1c0a9e21b7", ...}

When a later run finds the fingerprint changed, ``changes`` compares the recorded settings with the
current ones and ``stale_message`` names each key with its old and new value and the first stage to
rerun (``vlmpack scan`` for a counting setting, ``bucket`` for a packing one, ...), instead of two hashes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Change", "flat_settings", "changes", "describe_changes", "stale_message"]

_ABSENT = object()
_SHOWN = 6  # changes named in one message; the rest are counted


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    key: str  # dotted name, e.g. "model.processor_kwargs.max_pixels"
    old: Any  # the recorded value (``None`` with ``added``: the artifact did not record the key)
    new: Any  # the current value (``None`` with ``removed``)
    added: bool = False  # the key is new in the current settings
    removed: bool = False  # the key is gone from the current settings

    def render(self) -> str:
        if self.added:
            return f"{self.key} (now {_show(self.new)}; not set before)"
        if self.removed:
            return f"{self.key} (was {_show(self.old)}; not set now)"
        return f"{self.key} {_show(self.old)} -> {_show(self.new)}"


def flat_settings(payload: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys; lists and scalars are values (JSON-plain, sorted keys)."""
    out: dict[str, Any] = {}
    for key in sorted(payload):
        value, name = payload[key], f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flat_settings(value, name + "."))
        else:
            out[name] = json.loads(json.dumps(value, sort_keys=True))  # tuples -> lists, as read back from JSON
    return out


def changes(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[Change]:
    """Every key whose value differs between the recorded and the current settings, sorted by key."""
    out = []
    for key in sorted(set(recorded) | set(current)):
        old, new = recorded.get(key, _ABSENT), current.get(key, _ABSENT)
        if old == new:
            continue
        out.append(Change(key=key, old=None if old is _ABSENT else old, new=None if new is _ABSENT else new,
                          added=old is _ABSENT, removed=new is _ABSENT))
    return out


def describe_changes(found: list[Change]) -> str:
    """``a.b 1 -> 2; c.d 'x' -> 'y'`` for the first few changes, and how many more there are."""
    text = "; ".join(change.render() for change in found[:_SHOWN])
    return text + (f"; and {len(found) - _SHOWN} more" if len(found) > _SHOWN else "")


def stale_message(artifact: str, found: list[Change], rerun: str, *, unnamed: str = "") -> str:
    """One line: what was built from what, which settings changed (or ``unnamed`` when none can be named:
    an artifact from an older vlmpack, or an upstream artifact rebuilt), and the command that fixes it."""
    what = (f"settings that changed since: {describe_changes(found)}" if found
            else unnamed or "its inputs changed since")
    return f"{artifact} was built from other inputs ({what}): {rerun}"


def _show(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."
