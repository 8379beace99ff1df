"""bert_tf.fileio: the one write-to-temp-then-rename, for local paths and tf.io.gfile URIs."""

from __future__ import annotations

import os
import stat

import pytest
import tensorflow as tf

from bert_tf import fileio


def test_local_write_is_all_or_nothing_with_default_permissions(tmp_path):
    path = tmp_path / "out.json"
    with fileio.atomic_open(path, "w") as f:
        f.write("{}\n")
        assert not path.exists()  # readers see nothing until the block ends
    assert path.read_text() == "{}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~fileio.umask()

    with pytest.raises(RuntimeError), fileio.atomic_open(path, "w") as f:
        f.write("half")
        raise RuntimeError("disk full")
    assert path.read_text() == "{}\n"  # the old file, untouched
    assert sorted(os.listdir(tmp_path)) == ["out.json"]  # no temp file left


def test_remote_uris_go_through_gfile():
    # TensorFlow's in-memory filesystem stands in for gs://: same code path (a scheme).
    path = "ram://fileio_test/folder/vocab.txt"
    tf.io.gfile.makedirs("ram://fileio_test/folder")
    fileio.atomic_write_text(path, "[PAD]\n")
    with tf.io.gfile.GFile(path) as f:
        assert f.read() == "[PAD]\n"
    with pytest.raises(ValueError), fileio.atomic_path(path) as tmp:
        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write("partial")
        raise ValueError("stopped")
    assert tf.io.gfile.listdir("ram://fileio_test/folder") == ["vocab.txt"]
    fileio.atomic_copy(path, "ram://fileio_test/folder/copy.txt")
    with tf.io.gfile.GFile("ram://fileio_test/folder/copy.txt") as f:
        assert f.read() == "[PAD]\n"


def test_only_write_modes():
    with pytest.raises(ValueError, match="mode must be 'w' or 'wb'"), fileio.atomic_open("x", "a"):
        pass
