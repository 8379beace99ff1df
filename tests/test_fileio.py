"""bert_tf.fileio: the one write-to-temp-then-rename, for local paths and tf.io.gfile URIs."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import tensorflow as tf

from bert_tf import fileio

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)


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


def test_local_folder_appears_whole_or_not_at_all(tmp_path):
    path = tmp_path / "1"
    with fileio.atomic_dir(path) as tmp:
        (Path(tmp) / "variables").mkdir()
        (Path(tmp) / "saved_model.pb").write_text("pb")
        assert not path.exists()
    assert (path / "saved_model.pb").read_text() == "pb"
    assert stat.S_IMODE(path.stat().st_mode) == 0o777 & ~fileio.umask()
    with pytest.raises(FileExistsError, match="already exists"), fileio.atomic_dir(path):
        pass
    with pytest.raises(RuntimeError), fileio.atomic_dir(tmp_path / "2") as tmp:
        (Path(tmp) / "saved_model.pb").write_text("half")
        raise RuntimeError("disk full")
    assert sorted(os.listdir(tmp_path)) == ["1"]  # no temp folder, no "2"


def test_remote_folder_moves_file_by_file_top_level_last(monkeypatch):
    # ram:// renames a folder's entry but not its files, like an object store without folder
    # renames: the files must move one by one.
    root = "ram://fileio_dir_test"
    moved = []
    rename = tf.io.gfile.rename
    monkeypatch.setattr(
        tf.io.gfile, "rename", lambda a, b, **kw: moved.append(b) or rename(a, b, **kw)
    )
    with fileio.atomic_dir(f"{root}/1", prefix=".tmp-export-") as tmp:
        tf.io.gfile.makedirs(f"{tmp}/variables")
        tf.io.gfile.makedirs(f"{tmp}/empty")
        for name in ("saved_model.pb", "variables/variables.index"):
            with tf.io.gfile.GFile(f"{tmp}/{name}", "w") as f:
                f.write(name)
        assert not tf.io.gfile.exists(f"{root}/1")
    assert moved == [f"{root}/1/variables/variables.index", f"{root}/1/saved_model.pb"]
    with tf.io.gfile.GFile(f"{root}/1/variables/variables.index") as f:
        assert f.read() == "variables/variables.index"
    assert tf.io.gfile.isdir(f"{root}/1/empty")
    assert sorted(tf.io.gfile.listdir(root)) == ["1"]

    def fail_second(a, b, **kw):  # a failure part-way through the move
        if moved:
            raise OSError("connection reset")
        moved.append(b)
        rename(a, b, **kw)

    moved.clear()
    monkeypatch.setattr(tf.io.gfile, "rename", fail_second)
    with pytest.raises(OSError, match="connection reset"), fileio.atomic_dir(f"{root}/2") as tmp:
        tf.io.gfile.makedirs(f"{tmp}/variables")
        for name in ("saved_model.pb", "variables/variables.index"):
            with tf.io.gfile.GFile(f"{tmp}/{name}", "w") as f:
                f.write(name)
    assert sorted(tf.io.gfile.listdir(root)) == ["1"]  # neither "2" nor the temp folder


@pytest.mark.parametrize("remote", [False, True])
def test_move_tree_moves_every_file(tmp_path, remote):
    root = "ram://fileio_move_test" if remote else str(tmp_path)
    source, target = f"{root}/export-staging/1", f"{root}/Format-Serving"
    tf.io.gfile.makedirs(f"{source}/variables")
    for name in ("saved_model.pb", "variables/variables.index"):
        with tf.io.gfile.GFile(f"{source}/{name}", "w") as f:
            f.write(name)
    fileio.move_tree(source, target)
    for name in ("saved_model.pb", "variables/variables.index"):
        with tf.io.gfile.GFile(f"{target}/{name}") as f:
            assert f.read() == name
    left = [names for _, _, names in tf.io.gfile.walk(f"{root}/export-staging")]
    assert not any(left), left  # nothing stays behind
