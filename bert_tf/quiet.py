"""Drops the known-harmless lines TensorFlow and Google's libraries print on import.

Every program of this project (and anything that imports `bert_tf`, `serving` or
`tfx_pipeline`) would otherwise start with lines that are not about the user's job:

- TensorFlow's C++ INFO/WARNING lines (`TF_CPP_MIN_LOG_LEVEL=2` unless the user set it);
- three ERROR lines that TF 2.16's CUDA-enabled wheel prints on every import, also on CPU-only
  machines ("Unable to register cuFFT/cuDNN/cuBLAS factory: ... already been registered", a
  double registration inside those wheels). They cannot be turned off without
  hiding every C++ error (`TF_CPP_MIN_LOG_LEVEL=3`), so the standard-error file descriptor is
  captured while `tensorflow` itself is imported and replayed without exactly these lines;
- google.api_core's FutureWarning that Python 3.10 is past end of life (the stack is pinned to
  3.10 on purpose: see the README's Setup section), and google-cloud-aiplatform's that
  google-cloud-storage 2.x support will end (TFX 1.16's dependencies need 2.x);
- TensorFlow's and Keras' own INFO log lines, which a script's absl logging prints with
  timestamps among its progress lines ("Sharding callback duration: 181" at every checkpoint,
  "Assets written to: ..." twice per SavedModel, "Writing fingerprint to ..."): INFO records
  that their modules log through absl, and TensorFlow's "tensorflow" logger below WARNING.
  Their warnings and errors, and every line this project logs, are kept.

Anything else, including other C++ errors printed during the import and every later warning,
is kept. `BERT_TFX_VERBOSE_IMPORT=1` turns all of this off.

Example:

    from bert_tf import quiet
    quiet.install()        # done by `import bert_tf`; idempotent
    import tensorflow      # no cuFFT/cuDNN/cuBLAS factory lines
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import re
import sys
import tempfile
import warnings

from absl import logging as absl_logging

# Whole lines (C++ log lines start with a timestamp and a file:line) known to be harmless.
HARMLESS_STDERR = re.compile(
    rb"Unable to register (cuFFT|cuDNN|cuBLAS) factory: Attempting to register factory for "
    rb"plugin \w+ when one has already been registered"
)
_PYTHON_3_10_WARNING = r"You are using a non-supported Python version \(3\.10\."
# google-cloud-aiplatform on import (tfx_pipeline imports it for Vertex): the lock keeps
# google-cloud-storage 2.x, which TFX 1.16's dependencies require.
_STORAGE_2_WARNING = r"Support for google-cloud-storage < 3\.0\.0 will be removed"


# Packages whose INFO log records are not about the user's job.
_QUIET_INFO_PACKAGES = ("tensorflow", "keras", "tf_keras")


class LibraryInfoFilter(logging.Filter):
    """Drops INFO (and DEBUG) records logged from the modules under `folders`."""

    def __init__(self, folders: tuple[str, ...]):
        super().__init__()
        self.folders = folders

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO or not record.pathname.startswith(self.folders)


def _package_folders(names: tuple[str, ...]) -> tuple[str, ...]:
    """Installed folders of the packages `names`, found without importing them (PathFinder
    alone: the finder below would take a lookup of "tensorflow" for its import)."""
    folders = []
    for name in names:
        spec = importlib.machinery.PathFinder.find_spec(name)
        for folder in (spec and spec.submodule_search_locations) or ():
            folders.append(os.path.join(folder, ""))
    return tuple(folders)


def filter_stderr(data: bytes) -> bytes:
    """`data` without the lines that `HARMLESS_STDERR` matches."""
    lines = data.splitlines(keepends=True)
    return b"".join(line for line in lines if not HARMLESS_STDERR.search(line))


class _QuietLoader(importlib.abc.Loader):
    """Runs the real loader of `tensorflow` with file descriptor 2 captured, then replays it."""

    def __init__(self, loader: importlib.abc.Loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        sys.stderr.flush()
        saved = os.dup(2)
        # A file, not a pipe: the import may print more than a pipe buffer holds.
        with tempfile.TemporaryFile() as capture:
            os.dup2(capture.fileno(), 2)
            try:
                self._loader.exec_module(module)
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                capture.seek(0)
                kept = filter_stderr(capture.read())
                if kept:
                    os.write(2, kept)


class _QuietTensorFlowFinder(importlib.abc.MetaPathFinder):
    """Wraps the first import of the `tensorflow` package, then steps aside."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


def install() -> None:
    """Sets up the filters above (before TensorFlow is imported; idempotent)."""
    if os.environ.get("BERT_TFX_VERBOSE_IMPORT") == "1":
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    warnings.filterwarnings(
        "ignore", message=_PYTHON_3_10_WARNING, category=FutureWarning, module=r"google\.api_core"
    )
    warnings.filterwarnings(
        "ignore",
        message=_STORAGE_2_WARNING,
        category=FutureWarning,
        module=r"google\.cloud\.aiplatform",
    )
    # absl.logging's logger (created by absl, as its own class), which TF's modules also use.
    absl_logger = absl_logging.get_absl_logger()
    if not any(isinstance(f, LibraryInfoFilter) for f in absl_logger.filters):
        absl_logger.addFilter(LibraryInfoFilter(_package_folders(_QUIET_INFO_PACKAGES)))
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    if "tensorflow" not in sys.modules and not any(
        isinstance(finder, _QuietTensorFlowFinder) for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, _QuietTensorFlowFinder())
