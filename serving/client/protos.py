"""TF Serving's protos (and TensorFlow's they use) without importing TensorFlow, and the names
of its signature methods.

Importing `tensorflow.core.*_pb2` normally runs `tensorflow/__init__.py` first, all of
TensorFlow (10+ s); here they load under a placeholder package (see
`_tensorflow_protos_without_tensorflow`), so the client's command line starts in about a second.
Every module of this package that needs a proto imports it from here, so the placeholder is in
place before the first proto import.
"""

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

__all__ = [
    "CLASSIFY_METHOD",
    "DEFAULT_SIGNATURE",
    "REGRESS_METHOD",
    "classification_pb2",
    "example_pb2",
    "feature_pb2",
    "get_model_metadata_pb2",
    "get_model_status_pb2",
    "model_service_pb2_grpc",
    "predict_pb2",
    "prediction_service_pb2_grpc",
    "regression_pb2",
    "tensor_pb2",
    "tensor_shape_pb2",
    "types_pb2",
]


class _BindingLoader(importlib.abc.Loader):
    """Runs `tensorflow/__init__.py` with the already loaded `tensorflow.<name>` subpackages
    bound on the new module first, as they would be had `__init__` imported them itself."""

    def __init__(self, loader: importlib.abc.Loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        for name, submodule in list(sys.modules.items()):
            if name.startswith("tensorflow.") and name.count(".") == 1 and submodule is not None:
                setattr(module, name.partition(".")[2], submodule)
        self._loader.exec_module(module)


class _TensorFlowAfterProtosFinder(importlib.abc.MetaPathFinder):
    """Wraps the next `import tensorflow` in a _BindingLoader, then steps aside."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)  # the other finders (e.g. bert_tf.quiet's)
        if spec is not None and spec.loader is not None:
            spec.loader = _BindingLoader(spec.loader)
        return spec


@contextlib.contextmanager
def _tensorflow_protos_without_tensorflow():
    """Lets `tensorflow.core.*_pb2` (imported by `tensorflow_serving.apis`) load without TF.

    Importing `tensorflow.core.framework.tensor_pb2` first runs `tensorflow/__init__.py`, i.e.
    all of TensorFlow (10+ s), although the generated modules need only protobuf. So, in a
    process that has not imported `tensorflow`, an empty placeholder package pointing at the
    real package folder stands in for `tensorflow` while the protos load, and is removed
    afterwards: the `tensorflow.core...`/`tensorflow.tsl...` proto modules stay in sys.modules,
    and a later `import tensorflow` runs the real `__init__`, which reuses those same modules
    (the very ones it would have loaded, so message classes stay identical; a one-shot finder
    binds `tf.core`/`tf.tsl` first, as a plain import would). A process that has already
    imported TensorFlow imports everything normally. (Not thread-safe while the placeholder
    is in place: do not import `tensorflow` on another thread meanwhile.)
    """
    # PathFinder directly: the meta path (e.g. bert_tf.quiet's one-shot finder) stays untouched.
    spec = None
    if "tensorflow" not in sys.modules:
        spec = importlib.machinery.PathFinder.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        yield
        return
    placeholder = types.ModuleType("tensorflow", "Placeholder: TensorFlow's protos only.")
    placeholder.__path__ = list(spec.submodule_search_locations)
    sys.modules["tensorflow"] = placeholder
    try:
        yield
    finally:
        if sys.modules.get("tensorflow") is placeholder:
            del sys.modules["tensorflow"]
            sys.meta_path.insert(0, _TensorFlowAfterProtosFinder())


with _tensorflow_protos_without_tensorflow():
    from tensorflow.core.example import example_pb2, feature_pb2
    from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorflow_serving.apis import (
        classification_pb2,
        get_model_metadata_pb2,
        get_model_status_pb2,
        model_service_pb2_grpc,
        predict_pb2,
        prediction_service_pb2_grpc,
        regression_pb2,
    )

DEFAULT_SIGNATURE = "serving_default"  # tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
