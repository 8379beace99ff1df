"""tfx_pipeline: BERT pretraining and fine-tuning as TFX pipelines."""

# Drops the known-harmless import noise before any TensorFlow import (see bert_tf.quiet).
import bert_tf  # noqa: F401
