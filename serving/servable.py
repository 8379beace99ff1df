"""One loaded model version: its signatures as callables plus their SignatureDefs.

Example:

>>> servable = load_servable("strings", 1, "/models/strings/1")
>>> servable.signature("serving_default").run({"text": np.array([b"hi"], dtype=object)})
{'length': array([2], dtype=int32), 'upper': array([b'HI'], dtype=object)}
"""

from collections.abc import Callable

import grpc
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops BERT SavedModels use)
from absl import logging

from serving import op_check
from serving.signatures import read_signature_defs

DEFAULT_SIGNATURE = tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY

# TensorFlow error codes are numerically the gRPC status codes.
_GRPC_CODES = {code.value[0]: code for code in grpc.StatusCode}


class ServingError(Exception):
    """An error with the gRPC status code TF Serving returns for it."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    @classmethod
    def from_tf_error(cls, error: tf.errors.OpError) -> "ServingError":
        return cls(_GRPC_CODES.get(error.error_code, grpc.StatusCode.UNKNOWN), error.message)


class Signature:
    """A signature function with the input checks TF Serving applies before running it."""

    def __init__(self, name: str, function, signature_def):
        self.name = name
        self.signature_def = signature_def
        self.method_name = signature_def.method_name
        self.input_specs: dict[str, tf.TensorSpec] = function.structured_input_signature[1]
        self.output_names = sorted(signature_def.outputs)
        self._function = function
        # Set by the model manager when --enable_batching is on.
        self.batch_scheduler = None

    def check_inputs(self, inputs: dict[str, np.ndarray]) -> None:
        """Raises INVALID_ARGUMENT unless `inputs` match the signature's names, dtypes, shapes."""
        extra, missing = set(inputs) - set(self.input_specs), set(self.input_specs) - set(inputs)
        if extra or missing:
            raise ServingError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Request inputs do not match required inputs for signature {self.name!r}. "
                f"Send extra: {sorted(extra)}. Missing but required: {sorted(missing)}.",
            )
        for index, (name, spec) in enumerate(sorted(self.input_specs.items())):
            dtype = tf.as_dtype(inputs[name].dtype)
            if dtype != spec.dtype:
                raise ServingError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Expects arg[{index}] ({name}) to be {spec.dtype.name} "
                    f"but {dtype.name} is provided",
                )
            if not spec.shape.is_compatible_with(inputs[name].shape):
                raise ServingError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Input {name!r} has shape {list(inputs[name].shape)}, "
                    f"expected {spec.shape.as_list()}",
                )

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs the signature on checked inputs; TF runtime errors keep their status code."""
        try:
            outputs = self._function(**{k: tf.constant(v) for k, v in inputs.items()})
        except tf.errors.OpError as e:
            raise ServingError.from_tf_error(e) from None
        return {name: value.numpy() for name, value in outputs.items()}

    def __call__(self, inputs: dict[str, np.ndarray], deadline: float | None = None):
        """Checks then runs `inputs`, through the batch scheduler when batching is enabled."""
        self.check_inputs(inputs)
        if self.batch_scheduler is not None:
            return self.batch_scheduler.submit(inputs, deadline)
        return self.run(inputs)


class Servable:
    """A loaded model version. Requests hold a reference, so unloading never cuts them off."""

    def __init__(self, name: str, version: int, path: str, module, signature_defs):
        self.name = name
        self.version = version
        self.path = path
        # All SignatureDefs, as TF Serving's GetModelMetadata reports them (init op included).
        self.signature_defs = signature_defs
        self.signatures = {
            key: Signature(key, fn, signature_defs[key]) for key, fn in module.signatures.items()
        }
        self._module = module  # keeps the functions' variables alive

    def signature(self, name: str) -> Signature:
        name = name or DEFAULT_SIGNATURE
        if name not in self.signatures:
            raise ServingError(
                grpc.StatusCode.FAILED_PRECONDITION, f'Serving signature key "{name}" not found.'
            )
        return self.signatures[name]

    def enable_batching(self, make_scheduler: Callable[[Signature], object]) -> None:
        for signature in self.signatures.values():
            signature.batch_scheduler = make_scheduler(signature)

    def close(self) -> None:
        """Finishes queued batches; later calls run unbatched, so none is dropped."""
        for signature in self.signatures.values():
            if signature.batch_scheduler is not None:
                signature.batch_scheduler.close()


def load_servable(name: str, version: int, path: str) -> Servable:
    """Loads the SavedModel at `path` as version `version` of model `name`.

    Logs a warning naming the ops the stock `tensorflow_model_server` does not register
    (`serving.op_check`): this server runs them (it imports every tensorflow-text op), the
    stock one would not load that version.
    """
    signature_defs = read_signature_defs(path)
    module = tf.saved_model.load(path, tags=[tf.saved_model.SERVING])
    outside = op_check.ops_outside(path)
    if outside:
        logging.warning(
            "%s version %d uses op(s) %s that the stock %s does not register: served here, "
            "but TF Serving 2.13-2.19 would not load it",
            name,
            version,
            ", ".join(outside),
            op_check.stock_server(),
        )
    return Servable(name, version, path, module, signature_defs)
