"""Every registered platform has its row everywhere a row per platform is kept: the local
platform, its local fixture, its kill-path flavor, its vendor-facts page, and each per-platform
table of the docs. A platform added to ``PLATFORMS`` fails here until it has all of them
(``docs/adding-a-platform.md``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_training_devel.killpaths.flavors import FLAVORS
from airflow_training_devel.local_fixtures import LOCAL_FIXTURES
from airflow_training_platform.platforms import LOCAL_PLATFORMS
from airflow_training_provider.platforms import PLATFORMS

ROOT = Path(__file__).resolve().parents[2]
DIALECT_NAMES = sorted(p.dialect.name for p in PLATFORMS.values())
VENDOR_WORDS = {"AWS", "Alibaba", "Huawei", "Cloud", "AI"}
"""Words of a display name that name the vendor, not the platform (the tables use the rest)."""


def short_names() -> dict[str, str]:
    """Each platform's name as the docs' tables write it: ``AWS SageMaker`` → ``SageMaker``."""
    return {
        p.dialect.name: " ".join(w for w in p.display_name.split() if w not in VENDOR_WORDS)
        for p in PLATFORMS.values()
    }


def table(path: str, header: str) -> str:
    """The markdown table of ``path`` whose header row starts with ``header``."""
    lines = (ROOT / path).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return "\n".join(rows)


def test_the_code_registries_name_the_same_platforms():
    assert sorted(LOCAL_FIXTURES) == sorted(PLATFORMS), "a LocalFixture per platform (local_fixtures.py)"
    assert sorted(FLAVORS) == sorted(PLATFORMS), "a kill-path Flavor per platform (killpaths/flavors.py)"
    assert sorted(p.name for p in LOCAL_PLATFORMS) == DIALECT_NAMES, "an emulator per platform"
    assert {f.conn_id for f in LOCAL_FIXTURES.values()} == {f.conn_id for f in FLAVORS.values()}


@pytest.mark.parametrize("name", DIALECT_NAMES)
def test_each_platform_has_its_vendor_facts_page_listed_in_the_docs_index(name):
    assert (ROOT / "docs" / "platforms" / f"{name}.md").is_file()
    assert f"(platforms/{name}.md)" in (ROOT / "docs" / "README.md").read_text()


@pytest.mark.parametrize(
    ("path", "header"),
    [
        ("README.md", "| guard |"),
        ("docs/platforms/README.md", "| normalized |"),
        ("docs/ui.md", "| platform | per-epoch curves from"),
    ],
)
def test_each_per_platform_table_has_every_platform(path, header):
    text = table(path, header)
    missing = [short for short in short_names().values() if not re.search(rf"\b{re.escape(short)}\b", text)]
    assert not missing, f"{path}: the table starting {header!r} lacks {missing}"
