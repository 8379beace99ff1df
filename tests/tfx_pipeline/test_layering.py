"""The packages' layering: bert_tf <- serving <- tfx_pipeline <- demo. No module imports a package
above its own, at module level or inside a function (a function-local import would only hide the
cycle). Here, not in tests/, because this folder's targets depend on every package it reads."""

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

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


def _is_script(path: Path) -> bool:
    return 'if __name__ == "__main__"' in path.read_text(encoding="utf-8")


def imported_modules(path: Path) -> set[tuple[str, int]]:
    """(dotted project module, line) of every import in the file; `from a import b` names both
    `a` and `a.b` (b may be a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update((n, node.lineno) for n in names if n.split(".")[0] in PROJECT)
    return found


# Library modules that can also be run, and why they are one module: `fetch` is the data API
# (`fetch.path(...)`) and `python -m bert_tf.data.fetch` only calls it (`make data`). (The
# client's command line is serving/client/__main__.py, beside its library modules.)
RUNNABLE_LIBRARIES = {"bert_tf.data.fetch"}


def test_no_script_is_imported_as_a_library():
    """Scripts (modules run as `python -m ...`) are thin mains over library modules: no project
    module imports one (tests may, to run their `main`)."""
    sources = [p for package in sorted(PROJECT) for p in sorted((REPO / package).rglob("*.py"))]
    module_of = {
        ".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p
        for p in sources
    }
    scripts = {name for name, path in module_of.items() if _is_script(path)}
    assert {"bert_tf.run_classifier", "serving.export", "tfx_pipeline.run"} <= scripts
    wrong = [
        f"{path.relative_to(REPO)}:{line}: imports the script {module}"
        for path in sources
        for module, line in sorted(imported_modules(path))
        if module in scripts - RUNNABLE_LIBRARIES and module_of[module] != path
    ]
    assert not wrong, "\n".join(wrong)


# A library module does one job (#38): past this many lines it has usually grown a second one.
MAX_LIBRARY_LINES = 500


def test_no_library_file_over_500_lines():
    long = {
        str(path.relative_to(REPO)): n
        for package in ("bert_tf", "serving", "tfx_pipeline")
        for path in (REPO / package).rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LIBRARY_LINES
    }
    assert not long, f"library files over {MAX_LIBRARY_LINES} lines (split them): {long}"
