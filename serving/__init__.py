"""serving: SavedModel export for TF Serving, a compatible local model server, and a client."""

# Drops the known-harmless import noise before any TensorFlow import (see bert_tf.quiet).
import bert_tf  # noqa: F401

# The real model server's program, which `python -m serving.server` runs when it is on PATH.
MODEL_SERVER_BINARY = "tensorflow_model_server"
