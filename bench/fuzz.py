"""Coverage-guided fuzzing (atheris + libFuzzer) of what reads untrusted bytes, for a bounded time.

    python -m bench.fuzz --target=rest_request --max_total_time=600
    python -m bench.fuzz --target=pretraining_record --max_total_time=600 --output_json=/tmp/f.json

Targets (each input must be handled without an unexpected exception; any is a crash):

- `rest_request`: an HTTP request as the local model server's REST handler sees it,
  `METHOD PATH [HTTP/1.1]\\r\\n`, headers, a blank line, the body. The headers go through
  `serving.rest.request_body_length` (the server's 64 MiB default cap) and the request through
  `serving.rest.RestApi.handle` on a real InferenceService serving `serving.toy_models` (strings,
  affine, examples). Every answer must be JSON with a 2xx/4xx status: a 5xx means an input
  reached code that did not expect it.
- `pretraining_record`: the bytes as one record (framed into a TFRecord file) and as a whole
  TFRecord file, through `bert_tf.tasks.pretraining.check_pretraining_file` and
  `read_pretraining_dataset` (max_seq_length 8, 2 predictions): a bad record or file must be
  a ValueError naming it; a file the check passes must read back in full, every record with
  the right shapes.

The corpus in `tests/fuzz_corpus/<target>/` seeds the run; new interesting inputs go to a
temporary folder. Crashes are written there too (`crash-<sha1>`, or `--crash_dir`), and
`tests/test_fuzz_corpus.py` replays every file in it: a crash, once fixed, stays a regression
test. libFuzzer runs in a child process (it exits the process when done), whose final stats give
the figures: inputs tried, new coverage, crashes. `--seed` pins libFuzzer's mutations (the tests'
brief runs use one, so a CI run does not find new inputs by chance; long runs by hand do).
"""

from __future__ import annotations

import http.client
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from absl import flags

from bench.report import write_json
from bert_tf import flags_util

