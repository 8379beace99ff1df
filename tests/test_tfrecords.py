"""bert_tf.tfrecords and its callers: a TFRecord file cut short or with a corrupt record header is
refused, naming the file, the byte offset and the good records, wherever the project reads
TFRecords (TFRecordDataset reads a file cut inside a record header as a shorter, valid one).

The pipeline's readers are tested in tests/tfx_pipeline/test_tfrecord_readers.py, the serving
warmup in tests/serving/test_warmup_framing.py.
"""

import gzip
import os
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import tensorflow as tf

from bert_tf import tfrecords
from bert_tf.tasks import pretraining

SEQ, PRED = 32, 5


@pytest.fixture(scope="module")
def data(tiny_pretraining_data):
    return tiny_pretraining_data(max_seq_length=SEQ, max_predictions_per_seq=PRED)


def record_offsets(raw: bytes) -> list[int]:
    """Each record's offset, following the length fields."""
    offsets, pos = [], 0
    while pos < len(raw):
        offsets.append(pos)
        pos += 16 + struct.unpack_from("<Q", raw, pos)[0]
    return offsets


def damage(raw: bytes, kind: str) -> tuple[bytes, int, int]:
    """`raw` damaged at a middle record: (bytes, that record's offset, the records before it)."""
    offsets = record_offsets(raw)
    good = len(offsets) // 2
    at = offsets[good]
    if kind == "cut_in_header":  # what TFRecordDataset reads as a clean end of file
        return raw[: at + 5], at, good
    if kind == "cut_in_record":
        return raw[: at + 20], at, good
    assert kind == "flipped_length_crc"
    flipped = bytearray(raw)
    flipped[at + 9] ^= 0x10
    return bytes(flipped), at, good


def message(path, at: int, good: int, decompressed: bool = False) -> str:
    where = " of the decompressed data" if decompressed else ""
    return (
        rf"{re.escape(str(path))}: corrupt or truncated TFRecord after {good} good records, "
        rf"at byte offset {at}{where} \("
    )


KINDS = ["cut_in_header", "cut_in_record", "flipped_length_crc"]


def test_record_counts_match_tensorflow(data, tmp_path):
    path = str(data.input_file)
    assert tfrecords.check_tfrecord_file(path) == data.count
    assert data.count == sum(1 for _ in tf.data.TFRecordDataset(path))
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    assert tfrecords.check_tfrecord_files([path, str(empty)]) == [data.count, 0]


def test_crc32c_implementations_agree():
    assert tfrecords._crc32c_python(b"123456789") == 0xE3069283  # the CRC-32C check value
    for data in [b"", b"\x00" * 8, bytes(range(256)), os.urandom(8), os.urandom(100)]:
        assert tfrecords._crc32c_python(data) == tfrecords._crc32c(data)


