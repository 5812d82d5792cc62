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


def test_the_shipped_scripts_and_golden_data_are_the_repositorys() -> None:
    """What scripts/sync_protocol.sh --check says too: the package's copies are the bytes of
    consumer/protocol and core/protocol."""
    sources = [REPO / "consumer" / "protocol", REPO / "core" / "protocol"]
    if not sources[0].is_dir():
        pytest.skip("not run from the repository")
    shipped = resources.files("outbox_consumer").joinpath("protocol")
    for folder, pattern in (("scripts", "*.lua"), ("golden", "*.json")):
        for source in sources:
            for path in sorted((source / folder).glob(pattern)):
                copy = shipped.joinpath(folder).joinpath(path.name)
                assert copy.is_file(), f"{path.name} not shipped: run scripts/sync_protocol.sh"
                assert copy.read_bytes() == path.read_bytes(), (
                    f"{path.name} differs from the repository's: run scripts/sync_protocol.sh"
                )
