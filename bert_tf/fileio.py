"""Atomic file writes (local or any `tf.io.gfile` URI such as gs://), with the permissions a
plain `open()` would give. The one implementation of write-to-temp-then-rename in the project.

`tempfile.mkstemp`/`mkdtemp` create 0600 files and 0700 folders, so a file written to a temp
name and renamed into place keeps those modes: a `bert_config.json`, `vocab.txt` or exported
SavedModel folder that a TF Serving container running as another user (Kubernetes
`runAsNonRoot`) cannot read. These helpers give such files 0666 and folders 0777 minus the
process umask, like every other file the programs write.

`atomic_path(path)` yields a temporary name beside `path` to write (with any writer: a
`TFRecordWriter`, a copy), renamed onto `path` when the block ends and removed if it raises, so
a reader never sees a half-written file and a failure leaves nothing behind; `atomic_open` is
the same with an open file. `atomic_dir(path)` does the same for a folder (a SavedModel version,
a checkpoint). Local paths go through `os.replace`/`os.rename`; a path with a scheme (`gs://`,
`hdfs://`, ...) through `tf.io.gfile` (object stores have no atomic rename, but the final name
still only ever holds a complete file; a folder's files are moved one by one, the top-level
ones such as `saved_model.pb` last). `replace(source, path)` is the bare rename.

Reading and inspecting a user-given path (`exists`, `isdir`, `isfile`, `read_bytes`,
`read_text`, `makedirs`) also goes through here: plain Python locally, `tf.io.gfile` for a URI,
so a data folder, checkpoint or config in a bucket reads like a local one. The readers under
`bert_tf/` call these, never `open`/`os.path` on a user's path (tests/test_gfile_paths.py
checks that).

Example:

    from bert_tf import fileio
    with fileio.atomic_open("out/predictions.json", "w") as f:
        f.write("{}\\n")
    fileio.atomic_write_text("out/bert_config.json", "{...}\\n")   # 0644 under umask 022
    fileio.atomic_copy("minilm/vocab.txt", "out/vocab.txt")
    with fileio.atomic_dir("gs://bucket/models/bert/3") as tmp:  # "3" appears when filled
        tf.saved_model.save(model, tmp)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

_UMASK_LOCK = threading.Lock()


def umask() -> int:
    """The process umask (read by setting and restoring it; the lock keeps threads consistent)."""
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def apply_default_mode(path: str | os.PathLike) -> None:
    """Gives `path` the mode `open()`/`mkdir()` would have: 0666/0777 minus the umask."""
    mode = 0o777 if os.path.isdir(path) else 0o666
    os.chmod(path, mode & ~umask())


def is_remote(path: str | os.PathLike) -> bool:
    """Whether `path` is a URI with a scheme (gs://, hdfs://, ram://), read through tf.io.gfile."""
    return "://" in os.fspath(path)


def _gfile():
    # TensorFlow only for remote paths: configs.py writes through this module and must stay
    # importable without TensorFlow (flag checks run before it is imported).
    import tensorflow as tf

    return tf.io.gfile


def exists(path: str | os.PathLike) -> bool:
    """Whether `path` (a file or folder, local or a URI) exists."""
    path = os.fspath(path)
    return _gfile().exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder (on an object store: a prefix with objects under it)."""
    path = os.fspath(path)
    return _gfile().isdir(path) if is_remote(path) else os.path.isdir(path)


def isfile(path: str | os.PathLike) -> bool:
    """Whether `path` exists and is not a folder."""
    return exists(path) and not isdir(path)


def read_bytes(path: str | os.PathLike) -> bytes:
    """The whole file; FileNotFoundError "<path>: no such file" if it does not exist."""
    path = os.fspath(path)
    if not is_remote(path):
        with open(path, "rb") as f:
            return f.read()
    gfile = _gfile()
    if not gfile.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    with gfile.GFile(path, "rb") as f:
        return f.read()


def read_text(path: str | os.PathLike) -> str:
    """The whole file as UTF-8 text (UnicodeDecodeError if it is not)."""
    return read_bytes(path).decode("utf-8")


def makedirs(path: str | os.PathLike) -> None:
    """Creates the folder `path` and its parents if missing."""
    path = os.fspath(path)
    if is_remote(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def _not_found() -> type[Exception]:
    import tensorflow as tf

    return tf.errors.NotFoundError


def _temp_name(folder: str, prefix: str) -> str:
    return f"{folder}/{prefix}{os.getpid()}-{uuid.uuid4().hex[:8]}"


def make_temp_dir(parent: str | os.PathLike, prefix: str) -> str:
    """A new folder in `parent` with default permissions, to fill and then rename into place."""
    parent = os.fspath(parent)
    if is_remote(parent):
        tmp = _temp_name(parent.rstrip("/"), prefix)
        _gfile().makedirs(tmp)
        return tmp
    tmp = tempfile.mkdtemp(dir=parent, prefix=prefix)
    apply_default_mode(tmp)
    return tmp


def replace(source: str | os.PathLike, path: str | os.PathLike) -> None:
    """Renames the file `source` onto `path`, replacing it (`os.replace`, or tf.io.gfile's)."""
    source, path = os.fspath(source), os.fspath(path)
    if is_remote(path):
        _gfile().rename(source, path, overwrite=True)
    else:
        os.replace(source, path)


def remove_tree(path: str | os.PathLike) -> None:
    """Removes the folder `path` and everything in it, if it exists."""
    path = os.fspath(path)
    if not is_remote(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    gfile = _gfile()
    if not gfile.exists(path):
        return
    try:
        gfile.rmtree(path)
    except _not_found():
        # ram:// lists `assets.extra/x` in `assets/` too, as `.extra` (a name prefix), which
        # rmtree then cannot find: remove the files that do exist instead.
        for folder, _, names in gfile.walk(path):
            for name in names:
                if gfile.exists(file := f"{folder.rstrip('/')}/{name}"):
                    gfile.remove(file)


def _move_tree(source: str, path: str) -> None:
    # Not every filesystem renames folders (ram:// renames the entry, not the files; gs:// copies
    # object by object anyway): move the files, deeper ones first so that a SavedModel's
    # `saved_model.pb` appears last in the new folder.
    gfile = _gfile()
    files, empty = [], []
    for folder, subfolders, names in gfile.walk(source):
        folder = folder.rstrip("/")
        # exists: ram:// lists `assets.extra/x` in `assets/` too, as `.extra` (a name prefix).
        files += [f"{folder}/{name}" for name in names if gfile.exists(f"{folder}/{name}")]
        if not names and not subfolders:
            empty.append(folder)
    files.sort(key=lambda f: (-f.count("/"), f))
    for name in files:
        target = path + name[len(source) :]
        gfile.makedirs(target.rsplit("/", 1)[0])
        gfile.rename(name, target, overwrite=True)
    for name in empty:
        gfile.makedirs(path + name[len(source) :])


def move_tree(source: str | os.PathLike, path: str | os.PathLike) -> None:
    """Moves the folder `source` to `path` (which must not exist): locally one rename, on a
    tf.io.gfile filesystem file by file with a SavedModel's `saved_model.pb` last."""
    source, path = os.fspath(source), os.fspath(path)
    if is_remote(path):
        _move_tree(source.rstrip("/"), path.rstrip("/"))
    else:
        os.rename(source, path)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, prefix: str = ".tmp-") -> Iterator[str]:
    """A new folder beside `path` to fill, renamed to `path` if the block succeeds, else removed.

    `path` must not exist. The temporary name starts with `prefix` (with a dot, a name that TF
    Serving's poller skips: it loads numeric version folders only). Locally one `os.rename`, atomic; on a filesystem without folder
    renames the files move one by one, and a failure part-way removes `path` again.
    """
    path = os.fspath(path)
    remote = is_remote(path)
    path = path.rstrip("/") if remote else os.path.abspath(path)
    if _gfile().exists(path) if remote else os.path.exists(path):
        raise FileExistsError(f"{path} already exists")
    parent = path.rsplit("/", 1)[0] if remote else os.path.dirname(path)
    tmp = make_temp_dir(parent, prefix)
    try:
        yield tmp
        if not remote:
            os.rename(tmp, path)
            return
        try:
            _move_tree(tmp, path)
        except BaseException:
            remove_tree(path)
            raise
    finally:
        remove_tree(tmp)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """A temporary path beside `path`, renamed onto it if the block succeeds, else removed."""
    path = os.fspath(path)
    if is_remote(path):
        gfile = _gfile()
        folder, name = path.rsplit("/", 1)
        tmp = _temp_name(folder, f".{name}.tmp-")
        try:
            yield tmp
            replace(tmp, path)
        finally:
            if gfile.exists(tmp):
                gfile.remove(tmp)
        return
    name = os.path.basename(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=f".{name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        apply_default_mode(tmp)
        replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """`open(path, mode)` ("w" as UTF-8 text, or "wb") through `atomic_path`."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', got {mode!r}")
    with atomic_path(path) as tmp:
        if is_remote(tmp):
            with _gfile().GFile(tmp, mode) as f:
                yield f
        else:
            with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as f:
                yield f


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes `path` via a temp file beside it and a rename: readers never see half a file."""
    with atomic_open(path, "wb") as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """`atomic_write_bytes` of UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_copy(source: str | os.PathLike, path: str | os.PathLike) -> None:
    """Copies `source` to `path` atomically, with default permissions."""
    source = os.fspath(source)
    opener = _gfile().GFile if is_remote(source) else open
    with opener(source, "rb") as src, atomic_open(path, "wb") as out:
        shutil.copyfileobj(src, out)
