"""Atomic local file writes that get the permissions a plain `open()` would give.

`tempfile.mkstemp`/`mkdtemp` create 0600 files and 0700 folders, so a file written to a temp
name and renamed into place keeps those modes: a `bert_config.json`, `vocab.txt` or exported
SavedModel folder that a TF Serving container running as another user (Kubernetes
`runAsNonRoot`) cannot read. These helpers give such files 0666 and folders 0777 minus the
process umask, like every other file the programs write.

Example:

    from bert_tf import fileio
    fileio.atomic_write_text("out/bert_config.json", "{...}\\n")   # 0644 under umask 022
    fileio.atomic_copy("minilm/vocab.txt", "out/vocab.txt")
    tmp = fileio.make_temp_dir("models/bert", prefix=".tmp-export-")  # 0755, rename when done
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

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


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes `path` via a temp file in its folder and a rename: readers never see half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        apply_default_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """`atomic_write_bytes` of UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_copy(source: str | os.PathLike, path: str | os.PathLike) -> None:
    """Copies `source` to `path` atomically, with default permissions."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        apply_default_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
