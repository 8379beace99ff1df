"""Texts (`--text`/`--text_b`, `--text_file`) as a BERT export's string inputs or tf.Examples."""

import numpy as np

from bert_tf import fileio

# The BERT exports' string inputs: (first text, second text) per signature kind (a
# single-sentence classifier exported with single_segment=True takes `text_a` alone).
_TEXT_INPUTS = [("text", None), ("text_a", None), ("text_a", "text_b"), ("question", "context")]


def read_text_file(path: str) -> tuple[list[str], list[str | None], list[str]]:
    """(texts, second texts (None where a line has no tab), `path:line` of each) of a file."""
    try:
        data = fileio.read_bytes(path)  # a local file or a tf.io.gfile URI (gs://)
    except OSError as e:
        raise ValueError(f"--text_file: cannot read {path}: {e.strerror or e}") from None
    data = data.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ValueError(
            f"--text_file {path}:{line}: not UTF-8 ({e.reason}: byte {data[e.start]:#04x})"
        ) from None
    texts, texts_b, sources = [], [], []
    for number, line in enumerate(content.split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        text, tab, text_b = line.partition("\t")
        texts.append(text)
        texts_b.append(text_b if tab else None)
        sources.append(f"{path}:{number}")
    if not texts:
        raise ValueError(f"--text_file {path}: no texts in the file")
    return texts, texts_b, sources


def pair_texts(
    second: str, text: list[str], text_b: list[str | None], sources: list[str] | None = None
) -> list[str]:
    """The second input per text; a classifier's (`text_b`) defaults to "" (single sentence)."""
    if second == "text_b" and (not text_b or list(text_b) == [""]):
        return [""] * len(text)
    if len(text_b) != len(text):
        what = " (a SQuAD context is required)" if second == "context" else ""
        raise ValueError(
            f"--text_b needs one value per --text for input {second!r}{what}: "
            f"got {len(text)} --text and {len(text_b)} --text_b"
        )
    for i, value in enumerate(text_b):
        if value is None and second != "text_b":
            where = sources[i] if sources else f"text {i + 1}"
            raise ValueError(f"{where}: no {second} (write `text<TAB>{second}`)")
    return ["" if value is None else value for value in text_b]


def text_inputs(
    input_names: list[str],
    text: list[str],
    text_b: list[str | None],
    sources: list[str] | None = None,
) -> dict:
    """Maps --text/--text_b onto the signature's string inputs (see _TEXT_INPUTS).

    `text_b`: empty (or one "") for single-sentence classifiers, else one per text (None: not
    given for that row; "" for `text_b`, an error for a SQuAD context, named by `sources`).
    """
    for first, second in _TEXT_INPUTS:
        if set(input_names) == {first, second} - {None}:
            inputs = {first: np.array(text, dtype=object)}
            if second:
                inputs[second] = np.array(pair_texts(second, text, text_b, sources), dtype=object)
            elif any(text_b):  # (one empty --text_b, or lines without a tab: none given)
                raise ValueError(f"--text_b is not used: the signature's only input is {first!r}")
            return inputs
    raise ValueError(f"signature inputs {sorted(input_names)} are not text inputs this CLI knows")


def text_examples(text: list[str], text_b: list[str | None]) -> list[dict]:
    """tf.Example features per text for classify/regress: `text_a` (+ `text_b` when given)."""
    pairs = pair_texts("text_b", text, text_b)
    return [{"text_a": a} | ({"text_b": b} if b else {}) for a, b in zip(text, pairs, strict=True)]
