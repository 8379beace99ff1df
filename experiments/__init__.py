"""Programs behind docs/results.md: fixed data splits, baselines and the keras-nlp reference run."""

from __future__ import annotations

import json
import os
from pathlib import Path


def report(result: dict, output_file: str | None) -> None:
    """Prints `result` as JSON and, if `output_file` is set, writes it there atomically."""
    text = json.dumps(result, indent=2)
    print(text)
    if output_file:
        path = Path(output_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, path)
