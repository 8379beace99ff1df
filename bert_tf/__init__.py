"""bert_tf: BERT (Devlin et al. 2018) in TensorFlow/Keras: model, tokenization, data, training."""

from bert_tf import quiet as _quiet

# Before any TensorFlow import, so scripts run as `python -m <package>.<script>` get it too.
_quiet.install()
