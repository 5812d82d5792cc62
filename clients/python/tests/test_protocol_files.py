"""The package ships the repository's protocol files byte for byte."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from outbox_consumer import scripts

REPO = Path(__file__).resolve().parents[3]


def test_every_script_the_client_runs_is_shipped() -> None:
    for name in scripts.NAMES:
        text = scripts.source(name)
        assert text.startswith("-- outbox consumer protocol"), name
        assert len(scripts.sha1(name)) == 40


def test_the_shipped_sql_is_the_rust_librarys() -> None:
    repo_sql = REPO / "consumer" / "sql"
    if not repo_sql.is_dir():
        pytest.skip("not run from the repository")
    shipped = resources.files("outbox_consumer").joinpath("protocol").joinpath("sql")
    for path in sorted(repo_sql.glob("*.sql")):
        assert shipped.joinpath(path.name).read_bytes() == path.read_bytes(), path.name
