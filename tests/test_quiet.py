"""bert_tf.quiet: the known-harmless import noise is gone, every other line stays."""

import os
import re
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


# A script's own INFO lines among TensorFlow's: a checkpoint ("Sharding callback duration"), a
# SavedModel ("Assets written to", "Writing fingerprint"), BERT inputs packed and masked in a
# graph (an integer Transpose there made oneDNN log an error line, once per process).
_LIBRARY_NOISE_PROGRAM = """
import sys
import tempfile

from absl import flags, logging

from bert_tf import flags_util

def main(argv):
    import tensorflow as tf
    from bert_tf.text.masking import MaskedLmMasker
    from bert_tf.text.tokenization import BertPreprocessor

    folder = tempfile.mkdtemp()
    logging.info("our progress line")
    module = tf.Module()
    module.v = tf.Variable(1.0)
    module.f = tf.function(lambda x: x * module.v, input_signature=[tf.TensorSpec([], tf.float32)])
    tf.train.Checkpoint(module=module).save(folder + "/ckpt")
    tf.saved_model.save(module, folder + "/model")
    preprocessor = BertPreprocessor(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"], 8)
    tf.function(preprocessor)((tf.constant(["a a"]), tf.constant(["a"])))
    masker = MaskedLmMasker(10, mask_id=4, pad_id=0, unselectable_ids=[2, 3])
    masker(tf.ragged.constant([[2, 5, 6, 7, 3]]), tf.constant([[1, 2]]))
    logging.warning("our warning line")

flags_util.run(main)
"""


def test_tensorflow_info_and_error_noise_is_gone_and_our_lines_stay():
    result = subprocess.run(
        [sys.executable, "-c", _LIBRARY_NOISE_PROGRAM],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stderr.splitlines()
    assert any(line.endswith("our progress line") for line in lines), result.stderr
    assert any(line.endswith("our warning line") for line in lines), result.stderr
    for noise in ("Sharding callback", "Assets written to", "Writing fingerprint", "INFO:"):
        assert noise not in result.stderr, result.stderr
    # No error-level line (absl's "E1205 ..." or TensorFlow C++'s "... : E file.cc:1]"): oneDNN
    # logged one for the packer's integer Transpose.
    errors = [line for line in lines if re.match(r"E\d{4} |\S+ \S+: E \S+\]", line)]
    assert errors == []
