"""GLUE task readers (official TSV layouts) and metrics, plus a generic text-classification task.

Processors follow google-research/bert `run_classifier.py` (and the GLUE tasks it lacks, as in
the GLUE baselines): `train.tsv`, `dev.tsv` (MNLI: `dev_matched.tsv`, `mnli-mm`:
`dev_mismatched.tsv`) and `test.tsv` in `data_dir`, tab-separated without quoting.

| task      | text_a / text_b columns       | label                         | metrics          |
|-----------|-------------------------------|-------------------------------|------------------|
| cola      | 3 (no header; test: 1)        | col 1: 0/1                    | mcc, accuracy    |
| sst-2     | 0 (test: 1)                   | col 1: 0/1                    | accuracy         |
| mrpc      | 3, 4                          | col 0: 0/1                    | f1, accuracy     |
| sts-b     | 7, 8                          | last: float 0..5 (regression) | pearson, spearmanr |
| qqp       | 3, 4 (test: 1, 2)             | col 5: 0/1                    | f1, accuracy     |
| mnli(-mm) | 8, 9                          | last: contradiction/entailment/neutral | accuracy |
| qnli      | 1, 2                          | last: entailment/not_entailment | accuracy       |
| rte       | 1, 2                          | last: entailment/not_entailment | accuracy       |
| wnli      | 1, 2                          | last: 0/1                     | accuracy         |
| xnli      | train 0, 1; dev/test 6, 7     | train 2; dev 1: contradiction/entailment/neutral | accuracy |

XNLI is read as google-research's `XnliProcessor` reads it, in Chinese (`zh`): the training file
is XNLI-MT 1.0's `multinli/multinli.train.zh.tsv` (header `premise hypo label`; its label
`contradictory` is `contradiction`), dev and test are XNLI 1.0's `xnli.dev.tsv` /
`xnli.test.tsv` (all languages, header `language gold_label ... sentence1 sentence2 ...`), of
which only the `zh` rows are read.

`text_classification` reads any `train`/`dev`/`test` `.tsv` or `.csv` (any language) with a
header row naming the columns: `label`, the text (`text`, `text_a`, `sentence` or `sentence1`)
and optionally a second text (`text_b` or `sentence2`). Its labels are the sorted distinct
labels of the training file.

Every row must have as many columns as the file's header (CoLA train/dev: exactly 4); errors
name the file, line and what was expected.

Example:

```python
from bert_tf.tasks import glue

processor = glue.get_processor("mrpc")
train = processor.get_train_examples("glue_data/MRPC")  # [InputExample(guid="train-1", ...)]
processor.get_labels("glue_data/MRPC")  # ["0", "1"]
glue.compute_metrics("mrpc", predictions=[1, 0, 1], labels=[1, 1, 1])
# {"accuracy": 0.667, "f1": 0.8}
```
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import sys
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from bert_tf import fileio
from bert_tf.flags_util import decode_utf8

TRAIN, DEV, TEST = "train", "dev", "test"


@dataclasses.dataclass(frozen=True)
class InputExample:
    """One example: `label` is a class name, a float (regression) or None (test sets)."""

    guid: str
    text_a: str
    text_b: str | None
    label: str | float | None


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Column indexes of one split's file; `label` may be negative (from the end)."""

    text_a: int
    text_b: int | None
    label: int | None
    header: bool = True
    num_columns: int | None = None  # without a header: the exact column count
    language: int | None = None  # XNLI: only rows whose column holds the processor's language


class DataProcessor:
    """Reads one task's splits; subclasses give the layouts, labels and metric names."""

    name = ""
    labels: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ("accuracy",)
    is_regression = False
    dev_file = "dev.tsv"
    label_aliases: ClassVar[dict[str, str]] = {}  # a file's label -> the task's name for it
    language = ""  # with a layout's `language` column: the rows kept

    def layout(self, split: str) -> _Layout:
        raise NotImplementedError

    def get_labels(self, data_dir: str | os.PathLike) -> list[str]:
        """Class names (index = class id); `[]` for regression."""
        del data_dir
        return list(self.labels)

    def single_segment(self, data_dir: str | os.PathLike) -> bool:
        """Whether the task's examples have one text (no `text_b`): from its layout."""
        del data_dir
        return self.layout(TRAIN).text_b is None

    def split_file(self, data_dir: str | os.PathLike, split: str) -> str:
        name = {TRAIN: "train.tsv", DEV: self.dev_file, TEST: "test.tsv"}[split]
        return os.path.join(data_dir, name)

    def get_train_examples(self, data_dir: str | os.PathLike) -> list[InputExample]:
        return self.get_examples(data_dir, TRAIN)

    def get_dev_examples(self, data_dir: str | os.PathLike) -> list[InputExample]:
        return self.get_examples(data_dir, DEV)

    def get_test_examples(self, data_dir: str | os.PathLike) -> list[InputExample]:
        return self.get_examples(data_dir, TEST)

    def get_examples(self, data_dir: str | os.PathLike, split: str) -> list[InputExample]:
        path = self.split_file(data_dir, split)
        layout = self.layout(split)
        rows = _read_rows(path, "\t")
        if layout.header:
            if not rows:
                raise ValueError(f"{path}: empty file, expected a header line")
            num_columns = len(rows[0][1])
            rows = rows[1:]
        else:
            num_columns = layout.num_columns
        columns = (layout.text_a, layout.text_b, layout.label, layout.language)
        used = [i for i in columns if i is not None]
        needed = max(i if i >= 0 else -i - 1 for i in used) + 1
        if num_columns < needed:
            raise ValueError(
                f"{path}: header has {num_columns} columns, the {self.name} {split} layout "
                f"needs at least {needed}"
            )
        labels = None if self.is_regression else self.get_labels(data_dir)
        examples = []
        for line_number, row in rows:
            if len(row) != num_columns:
                raise ValueError(
                    f"{path}:{line_number}: {len(row)} tab-separated columns, expected "
                    f"{num_columns} ({self.name} {split} layout)"
                )
            if layout.language is not None and row[layout.language] != self.language:
                continue
            label = None
            if layout.label is not None:
                value = row[layout.label]
                label = _parse_label(
                    self.label_aliases.get(value, value), labels, path, line_number
                )
            examples.append(
                InputExample(
                    guid=f"{split}-{len(examples) + 1}",
                    text_a=row[layout.text_a],
                    text_b=None if layout.text_b is None else row[layout.text_b],
                    label=label,
                )
            )
        return examples


