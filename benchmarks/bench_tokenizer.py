"""The counting tokenizer's own share of a scan, measured on ``tokenizers`` itself: its load in every form it can be
built from, how much of that load leaves the GIL free, and its encoding cost per sample and per token.

Why: end to end, a 1,200-sample scan (``benchmarks/bench_scan.py``) is mostly two things vlmpack does not run
itself: deserialising the folder's tokenizer (Qwen's: 151k vocabulary entries and merges) and encoding the rendered
texts. Issue 38's 120x end to end needs the whole scan in 1,200 / (120 x the baseline's samples/s) seconds; this
script shows how much of that the library alone takes, so the figure in docs/performance.md can be checked.

In one process, on the tokenizer the scan itself counts with (the folder's snapshot, ``tokens/tokenizer_snapshot.py``),
the forms alternating, ``--repeat`` times each (min / median / max wall ms):

    from_file                 ``Tokenizer.from_file`` of the snapshot (what the scan does)
    from_file, vocab sorted   the same JSON with the vocabulary's keys in byte order (the same tokenizer)
    tokenizer less its model  the same JSON with an empty vocabulary and no merges: everything but the BPE model
    BPE.from_file             the model alone from vocab.json + merges.txt (tokenizers' own readers)
    BPE(vocab, merges)        the model alone from Python objects, their reading from the same two files included

Every form is checked to build the same state as ``from_file`` (``__getstate__`` JSON equal; the model forms
against the model's) before it is timed; one that does not is reported and not timed. Then:

    GIL free during the load  a thread runs ``from_file`` while this one counts loop turns; the rate of
                              counting against counting alone (100%: the load never holds the GIL)
    encoding                  ``--samples`` texts shaped as bench_scan.py's (its image counts, question and
                              answer texts: ``IMAGES_PER_SAMPLE``, ``question``, ``answer``) rendered with the folder's chat
                              template, encoded as the scan encodes them (the snapshot's call), per sample and
                              per token

    python benchmarks/bench_tokenizer.py [--family qwen2_5_vl] [--repeat 7] [--samples 1200]

Run it with ``RAYON_NUM_THREADS=1`` to match bench_scan.py's one core.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shlex
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import tokenizers
from bench_scan import IMAGES_PER_SAMPLE, answer, question  # the scan benchmark's own sample texts

from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens.spans import ChatRenderer
from vlmpack_offline.tokens.tokenizer_snapshot import TokenizerSnapshot, load_counting_tokenizer

_BPE_OPTIONS = ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", "byte_fallback",
                "ignore_merges")  # fmt: skip


def _state(obj) -> dict:
    return json.loads(obj.__getstate__())


def _merge_pairs(merges: list) -> list[tuple[str, str]]:
    """tokenizer.json's merges, either form: ``["a", "b"]`` or the older ``"a b"``."""
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in merges]


def load_forms(text: str, root: Path) -> tuple[dict[str, Callable[[], object]], list[str]]:
    """{name: build} for each form that builds the same state as ``from_file`` (module doc), and notes on the rest."""
    from tokenizers import Tokenizer, models

    state = json.loads(text)
    (root / "backend.json").write_text(text, encoding="utf-8")
    reference = Tokenizer.from_file(str(root / "backend.json"))
    forms: dict[str, Callable[[], object]] = {"from_file": lambda: Tokenizer.from_file(str(root / "backend.json"))}
    notes: list[str] = []
    model = state["model"]
    if model.get("type") != "BPE":
        return forms, [f"the model is {model.get('type')}, not BPE: only from_file is timed"]

    ordered = dict(state, model=dict(model, vocab=dict(sorted(model["vocab"].items(), key=lambda kv: kv[0].encode()))))
    (root / "sorted.json").write_text(json.dumps(ordered, ensure_ascii=False), encoding="utf-8")
    forms["from_file, vocab sorted"] = lambda: Tokenizer.from_file(str(root / "sorted.json"))
    (root / "rest.json").write_text(json.dumps(dict(state, model=dict(model, vocab={}, merges=[]))), encoding="utf-8")
    forms["tokenizer less its model"] = lambda: Tokenizer.from_file(str(root / "rest.json"))

    pairs = _merge_pairs(model["merges"])
    options = {k: model[k] for k in _BPE_OPTIONS if model.get(k) is not None}
    if any(" " in a or " " in b or "\n" in a + b for a, b in pairs):
        notes.append("a merge holds a space or newline: merges.txt cannot carry it, the file forms are not timed")
    else:
        vocab, merges = root / "vocab.json", root / "merges.txt"
        vocab.write_text(json.dumps(model["vocab"], ensure_ascii=False), encoding="utf-8")
        merges.write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in pairs), encoding="utf-8")

        def from_objects():
            lines = merges.read_text(encoding="utf-8").splitlines()[1:]
            return models.BPE(json.loads(vocab.read_text(encoding="utf-8")),
                              [tuple(line.split(" ", 1)) for line in lines], **options)  # fmt: skip

        forms["BPE.from_file"] = lambda: models.BPE.from_file(str(vocab), str(merges), **options)
        forms["BPE(vocab, merges)"] = from_objects
    whole, model_state = _state(reference), _state(reference.model)
    for name, build in list(forms.items()):
        if name == "tokenizer less its model":
            continue  # a part of the tokenizer, timed for its share
        built = build()
        if _state(built) != (whole if isinstance(built, Tokenizer) else model_state):
            notes.append(f"{name}: builds a different state, not timed")
            del forms[name]
    return forms, notes


