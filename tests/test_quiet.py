"""bert_tf.quiet: the known-harmless import noise is gone, every other line stays."""

import os
import subprocess
import sys

from bert_tf.quiet import filter_stderr

NOISE = ("Unable to register cuFFT factory", "Unable to register cuBLAS factory")
PY310_WARNING = "non-supported Python version"
STORAGE_WARNING = "Support for google-cloud-storage < 3.0.0"
# A C++ INFO line of TensorFlow's import (oneDNN's "custom operations are on" is another, on CPUs
# where oneDNN is on): TF_CPP_MIN_LOG_LEVEL=2 hides this level unless the user sets it.
CPP_INFO = "cpu_feature_guard.cc"

_PROGRAM = """
import warnings
import bert_tf
import tensorflow
import google.api_core
import google.cloud.aiplatform
warnings.warn("a real warning stays", UserWarning)
tensorflow.get_logger().warning("a real TF warning stays")
"""


def _stderr(**env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-c", _PROGRAM],
        capture_output=True,
        text=True,
        timeout=300,
        env={**environ, **env},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


def test_import_noise_is_dropped_and_real_warnings_kept():
    loud = _stderr(BERT_TFX_VERBOSE_IMPORT="1")
    # Without the filters the noise is there (this machine has TF's CUDA-enabled wheel) ...
    dropped = (*NOISE, PY310_WARNING, STORAGE_WARNING, CPP_INFO)
    assert all(line in loud for line in dropped), loud
    quiet = _stderr()
    # ... and with them it is gone, while warnings that are not on the list still show.
    assert not any(line in quiet for line in dropped), quiet
    for kept in ("a real warning stays", "a real TF warning stays"):
        assert kept in quiet and kept in loud


def test_filter_keeps_other_cpp_errors():
    data = (
        b"2026-12-01 10:00:00.1: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:479] "
        b"Unable to register cuFFT factory: Attempting to register factory for plugin cuFFT "
        b"when one has already been registered\n"
        b"2026-12-01 10:00:00.2: E tensorflow/core/framework/op_kernel.cc:1] real error\n"
        b"partial line without newline"
    )
    assert filter_stderr(data) == (
        b"2026-12-01 10:00:00.2: E tensorflow/core/framework/op_kernel.cc:1] real error\n"
        b"partial line without newline"
    )


def test_a_script_error_is_the_only_output(tmp_path):
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_tf.convert_checkpoint",
            f"--input={tmp_path / 'missing'}",
            f"--output_dir={tmp_path / 'out'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=environ,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr


def test_onednn_is_on_unless_the_user_turned_it_off():
    """TF turns oneDNN on by itself only on AVX-512 VNNI/BF16 or AMX CPUs; `import bert_tf` asks
    for it on every x86 CPU (before TensorFlow reads the variable), keeping a user's own value."""
    program = "import os, bert_tf; print(os.environ['TF_ENABLE_ONEDNN_OPTS'])"
    environ = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    for env, expected in ((environ, "1"), ({**environ, "TF_ENABLE_ONEDNN_OPTS": "0"}, "0")):
        result = subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, env=env
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.strip() == expected
