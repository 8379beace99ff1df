"""The command line's output lines: a signature's outputs, classes and regression values."""

import json

import numpy as np


def format_output(name: str, value) -> str:
    """One readable line per output: strings decoded, floats rounded, big arrays summarised."""
    array = np.asarray(value)
    if array.dtype == object or array.dtype.kind == "S":
        array = (
            np.vectorize(
                lambda v: v.decode("utf-8", "replace") if isinstance(v, bytes) else v,
                otypes=[object],
            )(array)
            if array.size
            else array
        )
    text = np.array2string(array, precision=4, threshold=20, edgeitems=3, separator=", ")
    dtype = "string" if array.dtype.kind in "OU" else array.dtype
    return f"{name} {list(array.shape)} {dtype}: {text}"


def _quoted(text: str, limit: int = 60) -> str:
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return json.dumps(text, ensure_ascii=False)


def _row_name(text: str, text_b: str | None) -> str:
    return _quoted(text) + (f" | {_quoted(text_b)}" if text_b else "")


def format_classes(
    texts: list[str], texts_b: list[str | None], results: list[list[tuple[str, float]]]
) -> list[str]:
    """One line per input: its texts, then `label score` pairs, best first."""
    lines = []
    for text, text_b, classes in zip(texts, texts_b, results, strict=True):
        ranked = sorted(enumerate(classes), key=lambda item: -item[1][1])
        pairs = ", ".join(f"{label or f'#{i}'} {score:.4f}" for i, (label, score) in ranked)
        lines.append(f"{_row_name(text, text_b)}: {pairs}")
    return lines


def format_values(texts: list[str], texts_b: list[str | None], values: list[float]) -> list[str]:
    return [
        f"{_row_name(text, text_b)}: {value:.6g}"
        for text, text_b, value in zip(texts, texts_b, values, strict=True)
    ]
