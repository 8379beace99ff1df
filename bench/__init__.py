"""bench: measured speed and memory against the tools users would pick instead."""

import os as _os

# Quiet TensorFlow's C++ import-time log noise (INFO/WARNING); errors still show. Set before any
# TensorFlow import so scripts run as `python -m <package>.<script>` get it too.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# oneDNN on also on AVX2-only CPUs, as `import bert_tf` sets it (this package's __init__ stays
# standard library only: the HF worker imports it in the reference environment).
_os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
# On a GPU the benchmark and the model servers it starts share the device: each process takes
# memory as it needs it instead of reserving it all (inherited by the server subprocesses).
_os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
