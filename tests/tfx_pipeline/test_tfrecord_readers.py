"""The pipeline's TFRecord readers (the Trainer's and evaluators' `trainer_lib.transformed_dataset`,
`SquadEvaluator`'s questions) refuse a GZIP file cut short, naming it, where TFRecordDataset
would read part of it without an error: a stream cut in its trailer, or whose data ends inside
a record header."""

import gzip
import re

import pytest
import tensorflow as tf

from tfx_pipeline import trainer_lib
from tfx_pipeline.components import squad_evaluator

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)


def _example(i: int) -> bytes:
    feature = {
        "id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[f"q{i}".encode()])),
        "question": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"who?"])),
        "context": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"someone"])),
        "answers": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"someone"])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _write(path, count: int) -> bytes:
    """`count` examples as a GZIP TFRecord file (as Transform and ExampleGen write them); returns
    the uncompressed framing."""
    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for i in range(count):
            writer.write(_example(i))
    return gzip.decompress(path.read_bytes())


def _damage(folder, kind: str):
    """folder/data-00000-of-00002.gz (whole) and folder/data-00001-of-00002.gz cut short."""
    _write(folder / "data-00000-of-00002.gz", 8)
    path = folder / "data-00001-of-00002.gz"
    raw = _write(path, 8)
    if kind == "cut_gzip_trailer":  # all records there, the copy cut in the last 8 bytes
        path.write_bytes(path.read_bytes()[:-3])
    else:  # a copy of the uncompressed framing cut inside a record header, then compressed
        path.write_bytes(gzip.compress(raw + raw[:5]))
    return path


KINDS = ["cut_gzip_trailer", "cut_in_header"]


@pytest.mark.parametrize("kind", KINDS)
def test_transformed_dataset_refuses_a_truncated_file(tmp_path, kind):
    path = _damage(tmp_path, kind)
    assert sum(1 for _ in tf.data.TFRecordDataset(str(path), compression_type="GZIP")) == 8
    spec = {"label": tf.io.FixedLenFeature([], tf.int64)}
    with pytest.raises(
        ValueError,
        match=rf"{re.escape(str(path))}: corrupt or truncated TFRecord after 8 good records",
    ):
        trainer_lib.transformed_dataset([str(tmp_path / "*.gz")], spec, 4, training=False)
    path.unlink()
    dataset = trainer_lib.transformed_dataset([str(tmp_path / "*")], spec, 4, False)
    assert sum(int(batch["label"].shape[0]) for batch in dataset) == 8


@pytest.mark.parametrize("kind", KINDS)
def test_squad_evaluator_refuses_a_truncated_file(tmp_path, kind):
    path = _damage(tmp_path, kind)
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}: corrupt or truncated"):
        squad_evaluator.read_questions(str(tmp_path))
    path.unlink()
    assert len(squad_evaluator.read_questions(str(tmp_path))) == 8