FLAGS = flags.FLAGS
REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "fuzz_corpus"
TARGETS = ("rest_request", "pretraining_record")
# Modules whose code atheris instruments for coverage feedback (TensorFlow's own is C++).
_INSTRUMENTED = ["serving", "bert_tf"]
# libFuzzer dictionaries: tokens the mutator splices in, so that mutants stay near valid input.
_DICTIONARIES = {
    "rest_request": [
        *("GET ", "POST ", " HTTP/1.1", "\r\n", "\r\n\r\n", "Content-Length: "),
        *("Transfer-Encoding: chunked", "/v1/models/", "/versions/", "/labels/", "/metadata"),
        *(":predict", ":classify", ":regress", "affine", "strings", "examples", "stable"),
        *('"instances"', '"inputs"', '"signature_name"', '"examples"', '"context"', '"b64"'),
        *('"x"', '"text"', '"scale"', '"tag"', '"scaled"', '"classify"', '"regress"'),
        *("[", "]", "{", "}", ":", ",", "null", "true", "1e999", "-0.0", '"\\u0000"'),
    ],
    "pretraining_record": [
        *("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids"),
        *("masked_lm_weights", "next_sentence_labels"),
    ],
}


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default)."""
    flags.DEFINE_enum("target", None, TARGETS, "What to fuzz.", flag_values=flag_values)
    flags.DEFINE_integer(
        "max_total_time", 60, "Seconds of fuzzing.", lower_bound=1, flag_values=flag_values
    )
    flags.DEFINE_string(
        "crash_dir",
        "",
        "Where crashing inputs are written (default: tests/fuzz_corpus/<target>/).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "output_json",
        "",
        "Write the figures here (temp file, then rename).",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "rss_limit_mb", 4096, "libFuzzer's memory limit for the run.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "seed",
        0,
        "libFuzzer's -seed: the same seed mutates the same way (the tests pin one, so CI's short "
        "runs do not find new inputs by chance; long runs by hand explore); 0 = random.",
        lower_bound=0,
        flag_values=flag_values,
    )
    # Internal: the child process that runs libFuzzer (its arguments follow `--`).
    flags.DEFINE_bool("worker", False, "(internal) Run libFuzzer here.", flag_values=flag_values)


class FuzzFailure(AssertionError):
    """An input the code under test handled wrongly (the oracle's verdict, not a crash in it)."""


# --- rest_request ---------------------------------------------------------------------------------


class RestRequest:
    """`RestApi` (+ the HTTP body framing) over the toy models, without sockets."""

    # Statuses the REST API may answer; 5xx other than these mean an unexpected error.
    _ALLOWED = frozenset({200, 400, 404, 409, 429, 501, 503})
    # The body cap the handler checks lengths against (the server's flag; fuzz inputs are far
    # smaller, so any cap exercises the same check).
    MAX_REQUEST_BYTES = 1 << 20

    def __init__(self, work_dir: Path):
        from tensorflow_serving.config import model_server_config_pb2

        from serving import toy_models
        from serving.inference import make_service
        from serving.rest import RestApi

        models = {
            "strings": toy_models.save_strings_model,
            "affine": lambda p: toy_models.save_affine_model(p, 1.0),
            "examples": toy_models.save_examples_model,
        }
        configs = []
        for name, save in models.items():
            save(work_dir / name / "1")
            configs.append(
                model_server_config_pb2.ModelConfig(
                    name=name, base_path=str(work_dir / name), model_platform="tensorflow"
                )
            )
        configs[1].version_labels["stable"] = 1
        self.service = make_service(poll_wait_seconds=0, max_request_batch_size=64)
        self.service.manager.set_config(configs)
        self.api = RestApi(self.service, timeout_ms=60_000, metrics_path="/metrics")

    def __call__(self, data: bytes) -> None:
        from serving.rest import error_response, request_body_length
        from serving.servable import ServingError

        head, _, rest = data.partition(b"\n")
        words = head.strip().split(b" ")
        if len(words) not in (2, 3) or words[0] not in (b"GET", b"POST"):
            return  # the standard library's HTTP server answers these itself
        method, path = words[0].decode(), words[1].decode("iso-8859-1")
        if b"\n\n" not in rest.replace(b"\r\n", b"\n"):
            rest = b"\n" + rest  # no headers: all of it is the body
        stream = io.BytesIO(rest)
        try:
            headers = http.client.parse_headers(stream)  # as BaseHTTPRequestHandler does
        except http.client.HTTPException:
            return  # answered by the standard library (400/431)
        body = stream.read()
        try:
            if "Content-Length" in headers or "Transfer-Encoding" in headers:
                body = body[: request_body_length(headers, self.MAX_REQUEST_BYTES)]
            status, content_type, payload = self.api.handle(method, path, body)
        except ServingError as e:
            status, content_type, payload = error_response(e)
        answer = json.loads(payload) if content_type == "application/json" else None
        if status not in self._ALLOWED or (status == 200) == ("error" in (answer or {})):
            raise FuzzFailure(f"{method} {path[:100]!r}: HTTP {status}: {payload[:500]!r}")

    def close(self) -> None:
        self.service.manager.stop()


# --- pretraining_record ---------------------------------------------------------------------------


class PretrainingRecord:
    """The pretraining-data reader on the bytes as one record and as a whole TFRecord file."""

    SEQ, PREDICTIONS = 8, 2

    def __init__(self, work_dir: Path):
        self.record_file = str(work_dir / "one_record.tfrecord")
        self.raw_file = str(work_dir / "raw.tfrecord")

    def _read(self, path: str) -> int:
        """Records read by read_pretraining_dataset, checking each one's features."""
        from bert_tf.tasks.pretraining import read_pretraining_dataset

        count = 0
        for features in read_pretraining_dataset(path, self.SEQ, self.PREDICTIONS):
            for name, value in features.items():
                want = {
                    "input_word_ids": [self.SEQ],
                    "input_mask": [self.SEQ],
                    "input_type_ids": [self.SEQ],
                    "next_sentence_labels": [],
                }.get(name, [self.PREDICTIONS])
                if value.shape != want:
                    raise FuzzFailure(f"{path}: {name} has shape {value.shape}, expected {want}")
            count += 1
        return count

    def _check(self, path: str) -> int | None:
        """check_pretraining_file's record count, or None for a ValueError naming the file."""
        from bert_tf.tasks.pretraining import check_pretraining_file

        try:
            return check_pretraining_file(path, self.SEQ, self.PREDICTIONS)
        except ValueError as e:
            if path not in str(e):
                raise FuzzFailure(f"error does not name the file {path}: {e}") from None
            return None

    def __call__(self, data: bytes) -> None:
        import tensorflow as tf

        with tf.io.TFRecordWriter(self.record_file) as writer:
            writer.write(data)
        with open(self.raw_file, "wb") as f:
            f.write(data)
        for path in (self.record_file, self.raw_file):
            count = self._check(path)
            if not count:
                continue  # refused (a ValueError naming the file) or empty
            # The check passed: training must then read every record without an error.
            try:
                read = self._read(path)
            except (ValueError, tf.errors.OpError) as e:
                raise FuzzFailure(
                    f"{path}: checked fine ({count} records), reading failed: {e}"
                ) from e
            if read != count:
                raise FuzzFailure(f"{path}: check counted {count} records, the reader {read}")

    def close(self) -> None:
        pass


def make_target(name: str, work_dir: Path) -> Callable[[bytes], None]:
    """The target `name` (see the module docstring), keeping its files in `work_dir`."""
    return {"rest_request": RestRequest, "pretraining_record": PretrainingRecord}[name](work_dir)


# --- running libFuzzer ----------------------------------------------------------------------------


def _work(target_name: str, libfuzzer_argv: list[str]) -> None:
    """The child process: instrument our modules, then hand the target to libFuzzer."""
    import atheris

    # Heavy dependencies first and uninstrumented; only our modules get coverage hooks.
    import numpy  # noqa: F401
    import tensorflow  # noqa: F401
    import tensorflow_text  # noqa: F401
    from tensorflow_serving.apis import predict_pb2  # noqa: F401

    with atheris.instrument_imports(include=_INSTRUMENTED):
        import bert_tf.tasks.pretraining  # noqa: F401
        import serving.inference
        import serving.rest  # noqa: F401

    with tempfile.TemporaryDirectory(prefix=f"fuzz-{target_name}-") as work_dir:
        target = make_target(target_name, Path(work_dir))
        atheris.Setup(libfuzzer_argv, target)
        atheris.Fuzz()


def _dict_escape(token: str) -> str:
    """A token in libFuzzer's dictionary syntax: printable ASCII, else \\xAB escapes."""
    return "".join(
        chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\x{b:02X}"
        for b in token.encode("utf-8")
    )


_STAT = re.compile(r"^stat::(\w+):\s*(\d+)", re.MULTILINE)
_COVERAGE = re.compile(r"\bcov: (\d+) ft: (\d+)")


def run_fuzzer(
    target: str, max_total_time: int, crash_dir: Path, rss_limit_mb: int, seed: int = 0
) -> dict:
    """Runs libFuzzer on `target` in a child process; returns its figures."""
    seeds = CORPUS / target
    crash_dir.mkdir(parents=True, exist_ok=True)
    before = set(os.listdir(crash_dir))
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{target}-") as work:
        corpus, dictionary = os.path.join(work, "corpus"), os.path.join(work, "tokens.dict")
        os.mkdir(corpus)
        with open(dictionary, "w", encoding="ascii") as f:
            f.writelines(f'"{_dict_escape(token)}"\n' for token in _DICTIONARIES[target])
        command = [
            sys.executable,
            "-m",
            "bench.fuzz",
            "--worker",
            f"--target={target}",
            "--",
            f"-max_total_time={max_total_time}",
            f"-rss_limit_mb={rss_limit_mb}",
            f"-seed={seed}",
            "-timeout=60",
            "-print_final_stats=1",
            f"-dict={dictionary}",
            f"-artifact_prefix={crash_dir}{os.sep}",
            corpus,  # new inputs are written to the first folder
            *([str(seeds)] if seeds.is_dir() else []),
        ]
        # libFuzzer's -rss_limit_mb checks getrusage's peak RSS, which Linux carries across
        # exec: a child exec'd straight from a big process (a pytest worker at 4.6 GB) starts
        # "out of memory". A small shell forks the worker instead, so its peak is its own.
        result = subprocess.run(
            ["sh", "-c", '"$@" & wait $!', "sh", *command],
            cwd=REPO,
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
        )
        new_inputs = len(os.listdir(corpus))
    log = result.stdout + result.stderr
    stats = {k: int(v) for k, v in _STAT.findall(log)}
    coverage = _COVERAGE.findall(log)
    crashes = sorted(set(os.listdir(crash_dir)) - before)
    return {
        "target": target,
        "max_total_time_s": max_total_time,
        "inputs_tried": stats.get("number_of_executed_units", 0),
        "seed_inputs": len(os.listdir(seeds)) if seeds.is_dir() else 0,
        "new_inputs": new_inputs,
        "coverage_edges": int(coverage[-1][0]) if coverage else 0,
        "coverage_features": int(coverage[-1][1]) if coverage else 0,
        "peak_rss_mb": stats.get("peak_rss_mb", 0),
        "crashes": [str(crash_dir / name) for name in crashes],
        "exit_code": result.returncode,
        "log_tail": log[-3000:] if result.returncode or crashes else "",
    }


def main(argv: list[str]) -> None:
    if not FLAGS.target:
        sys.exit(f"error: --target is required: one of {', '.join(TARGETS)}")
    if FLAGS.worker:
        _work(FLAGS.target, argv)
        return
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}")
    try:
        import atheris  # noqa: F401
    except ImportError:
        sys.exit("error: atheris is not installed (it is in requirements.txt: make setup)")
    crash_dir = Path(FLAGS.crash_dir or CORPUS / FLAGS.target)
    report = run_fuzzer(
        FLAGS.target, FLAGS.max_total_time, crash_dir, FLAGS.rss_limit_mb, FLAGS.seed
    )
    print(json.dumps({k: v for k, v in report.items() if k != "log_tail"}, indent=2))
    if FLAGS.output_json:
        write_json(Path(FLAGS.output_json), report)
    if report["crashes"]:
        sys.exit(
            f"error: {len(report['crashes'])} crashing input(s): {report['crashes']}; replay with "
            f"`python -m pytest tests/test_fuzz_corpus.py`\n{report['log_tail']}"
        )
    if report["exit_code"] != 0 or not report["inputs_tried"]:
        sys.exit(f"error: the fuzzer exited with {report['exit_code']}:\n{report['log_tail']}")


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
