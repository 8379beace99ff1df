"""The packages' layering: bert_tf <- serving <- tfx_pipeline <- demo. No module imports a package
above its own, at module level or inside a function (a function-local import would only hide the
cycle). Here, not in tests/, because this folder's targets depend on every package it reads."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Package -> the project packages it may import (itself included).
ALLOWED = {
    "bert_tf": {"bert_tf"},
    "serving": {"bert_tf", "serving"},
    "tfx_pipeline": {"bert_tf", "serving", "tfx_pipeline"},
    "demo": {"bert_tf", "serving", "tfx_pipeline", "demo"},
}
PROJECT = {*ALLOWED, "bench", "experiments"}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(top-level project package, line) of every import in the file, wherever it is."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update((n.split(".")[0], node.lineno) for n in names if n.split(".")[0] in PROJECT)
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_no_import_from_a_higher_layer(package):
    files = sorted((REPO / package).rglob("*.py"))
    assert files, f"no sources of {package} under {REPO}"
    wrong = [
        f"{path.relative_to(REPO)}:{line}: imports {imported}"
        for path in files
        for imported, line in sorted(imported_packages(path))
        if imported not in ALLOWED[package]
    ]
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_a_function_local_upward_import(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import os\n\ndef f():\n    from serving import export\n")
    assert imported_packages(source) == {("serving", 4)}