def _read_rows(path: str, delimiter: str) -> list[tuple[int, list[str]]]:
    """(1-based line number, columns) per non-empty line; TSV without quoting as in GLUE."""
    if not fileio.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    # GLUE texts contain quotes and long fields (MNLI parses): no quoting, no field limit.
    csv.field_size_limit(sys.maxsize)
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    # Through tf.io.gfile for a URI: the data folder may be a bucket (gs://).
    text = decode_utf8(fileio.read_bytes(path), path).removeprefix("\ufeff")  # a spreadsheet's BOM
    # strict: an unclosed quote is an error, not the rest of the file read as one field.
    reader = csv.reader(
        io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting, strict=True
    )
    rows = []
    while True:
        start = reader.line_num + 1  # a quoted field may span lines: name the row's first
        try:
            row = next(reader)
        except StopIteration:
            return rows
        except csv.Error as e:  # Python 3.10's csv refuses a NUL byte ("line contains NUL")
            what = "a NUL byte (not a text file?)" if "NUL" in str(e) else str(e)
            raise ValueError(f"{path}:{start}: cannot parse the row: {what}") from None
        if row and any(c.strip() for c in row):
            rows.append((reader.line_num, row))


def _parse_label(value: str, labels: list[str] | None, path: str, line: int) -> str | float:
    if labels is None:
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"{path}:{line}: label {value!r} is not a number") from None
    if value not in labels:
        raise ValueError(f"{path}:{line}: unknown label {value!r}, expected one of {labels}")
    return value


class ColaProcessor(DataProcessor):
    name, labels, metrics = "cola", ("0", "1"), ("mcc", "accuracy")

    def layout(self, split):
        if split == TEST:
            return _Layout(text_a=1, text_b=None, label=None)
        return _Layout(text_a=3, text_b=None, label=1, header=False, num_columns=4)


class Sst2Processor(DataProcessor):
    name, labels = "sst-2", ("0", "1")

    def layout(self, split):
        return _Layout(1, None, None) if split == TEST else _Layout(0, None, 1)


class MrpcProcessor(DataProcessor):
    name, labels, metrics = "mrpc", ("0", "1"), ("f1", "accuracy")

    def layout(self, split):
        return _Layout(3, 4, None if split == TEST else 0)


class StsbProcessor(DataProcessor):
    name, metrics, is_regression = "sts-b", ("pearson", "spearmanr"), True

    def layout(self, split):
        return _Layout(7, 8, None if split == TEST else -1)


class QqpProcessor(DataProcessor):
    name, labels, metrics = "qqp", ("0", "1"), ("f1", "accuracy")

    def layout(self, split):
        return _Layout(1, 2, None) if split == TEST else _Layout(3, 4, 5)


class MnliProcessor(DataProcessor):
    name, labels = "mnli", ("contradiction", "entailment", "neutral")
    dev_file = "dev_matched.tsv"

    def layout(self, split):
        return _Layout(8, 9, None if split == TEST else -1)

    def split_file(self, data_dir, split):
        if split == TEST:
            return os.path.join(data_dir, self.dev_file.replace("dev", "test"))
        return super().split_file(data_dir, split)


class MnliMismatchedProcessor(MnliProcessor):
    name, dev_file = "mnli-mm", "dev_mismatched.tsv"


class QnliProcessor(DataProcessor):
    name, labels = "qnli", ("entailment", "not_entailment")

    def layout(self, split):
        return _Layout(1, 2, None if split == TEST else -1)


class RteProcessor(QnliProcessor):
    name = "rte"


class WnliProcessor(QnliProcessor):
    name, labels = "wnli", ("0", "1")


