"""The counting tokenizer without transformers' tokenizer classes: the Rust tokenizer transformers built, saved once.

Why: ``AutoTokenizer`` imports torch (about 2 s) and rebuilds the Rust tokenizer from its vocabulary and merges
(about 0.7 s for Qwen's) in every scan, every rerun and every Ray worker: most of a small scan's wall time.
Counting needs little of it: ``tokenizer(texts, add_special_tokens=False)["input_ids"]``, the chat template, the
special tokens and their ids. So the first load of a folder saves the backend ``tokenizers.Tokenizer`` that
transformers built (``to_str``) with those few facts, under a hash of the folder's files and the versions of
transformers and tokenizers; later loads read it back with ``tokenizers`` alone.

Exact by construction and by check. A snapshot is written only where the loaded class tokenizes through
``TokenizersBackend``'s own ``_encode_plus`` (``transformers/tokenization_utils_tokenizers.py``: truncation and
padding off, ``encode_special_tokens`` from ``split_special_tokens``, then ``encode_batch``), and only after its
ids and token ids equal the loaded tokenizer's on probe texts (every added token, the rendered chat template,
whitespace, scripts, a long text). Anything else (remote code, a slow or sentencepiece-only tokenizer, a probe
that differs, a cache that cannot be written) loads ``AutoTokenizer`` as before.

Read ahead: deserialising a large vocabulary is most of a small scan's start (0.35-0.5 s for Qwen's 151k tokens
and merges). ``tokenizers`` (0.23) holds the GIL for most of ``Tokenizer.from_file`` (a thread spinning beside it
stalls until near its end) but not all of it, and the scan's start waits on the disk in places (sqlite's syncs,
hashing the processor folder) where the GIL is free. So ``prefetch_counting_tokenizer`` starts the read in a thread
as soon as a scan knows it has work (``stages/scan.run``); ``load_counting_tokenizer`` takes the thread's result
(waiting for it, and failing over exactly as a read in place does). Measured on ``benchmarks/bench_scan.py``'s end
to end, five alternating pairs with and without it: 0.17 s less wall time (medians), the same CPU seconds; on a
slower machine, no difference either way (``benchmarks/bench_tokenizer.py``: the GIL is free for 6-25% of the
read there; docs/performance.md). A fork waits for every read in flight first (``os.register_at_fork``), so a
forked worker never holds a half-read tokenizer.

Cache: ``$VLMPACK_CACHE_DIR`` else ``~/.cache/vlmpack``, ``tokenizers/<key>/`` (the proof cache's root).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..disk_cache import cache_dir, key_of

log = logging.getLogger(__name__)

__all__ = ["TokenizerSnapshot", "load_counting_tokenizer", "prefetch_counting_tokenizer", "snapshot_key"]

_FORMAT = 1  # bump when what is saved changes
_PROBES = (
    "", " ", "  leading and trailing  ", "\n\n\t mixed\r\nwhitespace \u00a0\u3000", "Hello, world! 12345 3.14159",
    "ünïcödé naïve café 你好世界 こんにちは 안녕하세요 مرحبا שלום Привет 🙂👍🏽", "a" * 300, "<not_a_token> </s> [INST]",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Added:
    """One added token as counting reads it (``tokens/counter.py::_cut_points``)."""

    content: str
    special: bool
    normalized: bool
    lstrip: bool
    rstrip: bool


@dataclass(slots=True, kw_only=True)
class TokenizerSnapshot:
    """What the counter reads from a tokenizer, served by the saved backend (module doc).

    Not frozen: the counter sets ``chat_template`` where the processor's own template is used, as it does on an
    HF tokenizer."""

    backend: Any  # tokenizers.Tokenizer
    chat_template: str | dict | None
    special_tokens_map: dict
    unk_token_id: int | None
    split_special_tokens: bool
    added_tokens_decoder: dict[int, _Added]
    class_name: str  # the transformers class it was saved from, for messages
    token_attributes: dict[str, str] = field(default_factory=dict)  # image_token, boi_token, ... where set
    ascii_normalizer: Any = None  # the backend's normalizer where it leaves ASCII text as it is (_ascii_identity)

    def __call__(self, text: str | Sequence[str], *, add_special_tokens: bool = True) -> dict[str, list]:
        """``{"input_ids": ...}`` as ``TokenizersBackend.__call__`` gives it for plain text (one list per text).

        ASCII texts skip the normalizer where it cannot change them (``_ascii_identity``): the same ids, a tenth
        less of the tokenizer's time on ``benchmarks/bench_scan.py``'s texts; the others go through it."""
        batch = [text] if isinstance(text, str) else list(text)
        plain = [] if self.ascii_normalizer is None else [i for i, t in enumerate(batch) if t.isascii()]
        if not plain:
            ids = self._encode(batch, add_special_tokens)
        elif len(plain) == len(batch):
            ids = self._without_normalizer(batch, add_special_tokens)
        else:
            ids = [[] for _ in batch]
            rest = [i for i, t in enumerate(batch) if not t.isascii()]
            for index, found in zip(plain, self._without_normalizer([batch[i] for i in plain], add_special_tokens),
                                    strict=True):  # fmt: skip
                ids[index] = found
            for index, found in zip(rest, self._encode([batch[i] for i in rest], add_special_tokens), strict=True):
                ids[index] = found
        return {"input_ids": ids[0] if isinstance(text, str) else ids}

    def _encode(self, batch: list[str], add_special_tokens: bool) -> list[list[int]]:
        # encode_batch_fast: encode_batch less the character offsets (the same ids; a sixth less CPU), where the
        # installed tokenizers has it
        encode = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)
        return [encoding.ids for encoding in encode(batch, add_special_tokens=add_special_tokens)] if batch else []

    def _without_normalizer(self, batch: list[str], add_special_tokens: bool) -> list[list[int]]:
        """``_encode`` of ASCII texts with the normalizer off for the call (set back whatever happens)."""
        self.backend.normalizer = None
        try:
            return self._encode(batch, add_special_tokens)
        finally:
            self.backend.normalizer = self.ascii_normalizer

    def convert_tokens_to_ids(self, token: str) -> int | None:
        """The token's id, else the unknown token's (HF's ``_convert_token_to_id_with_added_voc``)."""
        found = self.backend.token_to_id(token)
        return self.unk_token_id if found is None else found

    def __getattr__(self, name: str) -> str:
        """Media-token attributes (``image_token`` ...) the family modules read with ``getattr(t, name, None)``."""
        if name.startswith("__") or name == "token_attributes":  # copy / pickle probes before the fields are set
            raise AttributeError(name)
        try:
            return self.token_attributes[name]
        except KeyError:
            raise AttributeError(name) from None


def load_counting_tokenizer(path: str, *, trust_remote_code: bool = False):
    """The snapshot of ``path``'s tokenizer where one is saved or can be made, else the HF tokenizer
    (``counter.load_tokenizer``): both count the same ids (module doc)."""
    key = None if trust_remote_code else snapshot_key(path)
    if key is not None:
        found = _read(_cache_dir() / key)
        if found is not None:
            return found
    from .counter import load_tokenizer

    tokenizer = load_tokenizer(path, trust_remote_code=trust_remote_code)
    if key is not None:
        snapshot = _snapshot_of(tokenizer)
        if snapshot is not None:
            _write(_cache_dir() / key, snapshot)
    return tokenizer


def prefetch_counting_tokenizer(path: str, *, trust_remote_code: bool = False) -> None:
    """Start reading ``path``'s saved snapshot in a thread, where one is saved (module doc); a no-op otherwise."""
    if trust_remote_code:
        return
    directory = _cache_dir() / snapshot_key(path)
    if directory not in _READ_AHEAD and (directory / "facts.json").is_file():
        _READ_AHEAD[directory] = _ReadAhead(directory / "backend.json")


class _ReadAhead:
    """``tokenizers.Tokenizer.from_file(path)`` in a daemon thread; ``result`` waits and returns or raises it."""

    __slots__ = ("_thread", "_backend", "_error")

    def __init__(self, path: Path) -> None:
        self._backend = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, args=(path,), name="vlmpack-tokenizer-read", daemon=True)
        self._thread.start()

    def _read(self, path: Path) -> None:
        try:
            import tokenizers

            self._backend = tokenizers.Tokenizer.from_file(str(path))
        except BaseException as exc:  # noqa: BLE001 - raised where the result is taken, as a read in place raises
            self._error = exc

    def wait(self) -> None:
        self._thread.join()

    def result(self):
        self.wait()
        if self._error is not None:
            raise self._error
        return self._backend