def time_forms(forms: dict[str, Callable[[], object]], repeat: int) -> dict[str, list[float]]:
    """Wall seconds per form, the forms alternating in each round; a full collection before each build."""
    times: dict[str, list[float]] = {name: [] for name in forms}
    for _ in range(repeat):
        for name, build in forms.items():
            gc.collect()
            start = time.perf_counter()
            built = build()
            times[name].append(time.perf_counter() - start)
            del built
    return times


def _spin(until: Callable[[], bool]) -> tuple[int, float]:
    turns, start = 0, time.perf_counter()
    while not until():
        turns += 1
    return turns, time.perf_counter() - start


def gil_free_share(path: Path, repeat: int) -> list[float]:
    """Per round: this thread's counting rate while another runs ``Tokenizer.from_file(path)``, over its rate alone."""
    from tokenizers import Tokenizer

    shares = []
    for _ in range(repeat):
        done = threading.Event()
        worker = threading.Thread(target=lambda done=done: (Tokenizer.from_file(str(path)), done.set()))
        worker.start()
        turns, seconds = _spin(done.is_set)
        worker.join()
        stop = time.perf_counter() + seconds
        alone, alone_s = _spin(lambda stop=stop: time.perf_counter() >= stop)
        shares.append((turns / seconds) / (alone / alone_s))
    return shares


def texts(renderer: ChatRenderer, samples: int, seed: int = 0) -> list[str]:
    """bench_scan.py's sample shapes (its image counts, question and answer texts), rendered with one pad per image
    (what the scan tokenizes)."""
    rng = random.Random(seed)
    conversations = []
    for _ in range(samples):
        user = [{"type": "image"} for _ in range(rng.choice(IMAGES_PER_SAMPLE))]
        user.append({"type": "text", "text": question(rng)})
        conversations.append([{"role": "user", "content": user}, {"role": "assistant", "content": answer(rng)}])
    return renderer.render_many(conversations)


def _spread(values: list[float], scale: float = 1e3) -> str:
    return " / ".join(f"{v * scale:.0f}" for v in (min(values), statistics.median(values), max(values)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", default="qwen2_5_vl", help="a synthetic processor folder (processor_dir.py)")
    parser.add_argument("--repeat", type=int, default=7, help="rounds of the load forms (min / median / max)")
    parser.add_argument("--samples", type=int, default=1200, help="rendered texts encoded per pass")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["VLMPACK_CACHE_DIR"] = str(root / "cache")
        folder = build_processor_dir(root / "processor", args.family)
        load_counting_tokenizer(str(folder))  # the folder's first load: transformers' tokenizer, its snapshot saved
        snapshot = load_counting_tokenizer(str(folder))  # what every later scan reads
        if not isinstance(snapshot, TokenizerSnapshot):
            print(f"{args.family}: the scan counts with transformers' tokenizer here (no snapshot): nothing to time")
            return 1
        forms, notes = load_forms(snapshot.backend.to_str(), root)
        gc.collect()
        gc.freeze()  # the start-up heap, as the scan's workers freeze it: collections see only what the loads make
        loads = time_forms(forms, args.repeat)
        shares = gil_free_share(root / "backend.json", args.repeat)
        rendered = texts(ChatRenderer(snapshot.chat_template, snapshot.special_tokens_map), args.samples)
        tokens = sum(len(ids) for ids in snapshot(rendered, add_special_tokens=False)["input_ids"])
        passes = []
        for _ in range(args.repeat):
            start = time.process_time()
            snapshot(rendered, add_special_tokens=False)
            passes.append(time.process_time() - start)
    print("command:", shlex.join(["python", "benchmarks/bench_tokenizer.py", *(sys.argv[1:] if argv is None else argv)]))
    print(f"{args.family}: vocabulary {snapshot.backend.get_vocab_size(with_added_tokens=True):,} entries; "
          f"tokenizers {tokenizers.__version__}; RAYON_NUM_THREADS={os.environ.get('RAYON_NUM_THREADS', '-')}")
    print(f"load, wall ms min / median / max of {args.repeat} (forms alternating):")
    for name, values in loads.items():
        print(f"  {name:26s} {_spread(values)}")
    for note in notes:
        print(f"  ({note})")
    print(f"GIL free during from_file: {_spread(shares, 100)} % (min / median / max; 100: never held)")
    median = statistics.median(passes)
    print(f"encoding {args.samples} rendered samples ({tokens:,} tokens), CPU ms min / median / max: "
          f"{_spread(passes)}; {median / args.samples * 1e6:.0f} us per sample, {median / tokens * 1e6:.2f} us per token")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
