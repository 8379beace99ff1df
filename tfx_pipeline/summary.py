"""What a local/beam pipeline run shows: its log file, progress lines, and a summary read back from
ML Metadata.

`RunLog` (a context manager) sends the run's full log to a file: Python logging (TFX, Beam,
TensorFlow's Python side) and, unless `verbose`, everything written to file descriptors 1 and 2
(TensorFlow's C++ lines, Beam worker processes, prints). The console keeps progress lines only:

    [0:31] Component Transform is running.
    [1:02, 31.0 s] Component Transform is finished.
    [1:02, cached] Component Trainer is finished.
    [1:40] step 100/500: loss 2.1, learning rate ..., ETA 80 s

plus Python warnings, warnings of this project's code and every error (also in the file).

`quiet_console()` (a context manager) is what a Kubeflow/Vertex compile shows: its result, this
project's log lines, and warnings and errors, not the INFO lines TFX and Beam log while they are
imported and build the pipeline ("tensorflow_io is not available", "Using Any for unsupported
type", ...).

`run_summary(metadata_path, pipeline_name, node_ids)` describes the latest run of a pipeline
as `tfx_pipeline.metadata.pipeline_results` reads it from ML Metadata: each component's state
and seconds, the evaluator's metrics against its thresholds, blessed or not, and the pushed
folder or why nothing was pushed.

Example:

    with RunLog("runs/tfx/logs/run.log") as log:
        log.print("full log: runs/tfx/logs/run.log")
        tfx.orchestration.LocalDagRunner().run(pipeline)
        log.print(run_summary("runs/tfx/metadata.sqlite", "bert-classification", ids))
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from absl import logging as absl_logging

from tfx_pipeline.metadata import RunResults, pipeline_results

_COMPONENT = re.compile(r"^(?:Component|node) (\S+) is (running|finished)\.$")
_CACHED = re.compile(r"^A cached execution \d+ is used\.$")
# bert_tf.training's progress, trainer_lib's epochs -> steps.
_SHOWN = re.compile(r"^(?:step \d+/\d+: |training steps: )")
_REPO = Path(__file__).resolve().parents[1]
_OWN_CODE = tuple(
    f"{_REPO / package}{os.sep}" for package in ("bert_tf", "serving", "tfx_pipeline")
)


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}:{seconds:02d}"


class _ProgressHandler(logging.Handler):
    """Shows the progress records on the console (and warnings/errors on its error stream)."""

    def __init__(self, run_log: RunLog):
        super().__init__(logging.INFO)
        self._log = run_log
        self._started: dict[str, float] = {}
        self._cached: set[str] = set()
        self._current: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            match = _COMPONENT.match(message)
            if match:
                node, what = match.groups()
                now = time.monotonic()
                if what == "running":
                    self._started[node], self._current = now, node
                    self._log.print(f"[{self._log.clock()}] Component {node} is running.")
                else:
                    took = (
                        "cached"
                        if node in self._cached
                        else f"{now - self._started.get(node, now):.1f} s"
                    )
                    self._log.print(f"[{self._log.clock()}, {took}] Component {node} is finished.")
            elif _CACHED.match(message):
                if self._current:
                    self._cached.add(self._current)
            elif _SHOWN.match(message):
                self._log.print(f"[{self._log.clock()}] {message}")
            elif (
                record.levelno >= logging.ERROR
                or record.name == "py.warnings"
                or (record.levelno >= logging.WARNING and record.pathname.startswith(_OWN_CODE))
            ):
                text = message if record.name == "py.warnings" else f"{record.levelname}: {message}"
                if record.exc_info and record.levelno >= logging.ERROR:
                    text += "\n" + "".join(traceback.format_exception(*record.exc_info)).rstrip()
                self._log.print(text.rstrip(), error=True)
        except Exception:  # logging must never raise
            self.handleError(record)


def _is_console_handler(handler: logging.Handler) -> bool:
    """absl's handler and plain stream handlers (stderr/stdout), not files or pytest's."""
    return isinstance(handler, absl_logging.ABSLHandler) or type(handler) is logging.StreamHandler


# TFX 1.16's KubeflowV2DagRunner warns this when the key IS in its default_image map (the check
# is inverted), i.e. whenever --gpu_image gives the Trainer an image of its own.
_FALSE_WARNING = "DEFAULT_IMAGE_PATH_KEY is not found in default_image."
_DEPRECATION_MODULE = os.path.join("tensorflow", "python", "util", "deprecation.py")


class _OwnInfoOnly(logging.Filter):
    """INFO (and lower) records of this project's code only; warnings and errors of any, except
    TFX's false `_FALSE_WARNING` and TensorFlow's deprecation notices about library code
    (TFMA's result readers: nothing a user can act on)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and record.pathname.endswith(_DEPRECATION_MODULE):
            return False
        if record.levelno > logging.INFO:
            return record.getMessage() != _FALSE_WARNING
        return record.pathname.startswith(_OWN_CODE)


@contextlib.contextmanager
def quiet_console() -> Iterator[None]:
    """The console's log handlers pass INFO records of this project's code only, meanwhile."""
    # TensorFlow's logger has a console handler of its own (its "WARNING:tensorflow:" lines).
    loggers = (logging.getLogger(), logging.getLogger("tensorflow"))
    handlers = [h for logger in loggers for h in logger.handlers if _is_console_handler(h)]
    own_info_only = _OwnInfoOnly()
    for handler in handlers:
        handler.addFilter(own_info_only)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(own_info_only)


class RunLog:
    """The full log of a run to `path` (appended); progress, warnings and errors on the console
    (see the module docstring). `verbose`: the console keeps the full log too (no descriptor
    redirection; the file gets the Python logging)."""

    def __init__(self, path: str | os.PathLike, verbose: bool = False):
        self.path = str(path)
        self.verbose = verbose
        self._start = time.monotonic()

    def clock(self) -> str:
        """Time since the start, m:ss."""
        return _clock(time.monotonic() - self._start)

    def print(self, text: str, error: bool = False) -> None:
        """`text` on the console (its error stream if `error`), and in the log file."""
        stream = self._errors if error else self._console
        stream.write(text + "\n")
        stream.flush()
        if not error:  # errors and warnings reach the file through logging
            self._file.write(text + "\n")
            self._file.flush()

    def __enter__(self) -> RunLog:
        self._start = time.monotonic()
        self._file: TextIO = open(self.path, "a", encoding="utf-8", errors="replace", buffering=1)
        sys.stdout.flush()
        sys.stderr.flush()
        self._console, self._errors = sys.stdout, sys.stderr
        self._owned: list[TextIO] = []
        self._saved_fds: dict[int, int] = {}
        if not self.verbose:
            try:
                fds = (sys.stdout.fileno(), sys.stderr.fileno())
            except (AttributeError, OSError, ValueError):
                fds = None
            if fds:
                # The console on descriptors of its own; 1 and 2 (what C++ code, child processes
                # and sys.stdout/sys.stderr write to) then go to the file.
                self._console, self._errors = (
                    os.fdopen(os.dup(fd), "w", encoding="utf-8", errors="replace", buffering=1)
                    for fd in fds
                )
                self._owned = [self._console, self._errors]
                for fd in (1, 2):
                    self._saved_fds[fd] = os.dup(fd)
                    os.dup2(self._file.fileno(), fd)
        # INFO records (TFX's progress) must reach the handlers. absl's verbosity flag too
        # must say INFO: TensorFlow's SavedModel code sets it to FATAL and back to what
        # get_verbosity() said (WARNING when absl's flags are unparsed), which would then drop
        # every later absl INFO record.
        root, absl_logger = logging.getLogger(), logging.getLogger("absl")
        self._levels = {root: root.level, absl_logger: absl_logger.level}
        self._verbosity = absl_logging.get_verbosity()
        if self._verbosity < absl_logging.INFO:
            absl_logging.set_verbosity(absl_logging.INFO)
        root.setLevel(min(root.level or logging.INFO, logging.INFO))
        if absl_logger.level > logging.INFO:
            absl_logger.setLevel(logging.INFO)
        self._file_handler = logging.StreamHandler(self._file)
        self._file_handler.setFormatter(absl_logging.PythonFormatter())
        self._progress = _ProgressHandler(self)
        self._muted = []
        if not self.verbose:
            self._muted = [(h, h.level) for h in root.handlers if _is_console_handler(h)]
            for handler, _ in self._muted:
                handler.setLevel(logging.CRITICAL + 1)
        root.addHandler(self._file_handler)
        root.addHandler(self._progress)
        self._captured_warnings = getattr(logging, "_warnings_showwarning", None) is not None
        logging.captureWarnings(True)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None and not isinstance(exc, SystemExit):
            self._file.write("".join(traceback.format_exception(exc_type, exc, tb)))
        root = logging.getLogger()
        root.removeHandler(self._progress)
        root.removeHandler(self._file_handler)
        for handler, level in self._muted:
            handler.setLevel(level)
        if absl_logging.get_verbosity() != self._verbosity:
            absl_logging.set_verbosity(self._verbosity)
        for logger, level in self._levels.items():
            logger.setLevel(level)
        logging.captureWarnings(self._captured_warnings)
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in self._saved_fds.items():
            os.dup2(saved, fd)
            os.close(saved)
        for stream in self._owned:
            stream.close()
        self._file.close()


def format_results(results: RunResults, metadata_path: str | None = None) -> str:
    """`results` as the end-of-run summary."""
    where = f" (ML Metadata: {metadata_path})" if metadata_path else ""
    if results.run_id is None:
        return f"{results.pipeline_name}: no run recorded in ML Metadata{where}"
    lines = [f"{results.pipeline_name} run {results.run_id}{where}:"]
    width = max(len(c.node) for c in results.components)
    for component in results.components:
        seconds = "" if component.seconds is None else f"{component.seconds:8.1f} s"
        lines.append(f"  {component.node:{width}}  {component.state:9}{seconds}".rstrip())
    if results.evaluator:
        lines.append(f"{results.evaluator}:")
        lines += [f"  {line}" for line in results.evaluation]
        if results.blessed:
            lines.append("blessed: yes")
        else:
            lines.append(
                "blessed: no" + (": " + "; ".join(results.failures) if results.failures else "")
            )
    if results.pushed:
        lines.append(f"pushed: {results.pushed}{results.push_note}")
    elif results.push_note:
        lines.append(f"not pushed: {results.push_note}")
    elif any(c.node == "Pusher" for c in results.components):
        lines.append("not pushed: the Pusher did not run")
    return "\n".join(lines)


def run_summary(
    metadata_path: str,
    pipeline_name: str,
    node_ids: list[str] | None = None,
    since: float | None = None,
) -> str:
    """The end-of-run summary of the pipeline's latest run (see `pipeline_results`)."""
    try:
        results = pipeline_results(metadata_path, pipeline_name, node_ids, since)
    except Exception as e:  # the run's own outcome matters more
        return f"(no summary: cannot read ML Metadata {metadata_path}: {e})"
    return format_results(results, metadata_path)
