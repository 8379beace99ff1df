"""Shared by the tests that drive the HF transformers reference environment (`.venv-ref`)."""

import ast
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What a reference-side script must not import: .venv-ref has none of them, and `python -m` from
# the repo root would find the project's packages, so such an import would only fail there, late.
_PROJECT_AND_TENSORFLOW = {"bert_tf", "serving", "tfx_pipeline", "tensorflow", "keras", "bench"}


def _clean_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MAKE", "MFLAGS", "VIRTUAL_ENV", "PYTHONPATH"))
    }


@pytest.fixture
def clean_env() -> dict[str, str]:
    """os.environ without what a make or venv above this pytest (`make test`) would leak into a
    nested make, pip or interpreter."""
    return _clean_env()


def _reference_script_imports(script: Path) -> set[str]:
    tree = ast.parse(script.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
    imported = {name.split(".")[0] for name in names}
    assert not imported & _PROJECT_AND_TENSORFLOW, f"{script} imports {imported}"
    return imported


@pytest.fixture
def reference_script_imports():
    """f(script): the top-level packages `script` imports, asserted free of the project and TF."""
    return _reference_script_imports


@pytest.fixture(scope="session")
def reference_python() -> Path:
    """`make reference-env` run (about a minute from nothing, then reused); its interpreter."""
    made = subprocess.run(
        ["make", "-C", str(REPO), "reference-env"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    return REPO / ".venv-ref" / "bin" / "python"
