"""Test hook: ``kill -9`` at a named point of a stage, so resume tests do not depend on timing.

``VLMPACK_TEST_KILL_AT=<point>[:<n>]`` SIGKILLs at the n-th time (default 1) this process
passes ``<point>``. Points: ``writing:<file name>`` (an artifact's ``.tmp`` is complete, not yet
renamed), ``wrote:<file name>`` (renamed into place), ``scan:shard`` (a shard's rows
committed), ``scan:part`` (a scan task's part renamed into place, not yet committed by the
driver: ``data.manifest_layout: parts``), ``write:shard`` (an output tar renamed into place), ``write:scratch`` (a
described chunk saved), ``write:upload`` (a shard uploaded to an object-store ``packed_wds_dir``). A process started as its own session (``start_new_session``, as
the tests do) kills its whole group, worker processes included, like ``kill -9`` of a
job; otherwise only itself. Unset (always, outside tests) it costs one dict lookup.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

__all__ = ["kill_point"]

_ENV = "VLMPACK_TEST_KILL_AT"
_passed: Counter[str] = Counter()


def kill_point(name: str) -> None:
    spec = os.environ.get(_ENV)
    if not spec:
        return
    point, _, count = spec.rpartition(":")
    if not count.isdigit():
        point, count = spec, "1"
    if point != name:
        return
    _passed[name] += 1
    if _passed[name] >= int(count):
        if os.getsid(0) == os.getpgrp():  # the stage runs as its own session: take its workers with it
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
