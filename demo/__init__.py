"""`make demo` (`python -m demo.run`): the main job end to end on package-shipped data.

A program over the whole project (bert_tf, tfx_pipeline, serving), so it lives outside them:
nothing in those packages imports it.
"""

# Drops the known-harmless import noise before any TensorFlow import (see bert_tf.quiet).
import bert_tf  # noqa: F401