_READ_AHEAD: dict[Path, _ReadAhead] = {}  # cache folder -> its backend's read, taken by _read


def _settle_reads() -> None:
    """Before a fork: every read in flight finishes (the child would hold a thread that no longer runs)."""
    for read in list(_READ_AHEAD.values()):
        read.wait()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_settle_reads)


def snapshot_key(path: str) -> str:
    """A hash of the folder's tokenizer files, the versions that build a tokenizer from them, and this format."""
    return key_of(folder=path, sources=("tokens/tokenizer_snapshot.py",), packages=("transformers", "tokenizers"),
                  extra=_FORMAT)


def _cache_dir() -> Path:
    return cache_dir("tokenizers")


# -- making one -------------------------------------------------------------------------------------------
def _snapshot_of(tokenizer) -> TokenizerSnapshot | None:
    """A snapshot that counts exactly as ``tokenizer`` does, or None where that cannot be shown."""
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    kind = type(tokenizer)
    if not (isinstance(tokenizer, TokenizersBackend) and kind._encode_plus is TokenizersBackend._encode_plus
            and kind.__call__ is PreTrainedTokenizerBase.__call__):  # fmt: skip
        log.debug("%s: no tokenizer snapshot (its own tokenizing code)", kind.__name__)
        return None
    import tokenizers

    backend = tokenizers.Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    snapshot = _build(
        backend,
        chat_template=tokenizer.chat_template,
        special_tokens_map=json.loads(json.dumps(tokenizer.special_tokens_map)),
        unk_token_id=tokenizer.unk_token_id,
        split_special_tokens=bool(tokenizer.split_special_tokens),
        added=[(i, _added(t)) for i, t in tokenizer.added_tokens_decoder.items()],
        class_name=kind.__name__,
        token_attributes=_token_attributes(tokenizer),
    )
    problem = _differs(tokenizer, snapshot)
    if problem:
        log.warning("%s: tokenizer snapshot not used (%s); loading it with transformers each time", kind.__name__, problem)
        return None
    return snapshot


