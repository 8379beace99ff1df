"""Programs behind docs/results.md: fixed data splits, baselines and the keras-nlp reference run."""

from __future__ import annotations

import json
import os
from pathlib import Path

# What experiments/hf_parity_reference.py (in .venv-ref) writes for experiments/hf_parity.py:
# this package's __init__ is standard library only, so both environments import it.
HF_PARITY_LOSSES_FILE = "reference_losses.json"
HF_PARITY_WEIGHTS_FILE = "reference_weights.npz"


def _write_atomically(path: Path, write) -> None:
    """`write(tmp)` to a temporary file beside `path`, then renamed: no half-written result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(result: dict, output_file: str | os.PathLike) -> None:
    """`result` as indented JSON at `output_file`, atomically."""
    text = json.dumps(result, indent=2) + "\n"
    _write_atomically(Path(output_file), lambda tmp: tmp.write_text(text, encoding="utf-8"))


def report(result: dict, output_file: str | None) -> None:
    """Prints `result` as JSON and, if `output_file` is set, writes it there atomically."""
    print(json.dumps(result, indent=2))
    if output_file:
        write_json(result, output_file)


def save_figure(fig, path: str | os.PathLike, dpi: int = 100) -> None:
    """A matplotlib figure as PNG at `path`, atomically."""
    _write_atomically(Path(path), lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))


def read_eval_results(path: Path) -> dict[str, float]:
    """`key = value` lines of run_classifier's eval_results.txt; a malformed line is an error."""
    results = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        key, sep, value = line.partition(" = ")
        if not sep:
            raise ValueError(f"{path}:{number}: expected 'key = value', got {line!r}")
        results[key] = float(value)
    return results
