"""tfx_pipeline: BERT pretraining and fine-tuning as TFX pipelines."""

import os as _os

# Quiet TensorFlow's C++ import-time log noise (INFO/WARNING); errors still show. Set before any
# TensorFlow import so scripts run as `python -m <package>.<script>` get it too.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
