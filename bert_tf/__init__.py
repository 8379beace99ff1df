"""bert_tf: BERT (Devlin et al. 2018) in TensorFlow/Keras: model, tokenization, data, training."""

import os as _os

from bert_tf import quiet as _quiet

# Before any TensorFlow import, so scripts run as `python -m <package>.<script>` get it too.
_quiet.install()
# TensorFlow (since 2.9) turns its oneDNN kernels on by itself only on x86 CPUs with AVX-512
# VNNI/BF16 or AMX; on an AVX2-only CPU it falls back to Eigen, whose fine-tuning step measured
# ~13% slower (MiniLM, seq 64, 2 cores: 25.2 vs 28.6 seq/s). On unless the user says otherwise.
_os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
