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
the same with an open file. Local paths go through `os.replace`; a path with a scheme (`gs://`,
`hdfs://`, ...) through `tf.io.gfile` (object stores have no atomic rename, but the final name
still only ever holds a complete file).

Example:

    from bert_tf import fileio
    with fileio.atomic_open("out/predictions.json", "w") as f:
        f.write("{}\\n")
    fileio.atomic_write_text("out/bert_config.json", "{...}\\n")   # 0644 under umask 022
    fileio.atomic_copy("minilm/vocab.txt", "out/vocab.txt")
    tmp = fileio.make_temp_dir("models/bert", prefix=".tmp-export-")  # 0755, rename when done
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


def make_temp_dir(parent: str | os.PathLike, prefix: str) -> str:
    """A new folder in `parent` with default permissions, to fill and then rename into place."""
    tmp = tempfile.mkdtemp(dir=parent, prefix=prefix)
    apply_default_mode(tmp)
    return tmp


def _is_remote(path: str) -> bool:
    return "://" in path


def _gfile():
    # TensorFlow only for remote paths: configs.py writes through this module and must stay
    # importable without TensorFlow (flag checks run before it is imported).
    import tensorflow as tf

    return tf.io.gfile


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """A temporary path beside `path`, renamed onto it if the block succeeds, else removed."""
    path = os.fspath(path)
    if _is_remote(path):
        gfile = _gfile()
        folder, name = path.rsplit("/", 1)
        tmp = f"{folder}/.{name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            yield tmp
            gfile.rename(tmp, path, overwrite=True)
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
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """`open(path, mode)` ("w" as UTF-8 text, or "wb") through `atomic_path`."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', got {mode!r}")
    with atomic_path(path) as tmp:
        if _is_remote(tmp):
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
    opener = _gfile().GFile if _is_remote(source) else open
    with opener(source, "rb") as src, atomic_open(path, "wb") as out:
        shutil.copyfileobj(src, out)
