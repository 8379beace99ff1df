"""The README's layout table is the tree: every library module has its line, every path exists."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("bert_tf", "serving", "tfx_pipeline", "demo")


def _layout_rows() -> list[str]:
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ")]


def _first_column_paths(rows: list[str]) -> list[str]:
    return [p for row in rows for p in re.findall(r"`([^`]+)`", row.split("|")[1])]


def test_every_module_has_one_line():
    listed = _first_column_paths(_layout_rows())
    modules = sorted(
        str(p.relative_to(REPO))
        for package in PACKAGES
        for p in (REPO / package).rglob("*.py")
        if p.name != "__init__.py"
    )
    missing = [m for m in modules if m not in listed]
    assert not missing, f"README.md's layout table lacks {missing}"
    repeated = sorted({m for m in modules if listed.count(m) > 1})
    assert not repeated, f"README.md's layout table lists {repeated} more than once"


def test_every_listed_path_exists():
    listed = _first_column_paths(_layout_rows())
    assert listed, "README.md: no layout table under '## Layout'"
    absent = [p for p in listed if not (REPO / p.rstrip("/")).exists()]
    assert not absent, f"README.md's layout table names paths that do not exist: {absent}"