def test_masked_crc_is_tensorflows(tmp_path):
    path = str(tmp_path / "one.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(b"abc")
    with open(path, "rb") as f:
        header = f.read(12)
    assert struct.pack("<I", tfrecords.masked_crc32c(header[:8])) == header[8:]


@pytest.mark.parametrize("kind", KINDS)
def test_damaged_file_is_named_with_offset_and_good_records(data, tmp_path, kind):
    raw, at, good = damage(data.input_file.read_bytes(), kind)
    path = tmp_path / f"{kind}.tfrecord"
    path.write_bytes(raw)
    with pytest.raises(ValueError, match=message(path, at, good)):
        tfrecords.check_tfrecord_file(str(path))
    with pytest.raises(ValueError, match=message(path, at, good)):
        pretraining.check_pretraining_file(str(path), SEQ, PRED)
    # Every file the patterns match is checked, not only the first or the first record.
    (tmp_path / "a-good.tfrecord").write_bytes(data.input_file.read_bytes())
    with pytest.raises(ValueError, match=message(path, at, good)):
        pretraining.read_pretraining_dataset(str(tmp_path / "*.tfrecord"), SEQ, PRED)


def test_remote_files_are_walked_as_a_stream(data):
    """Non-local paths (gs://...) are read sequentially rather than seeked: `ram://` stands in."""
    raw = data.input_file.read_bytes()
    with tf.io.gfile.GFile("ram://tfrecords/good.tfrecord", "wb") as f:
        f.write(raw)
    assert tfrecords.check_tfrecord_file("ram://tfrecords/good.tfrecord") == data.count
    for kind in KINDS:
        damaged, at, good = damage(raw, kind)
        path = f"ram://tfrecords/{kind}.tfrecord"
        with tf.io.gfile.GFile(path, "wb") as f:
            f.write(damaged)
        with pytest.raises(ValueError, match=message(path, at, good)):
            tfrecords.check_tfrecord_file(path)


def _gzip_records(path: Path, records: list[bytes], compression="GZIP") -> bytes:
    with tf.io.TFRecordWriter(str(path), options=compression) as writer:
        for record in records:
            writer.write(record)
    return path.read_bytes()


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_compressed_files(data, tmp_path, compression):
    records = list(tf.data.TFRecordDataset(str(data.input_file)).as_numpy_iterator())
    path = tmp_path / "records.gz"
    compressed = _gzip_records(path, records, compression)
    assert tfrecords.check_tfrecord_file(str(path), compression) == len(records)
    # A compressed stream cut short: mid-way, or only its end marker (GZIP: the trailer, which
    # TensorFlow does not miss). The framing got as far as some whole record.
    for cut in (len(compressed) // 2, 4):
        path.write_bytes(compressed[:-cut])
        with pytest.raises(ValueError, match=r"ends before its end-of-stream marker"):
            tfrecords.check_tfrecord_file(str(path), compression)
    path.write_bytes(compressed + b"garbage")
    with pytest.raises(ValueError, match=r"records\.gz: .* \(corrupt compressed data"):
        tfrecords.check_tfrecord_file(str(path), compression)
    path.write_bytes(data.input_file.read_bytes())
    with pytest.raises(ValueError, match=message(path, 0, 0, decompressed=True)):
        tfrecords.check_tfrecord_file(str(path), compression)


@pytest.mark.parametrize("kind", KINDS)
def test_damaged_framing_inside_a_whole_gzip_stream(data, tmp_path, kind):
    """A copy cut short before compressing: TFRecordDataset reads the cut-in-header one as a
    shorter file."""
    damaged, at, good = damage(data.input_file.read_bytes(), kind)
    path = tmp_path / "records.gz"
    path.write_bytes(gzip.compress(damaged))
    with pytest.raises(ValueError, match=message(path, at, good, decompressed=True)):
        tfrecords.check_tfrecord_file(str(path), "GZIP")


def test_gzip_members_and_large_records(tmp_path):
    """Concatenated GZIP members are one file (as for TensorFlow); records that decompress to
    more than one output chunk are walked whole."""
    records = [b"\0" * (9 << 20), b"small", b"\0" * (5 << 20)]
    path = tmp_path / "large.gz"
    compressed = _gzip_records(path, records)
    assert tfrecords.check_tfrecord_file(str(path), "gzip") == 3
    raw = zlib.decompress(compressed, 16 + zlib.MAX_WBITS)
    path.write_bytes(gzip.compress(raw[:100]) + gzip.compress(raw[100:]))
    assert tfrecords.check_tfrecord_file(str(path), "GZIP") == 3
    assert sum(1 for _ in tf.data.TFRecordDataset(str(path), compression_type="GZIP")) == 3
    path.write_bytes(gzip.compress(raw[:-5]))
    with pytest.raises(ValueError, match=r"after 2 good records, .*runs 5 bytes past the end"):
        tfrecords.check_tfrecord_file(str(path), "GZIP")


def test_a_file_changed_since_its_check_is_checked_again(data, tmp_path):
    path = tmp_path / "growing.tfrecord"
    raw = data.input_file.read_bytes()
    path.write_bytes(raw)
    assert tfrecords.check_tfrecord_file(str(path)) == data.count
    with open(path, "ab") as f:  # a copy still under way
        f.write(raw[:5])
    with pytest.raises(ValueError, match=message(path, len(raw), data.count)):
        tfrecords.check_tfrecord_file(str(path))


def test_a_rewrite_of_the_same_size_without_modification_times_is_checked_again():
    """`ram://` keeps no modification time: a file rewritten with the same size but other
    records must not get the first file's cached count. One record of 26 bytes and two of 5
    take 42 bytes each (16 bytes of framing per record)."""
    path = "ram://tfrecords/rewritten.tfrecord"
    for records in ([b"x" * 26], [b"y" * 5, b"z" * 5]):
        if tf.io.gfile.exists(path):  # ram:// appends to an existing file: replaced
            tf.io.gfile.remove(path)
        with tf.io.TFRecordWriter(path) as writer:
            for record in records:
                writer.write(record)
        assert tf.io.gfile.stat(path).length == 42
        assert tfrecords.check_tfrecord_file(path) == len(records)


def test_bad_compression_type(data):
    with pytest.raises(ValueError, match=r"compression_type: expected '', 'GZIP' or 'ZLIB'"):
        tfrecords.check_tfrecord_file(str(data.input_file), "SNAPPY")


def test_run_pretraining_refuses_a_half_copied_shard(data, tmp_path):
    """As a program: exit status 1 with the one-line error, before any output is written."""
    raw, at, good = damage(data.input_file.read_bytes(), "cut_in_header")
    path = tmp_path / "half.tfrecord"
    path.write_bytes(raw)
    output_dir = tmp_path / "out"
    argv = data.argv(output_dir, input_file=path, num_train_steps=2, num_warmup_steps=1)
    result = subprocess.run(
        [sys.executable, "-m", "bert_tf.run_pretraining", *argv],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch("error: " + message(path, at, good) + r".*\)", last), last
    assert not output_dir.exists()  # no checkpoint, no config: nothing