class XnliProcessor(DataProcessor):
    """XNLI in Chinese, as google-research's `XnliProcessor` reads it (module docstring)."""

    name, labels, language = "xnli", ("contradiction", "entailment", "neutral"), "zh"
    label_aliases: ClassVar[dict[str, str]] = {"contradictory": "contradiction"}  # XNLI-MT's

    def layout(self, split):
        if split == TRAIN:
            return _Layout(0, 1, 2)
        return _Layout(6, 7, None if split == TEST else 1, language=0)

    def split_file(self, data_dir, split):
        if split == TRAIN:
            return os.path.join(data_dir, "multinli", f"multinli.train.{self.language}.tsv")
        return os.path.join(data_dir, f"xnli.{split}.tsv")


class TextClassificationProcessor(DataProcessor):
    """Any `train`/`dev`/`test` `.tsv`/`.csv` with a header; see the module docstring."""

    name = "text_classification"
    TEXT_A = ("text", "text_a", "sentence", "sentence1")
    TEXT_B = ("text_b", "sentence2")

    def split_file(self, data_dir, split):
        candidates = [os.path.join(data_dir, f"{split}.{ext}") for ext in ("tsv", "csv")]
        found = [p for p in candidates if fileio.isfile(p)]
        if not found:
            raise FileNotFoundError(f"{data_dir}: expected {split}.tsv or {split}.csv")
        return found[0]

    def get_labels(self, data_dir):
        examples = self.get_examples(data_dir, TRAIN, known_labels=False)
        return sorted({e.label for e in examples})

    def single_segment(self, data_dir):
        """Whether the training file's header has no second text column."""
        return self.get_examples(data_dir, TRAIN, known_labels=False)[0].text_b is None

    def get_examples(self, data_dir, split, known_labels: bool = True):
        path = self.split_file(data_dir, split)
        rows = _read_rows(path, "," if path.endswith(".csv") else "\t")
        if not rows:
            raise ValueError(f"{path}: empty file, expected a header line")
        header = [c.strip().lower() for c in rows[0][1]]
        text_a = next((header.index(c) for c in self.TEXT_A if c in header), None)
        text_b = next((header.index(c) for c in self.TEXT_B if c in header), None)
        label = header.index("label") if "label" in header else None
        if text_a is None or (label is None and split != TEST):
            raise ValueError(
                f"{path}:1: header {rows[0][1]} needs a 'label' column and a text column named "
                f"one of {list(self.TEXT_A)} (optional second text: {list(self.TEXT_B)})"
            )
        labels = self.get_labels(data_dir) if known_labels and label is not None else None
        examples = []
        for line_number, row in rows[1:]:
            if len(row) != len(header):
                raise ValueError(
                    f"{path}:{line_number}: {len(row)} columns, expected {len(header)} "
                    f"as in the header {rows[0][1]}"
                )
            value = None
            if label is not None and split != TEST:
                value = row[label]
                if labels is not None and value not in labels:
                    raise ValueError(
                        f"{path}:{line_number}: unknown label {value!r}, expected one of the "
                        f"training labels {labels}"
                    )
            examples.append(
                InputExample(
                    guid=f"{split}-{len(examples) + 1}",
                    text_a=row[text_a],
                    text_b=None if text_b is None else row[text_b],
                    label=value,
                )
            )
        if not examples:
            raise ValueError(f"{path}: no examples after the header")
        return examples


PROCESSORS: dict[str, type[DataProcessor]] = {
    p.name: p
    for p in (
        ColaProcessor,
        Sst2Processor,
        MrpcProcessor,
        StsbProcessor,
        QqpProcessor,
        MnliProcessor,
        MnliMismatchedProcessor,
        QnliProcessor,
        RteProcessor,
        WnliProcessor,
        XnliProcessor,
        TextClassificationProcessor,
    )
}


def get_processor(task_name: str) -> DataProcessor:
    """The processor of a task name (case-insensitive; "sst2"/"stsb" also accepted)."""
    key = task_name.lower()
    key = {"sst2": "sst-2", "stsb": "sts-b"}.get(key, key)
    if key not in PROCESSORS:
        raise ValueError(
            f"--task_name: unknown task {task_name!r}, expected one of {list(PROCESSORS)}"
        )
    return PROCESSORS[key]()


def compute_metrics(
    task_name: str, predictions: Sequence | np.ndarray, labels: Sequence | np.ndarray
) -> dict[str, float]:
    """The task's official metrics: predictions are class ids (or scores for STS-B)."""
    from scipy import stats
    from sklearn import metrics

    processor = get_processor(task_name)
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    scorers = {
        "accuracy": lambda: metrics.accuracy_score(labels, predictions),
        "f1": lambda: metrics.f1_score(labels, predictions),
        "mcc": lambda: metrics.matthews_corrcoef(labels, predictions),
        "pearson": lambda: stats.pearsonr(predictions, labels)[0],
        "spearmanr": lambda: stats.spearmanr(predictions, labels)[0],
    }
    return {name: float(scorers[name]()) for name in processor.metrics}
