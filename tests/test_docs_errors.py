"""docs/errors.md names every drop reason the code can record, so no reason reaches a user undocumented."""

from __future__ import annotations

import re
from pathlib import Path

from vlmpack_offline.reasons import SHARD_REASONS, Reason

DOC = (Path(__file__).resolve().parents[1] / "docs" / "errors.md").read_text()


def _table_rows(heading: str) -> set[str]:
    """The reasons in the first column of the table under ``heading``."""
    section = DOC.split(heading, 1)[1].split("\n#", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M))


def test_every_reason_has_a_row():
    sample_rows, shard_rows = _table_rows("### One sample"), _table_rows("### A whole shard")
    for reason in Reason:
        expected = shard_rows if reason in SHARD_REASONS else sample_rows
        assert reason.value in expected, f"docs/errors.md has no row for `{reason.value}`"


def test_no_row_names_an_unknown_reason():
    documented = _table_rows("### One sample") | _table_rows("### A whole shard")
    assert documented <= {r.value for r in Reason}, documented - {r.value for r in Reason}
