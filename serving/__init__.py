"""serving: SavedModel export for TF Serving, a compatible local model server, and a client."""

# Drops the known-harmless import noise before any TensorFlow import (see bert_tf.quiet).
import bert_tf  # noqa: F401
