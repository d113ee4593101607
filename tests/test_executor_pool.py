"""``executor.process_map`` on Linux: the initializer runs once, in the parent, and forked workers inherit it.

The scan's initializer loads a tokenizer (about a second); N workers inheriting one load
start at once instead of loading N copies on the same cores. ``own_process`` runs even
a single worker in a process of its own (the write stage's describe pass, so the
parent's writer threads never wait on it for the GIL).
"""

from __future__ import annotations

import os
import sys

import pytest

from vlmpack_offline.executor import process_map

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork start method")

_LOADED: list[int] = []  # pids of the processes where _load ran


def _load(tag: str) -> None:
    _LOADED.append(os.getpid())


def _where(_item: int) -> tuple[tuple[int, ...], int]:
    return tuple(_LOADED), os.getpid()


def test_the_initializer_runs_once_in_the_parent_and_workers_inherit_it():
    _LOADED.clear()
    results = list(process_map(_where, range(6), workers=2, initializer=_load, initargs=("tok",)))
    parent = os.getpid()
    assert _LOADED == [parent]  # loaded here, once
    assert {loaded for loaded, _ in results} == {(parent,)}  # every worker sees that one load
    assert all(pid != parent for _, pid in results)  # and the work ran in the workers
    _LOADED.clear()


@pytest.mark.parametrize(("own_process", "elsewhere"), [(False, False), (True, True)])
def test_one_worker_runs_here_unless_it_gets_a_process_of_its_own(own_process, elsewhere):
    pids = {pid for _, pid in process_map(_where, range(3), workers=1, own_process=own_process)}
    assert (pids != {os.getpid()}) is elsewhere