def _added(token) -> _Added:
    return _Added(content=str(token.content), special=bool(token.special), normalized=bool(token.normalized),
                  lstrip=bool(token.lstrip), rstrip=bool(token.rstrip))  # fmt: skip


def _token_attributes(tokenizer) -> dict[str, str]:
    """Every named special token (``SPECIAL_TOKENS_ATTRIBUTES``: the folder's media tokens among them, served by
    the tokenizer's ``__getattr__``) and string attribute named ``*_token``: what HF processors read off it."""
    found = {}
    names = {*getattr(tokenizer, "SPECIAL_TOKENS_ATTRIBUTES", ()), *dir(tokenizer)}
    for name in sorted(names):
        if name.endswith("_token") and not name.startswith("_"):
            try:
                value = getattr(tokenizer, name)
            except Exception:  # noqa: BLE001 - a property that needs something unset is simply not an attribute here
                continue
            if isinstance(value, str) and value:
                found[name] = value
    return found


def _build(backend, *, added: list[tuple[int, _Added]], **facts) -> TokenizerSnapshot:
    backend.no_truncation()  # as TokenizersBackend.set_truncation_and_padding leaves it for a plain call
    backend.no_padding()
    backend.encode_special_tokens = facts["split_special_tokens"]
    ascii_normalizer = backend.normalizer if _ascii_identity(backend) else None
    return TokenizerSnapshot(backend=backend, added_tokens_decoder=dict(added), ascii_normalizer=ascii_normalizer,
                             **facts)  # fmt: skip


_UNICODE_FORMS = frozenset({"NFC", "NFD", "NFKC", "NFKD"})  # each maps every ASCII character to itself


def _ascii_identity(backend) -> bool:
    """Whether an ASCII text gets the same ids from ``backend`` with its normalizer off: the normalizer is Unicode
    normal forms only (``tokenizers``' ``normalizers/unicode.rs``: ASCII is its own NFC, NFD, NFKC and NFKD), and
    every added token the backend matches on normalized text is ASCII itself (``added_vocabulary.rs`` matches those
    on their normalized content: a U+212A KELVIN SIGN token is "K" under NFC and matches an ASCII "K" only with the
    normalizer on)."""
    if backend.normalizer is None:
        return False
    try:
        state = json.loads(backend.normalizer.__getstate__())
        added = list(backend.get_added_tokens_decoder().values())
    except Exception:  # noqa: BLE001 - a normalizer without a JSON state: kept on for every text
        return False
    forms = state.get("normalizers", []) if state.get("type") == "Sequence" else [state]
    return (bool(forms) and all(isinstance(f, dict) and f.get("type") in _UNICODE_FORMS for f in forms)
            and all(t.content.isascii() for t in added if t.normalized))  # fmt: skip


