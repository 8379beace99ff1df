"""Reading pretraining TFRecords (`bert_tf.tasks.pretraining.records`' layout, or the original
tool's): each file checked (framing and first record) before reading, then parsed into the model's
inputs and the masked-LM/NSP labels as a tf.data pipeline (file shuffling, interleave, shuffle
buffer, batches).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence

import tensorflow as tf
from absl import logging

# Records (google-research names) -> model inputs (bert_tf.modeling.models names).
from bert_tf.tasks.pretraining.records import MODEL_INPUT_NAMES, expand_file_patterns, feature_spec
from bert_tf.tfrecords import check_tfrecord_file


def _check_example(record: bytes, spec: dict, where: str) -> None:
    """Raises ValueError naming `where` and the feature if a record does not match `spec`."""
    try:
        # protobuf's C++ backend parses up to a stray end-group tag, returns what it has and
        # only warns ("Not all data was converted"); TF's parser then fails on the record.
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            example = tf.train.Example.FromString(record)
    except Exception as e:  # protobuf's DecodeError or that warning: not a tf.train.Example
        raise ValueError(f"{where}: not a serialized tf.train.Example ({e})") from None
    features = example.features.feature
    for name, feature_spec_ in spec.items():
        if name not in features:
            raise ValueError(f"{where}: feature {name!r} is missing")
        kind = "float_list" if feature_spec_.dtype == tf.float32 else "int64_list"
        if features[name].WhichOneof("kind") != kind:
            raise ValueError(
                f"{where}: feature {name!r} is a {features[name].WhichOneof('kind')}, "
                f"expected {kind}"
            )
        length = len(getattr(features[name], kind).value)
        if length != feature_spec_.shape[0]:
            raise ValueError(
                f"{where}: feature {name!r} has {length} values, expected "
                f"{feature_spec_.shape[0]} (check max_seq_length / max_predictions_per_seq)"
            )


def _op_message(error: tf.errors.OpError) -> str:
    """TF's error message without the internal function and op names around it."""
    message = re.sub(r"\{\{[^}]*\}\}\s*", "", error.message)
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", message, flags=re.S).strip()


def check_pretraining_file(path: str, max_seq_length: int, max_predictions_per_seq: int) -> int:
    """Reads a whole file, checking every record; returns the record count.

    Raises ValueError naming the file and record on a corrupt or truncated record or a record
    with a missing, wrong-typed or wrong-length feature.
    """
    spec = feature_spec(max_seq_length, max_predictions_per_seq)
    # TFRecordDataset reads a file cut inside a record header as a shorter, valid one.
    check_tfrecord_file(path)
    count = 0
    try:
        for count, record in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator(), 1):
            _check_example(record, spec, f"{path} record {count}")
    except tf.errors.DataLossError as e:
        raise ValueError(
            f"{path}: corrupt or truncated TFRecord after {count} good records ({_op_message(e)})"
        ) from None
    return count


def _parse(records: tf.Tensor, spec: dict) -> dict[str, tf.Tensor]:
    features = tf.io.parse_example(records, spec)
    inputs = {MODEL_INPUT_NAMES[k]: tf.cast(v, tf.int32) for k, v in features.items()}
    inputs["masked_lm_weights"] = features["masked_lm_weights"]
    inputs["next_sentence_labels"] = inputs["next_sentence_labels"][..., 0]
    return inputs


def read_pretraining_dataset(
    file_patterns: str | Sequence[str],
    max_seq_length: int,
    max_predictions_per_seq: int,
    batch_size: int | None = None,
    drop_remainder: bool = False,
    shuffle: bool = False,
    shuffle_buffer_size: int = 10_000,
    seed: int | None = None,
) -> tf.data.Dataset:
    """Pretraining records as model inputs: dicts of `input_word_ids`, `input_mask`,
    `input_type_ids`, `masked_lm_positions`, `masked_lm_ids`, `next_sentence_labels` (int32)
    and `masked_lm_weights` (float32); per example, or batched if `batch_size` is given.

    The framing of every file (`bert_tf.tfrecords.check_tfrecord_file`: a truncated or
    corrupt file) and its first record are checked before the dataset is built (ValueError
    naming the file and the offset or feature, or saying that no file holds a record);
    `check_pretraining_file` checks whole files. `shuffle` shuffles the file order and records
    (in a buffer of `shuffle_buffer_size`), reproducibly with `seed`.
    """
    files = expand_file_patterns(file_patterns, "file_patterns")
    spec = feature_spec(max_seq_length, max_predictions_per_seq)
    empty = []
    for path in files:
        # TFRecordDataset reads a file cut inside a record header as a shorter, valid one.
        if not check_tfrecord_file(path):
            first = None
        else:
            try:
                dataset = tf.data.TFRecordDataset(path).take(1)
                first = next(iter(dataset.as_numpy_iterator()))
            except tf.errors.DataLossError as e:
                raise ValueError(
                    f"{path}: corrupt or truncated TFRecord ({_op_message(e)})"
                ) from None
        if first is None:
            logging.warning("%s holds no records", path)
            empty.append(path)
        else:
            _check_example(first, spec, f"{path} record 1")
    if len(empty) == len(files):
        # A repeated empty dataset would end the first training step with OutOfRangeError.
        names = ", ".join(files[:3]) + " ..." * (len(files) > 3)
        raise ValueError(f"no records in the {len(files)} file(s) {names}: expected TFRecords")

    dataset = tf.data.Dataset.from_tensor_slices(files)
    if shuffle:
        dataset = dataset.shuffle(len(files), seed=seed)
    dataset = dataset.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(len(files), 16),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if shuffle:
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
    if batch_size is None:
        return dataset.map(lambda r: _parse(r, spec), num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    dataset = dataset.map(lambda r: _parse(r, spec), num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)
