"""google-research/bert's own TF1 code, run on TF 2.16 as the tests' independent oracle.

The files are bert-tensorflow 1.0.4's (`modeling.py`, `tokenization.py`,
`create_pretraining_data.py`, `run_pretraining.py`, `optimization.py`), fetched from the package
registry into the cache like the other data (`bert_tf.data.fetch`, source `google_bert`) and never
copied into this repository. They already import `tensorflow.compat.v1`; three things of TF 1.x
are gone from TF 2.16 with Keras 3, so `load` swaps in these small stand-ins while it executes a
file (the file on disk stays Google's, verified by sha256):

- `tf.layers.dense` (Keras 3 has no `tf.compat.v1.layers`): the same variables, `<name>/kernel`
  and `<name>/bias` created with `tf.get_variable` in a variable scope, the same math;
- `tensorflow.contrib.layers.layer_norm`: `<scope>/beta`, `<scope>/gamma` over the last axis with
  contrib's variance epsilon 1e-12;
- `tf.flags` / `absl.flags`: absl's flags on a FlagValues of Google's code's own, so its
  definitions stay out of absl's global FLAGS in the test process. `run_pretraining` gets
  one of its own: it is a separate program whose flags would collide with
  `create_pretraining_data`'s (only its input and head functions are used).

Example:

    bert = load()                     # namespace with modeling, tokenization, ...
    tokenizer = bert.tokenization.FullTokenizer(vocab_file, do_lower_case=True)
"""

from __future__ import annotations

import functools
import logging
import sys
import types

import tensorflow as tf
from absl import flags

from bert_tf.data import fetch

MODULES = ("tokenization", "modeling", "optimization", "create_pretraining_data", "run_pretraining")
LAYER_NORM_EPSILON = 1e-12  # tf.contrib.layers.layer_norm's variance_epsilon

_V1 = tf.compat.v1


def _dense(inputs, units, activation=None, name=None, kernel_initializer=None, **unused):
    """tf.layers.dense as TF 1.x built it: `kernel` [in, units] and zero-initialised `bias`."""
    with _V1.variable_scope(name, default_name="dense"):
        kernel = _V1.get_variable(
            "kernel", [inputs.shape[-1], units], initializer=kernel_initializer
        )
        bias = _V1.get_variable("bias", [units], initializer=_V1.zeros_initializer())
        outputs = tf.tensordot(inputs, kernel, [[inputs.shape.rank - 1], [0]]) + bias
        return activation(outputs) if activation is not None else outputs


def _layer_norm(inputs, begin_norm_axis=-1, begin_params_axis=-1, scope=None, **unused):
    """tf.contrib.layers.layer_norm over the last axis (the only use in Google's code)."""
    if begin_norm_axis != -1 or begin_params_axis != -1:
        raise NotImplementedError("layer_norm stand-in: only the last axis")
    with _V1.variable_scope(scope, default_name="LayerNorm"):
        shape = inputs.shape[-1:]
        beta = _V1.get_variable("beta", shape, initializer=_V1.zeros_initializer())
        gamma = _V1.get_variable("gamma", shape, initializer=_V1.ones_initializer())
        mean, variance = tf.nn.moments(inputs, [-1], keepdims=True)
        return tf.nn.batch_normalization(inputs, mean, variance, beta, gamma, LAYER_NORM_EPSILON)


class _TF1(types.ModuleType):
    """`tensorflow.compat.v1` with the stand-ins above."""

    def __init__(self, flag_values: flags.FlagValues):
        super().__init__("tensorflow.compat.v1")
        self.layers = types.SimpleNamespace(dense=_dense)
        define = {
            name: functools.partial(getattr(flags, name), flag_values=flag_values)
            for name in ("DEFINE_string", "DEFINE_bool", "DEFINE_integer", "DEFINE_float")
        }
        self.flags = types.SimpleNamespace(
            FLAGS=flag_values,
            mark_flag_as_required=functools.partial(
                flags.mark_flag_as_required, flag_values=flag_values
            ),
            **define,
        )

    def __getattr__(self, name):
        return getattr(_V1, name)


def load() -> types.SimpleNamespace:
    """Google's modules, loaded once per process as the package `bert` (their own imports say
    `from bert import modeling`); each module's `FLAGS` is its own FlagValues."""
    if "bert" in sys.modules and getattr(sys.modules["bert"], "_oracle", False):
        package = sys.modules["bert"]
        return types.SimpleNamespace(**{name: getattr(package, name) for name in MODULES})
    folder = fetch.fetch("google_bert")
    package = types.ModuleType("bert")
    package.__path__ = [str(folder)]
    package._oracle = True
    sys.modules["bert"] = package
    shared = flags.FlagValues()  # tokenization's flag is create_pretraining_data's too
    contrib_layers = types.SimpleNamespace(layer_norm=_layer_norm)
    for name in MODULES:  # dependency order
        path = folder / f"{name}.py"
        source = path.read_text()
        for old, new in (
            ("import tensorflow.compat.v1 as tf\n", "tf = _TF1_SHIM\n"),
            ("from tensorflow.contrib import layers as contrib_layers\n", ""),
            ("from absl import flags\n", "flags = _TF1_SHIM.flags\n"),
        ):
            source = source.replace(old, new)
        module = types.ModuleType(f"bert.{name}")
        module.__file__ = str(path)
        module._TF1_SHIM = _TF1(flags.FlagValues() if name == "run_pretraining" else shared)
        module.contrib_layers = contrib_layers
        sys.modules[module.__name__] = module
        exec(compile(source, str(path), "exec"), module.__dict__)
        module._TF1_SHIM.flags.FLAGS.mark_as_parsed()  # defaults readable; see run_main
        setattr(package, name, module)
    return types.SimpleNamespace(**{name: getattr(package, name) for name in MODULES})


def run_main(module: types.ModuleType, argv: list[str]) -> None:
    """Runs a Google script's `main` with `argv` parsed into its own flags (as `tf.app.run`).

    Its `tf.logging.set_verbosity(tf.logging.INFO)` (create_pretraining_data's first line) sets
    the process' "tensorflow" logger, which `bert_tf.quiet` keeps at WARNING: restored after, or
    TensorFlow's INFO records reached every later test of the pytest worker."""
    fv = module.FLAGS
    fv.unparse_flags()
    fv([module.__name__, *argv])
    tf_logger = logging.getLogger("tensorflow")
    level = tf_logger.level
    try:
        module.main(None)
    finally:
        tf_logger.setLevel(level)