def _probe_texts(tokenizer) -> list[str]:
    added = [t.content for t in tokenizer.added_tokens_decoder.values()]
    texts = [*_PROBES, *added, " ".join(added), "x".join(added), f"\n{' '.join(added)} \n"]
    texts += [f"word{t}word {t} {t}\n" for t in added[:64]]
    chat = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Describe it. 你好"},
            {"role": "assistant", "content": "A cat sits on a mat.\n\nIt is red."}]  # fmt: skip
    try:
        texts.append(tokenizer.apply_chat_template(chat, tokenize=False))
    except Exception:  # noqa: BLE001 - a template that needs other roles: the probes above still run
        pass
    texts.append(" ".join(texts) * 20)  # a long text
    return texts


def _differs(tokenizer, snapshot: TokenizerSnapshot) -> str:
    """What differs between the two on the probes ("" when nothing does)."""
    texts = _probe_texts(tokenizer)
    for special in (False, True):
        theirs = tokenizer(texts, add_special_tokens=special)["input_ids"]
        ours = snapshot(texts, add_special_tokens=special)["input_ids"]
        for text, a, b in zip(texts, theirs, ours, strict=True):
            if list(a) != list(b):
                return f"ids differ on {text[:40]!r}"
    names = [t.content for t in tokenizer.added_tokens_decoder.values()]
    names += [v for v in snapshot.token_attributes.values()] + ["<surely-not-a-token-xyz>"]
    for name in names:
        if tokenizer.convert_tokens_to_ids(name) != snapshot.convert_tokens_to_ids(name):
            return f"the id of {name!r} differs"
    return ""


# -- the cache --------------------------------------------------------------------------------------------
def _write(directory: Path, snapshot: TokenizerSnapshot) -> None:
    """Best effort (a read-only home costs the next run a transformers load); a folder appears whole or not at all."""
    temporary = directory.with_name(f".{directory.name}.{os.getpid()}.tmp")
    try:
        temporary.mkdir(parents=True, exist_ok=True)
        (temporary / "backend.json").write_text(snapshot.backend.to_str())
        facts = {
            "format": _FORMAT, "chat_template": snapshot.chat_template, "special_tokens_map": snapshot.special_tokens_map,
            "unk_token_id": snapshot.unk_token_id, "split_special_tokens": snapshot.split_special_tokens,
            "added": [[i, t.content, t.special, t.normalized, t.lstrip, t.rstrip]
                      for i, t in snapshot.added_tokens_decoder.items()],
            "class_name": snapshot.class_name, "token_attributes": snapshot.token_attributes,
        }  # fmt: skip
        (temporary / "facts.json").write_text(json.dumps(facts))
        os.replace(temporary, directory)
    except OSError as exc:
        log.debug("tokenizer snapshot not saved in %s: %s", directory, exc)
        shutil.rmtree(temporary, ignore_errors=True)


def _read(directory: Path) -> TokenizerSnapshot | None:
    ahead = _READ_AHEAD.pop(directory, None)  # taken whatever follows: a stale read is never used twice
    try:
        facts = json.loads((directory / "facts.json").read_text())
        if facts.get("format") != _FORMAT:
            return None
        if ahead is not None:
            backend = ahead.result()
        else:
            import tokenizers

            backend = tokenizers.Tokenizer.from_file(str(directory / "backend.json"))
        added = [(int(i), _Added(content=c, special=s, normalized=n, lstrip=ls, rstrip=rs))
                 for i, c, s, n, ls, rs in facts["added"]]  # fmt: skip
        return _build(
            backend, added=added, chat_template=facts["chat_template"], special_tokens_map=facts["special_tokens_map"],
            unk_token_id=facts["unk_token_id"], split_special_tokens=bool(facts["split_special_tokens"]),
            class_name=str(facts["class_name"]), token_attributes=dict(facts["token_attributes"]),
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - any damage (unreadable, not JSON, fields missing): load it afresh
        if (directory / "facts.json").exists():
            log.debug("tokenizer snapshot in %s not read: %s", directory, exc)
        return None
