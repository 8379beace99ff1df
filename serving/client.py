"""Client for TF Serving (the real one or ours): a small Python API and a command line.

    python -m serving.client --server=localhost:8500 --model_name=bert_classifier \\
        --text="the movie was great" --text_b="I liked it"
    python -m serving.client --rest --server=http://localhost:8501 --model_name=bert_encoder \\
        --text="hello world"

Python API:

>>> with ServingClient("localhost:8500") as client:
...     client.predict("bert_encoder", {"text": ["hello world"]})["pooled_output"].shape
(1, 384)
"""

import json
import sys
import urllib.error
import urllib.request

import grpc
import numpy as np
import tensorflow as tf
from absl import app, flags
from google.protobuf import json_format
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

DEFAULT_SIGNATURE = tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY
# The BERT exports' string inputs: (first text, second text) per signature kind.
_TEXT_INPUTS = [("text", None), ("text_a", "text_b"), ("question", "context")]


def _set_spec(spec, model: str, signature: str | None, version: int | None, label: str | None):
    spec.name = model
    if signature is not None:
        spec.signature_name = signature
    if version is not None:
        spec.version.value = version
    if label:
        spec.version_label = label


def _example(features: dict) -> tf.train.Example:
    feature = {}
    for key, value in features.items():
        values = np.asarray(value).reshape(-1)
        if values.dtype.kind in "iub":
            feature[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        elif values.dtype.kind == "f":
            feature[key] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        else:
            encoded = [v if isinstance(v, bytes) else str(v).encode() for v in values]
            feature[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=encoded))
    return tf.train.Example(features=tf.train.Features(feature=feature))


class ServingClient:
    """gRPC client for PredictionService / ModelService.

    Args:
        target: `host:port` of the gRPC API.
        timeout: default deadline per call, in seconds.
    """

    def __init__(self, target: str, timeout: float = 30.0):
        self._channel = grpc.insecure_channel(
            target, options=[("grpc.max_receive_message_length", -1)]
        )
        self._predictions = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)
        self._models = model_service_pb2_grpc.ModelServiceStub(self._channel)
        self.timeout = timeout

    def predict(
        self,
        model: str,
        inputs: dict,
        signature: str = DEFAULT_SIGNATURE,
        version: int | None = None,
        label: str | None = None,
        output_filter: list[str] | tuple = (),
        timeout: float | None = None,
    ) -> dict[str, np.ndarray]:
        """Runs a signature; string outputs come back as object arrays of bytes."""
        request = predict_pb2.PredictRequest(output_filter=output_filter)
        _set_spec(request.model_spec, model, signature, version, label)
        for name, value in inputs.items():
            request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
        response = self._predictions.Predict(request, timeout=timeout or self.timeout)
        return {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}

    def classify(
        self, model: str, examples: list[dict], signature: str = DEFAULT_SIGNATURE, **kwargs
    ) -> list[list[tuple[str, float]]]:
        """[(label, score)] per example; `examples` are dicts of feature name -> value(s)."""
        request = classification_pb2.ClassificationRequest()
        _set_spec(request.model_spec, model, signature, kwargs.get("version"), kwargs.get("label"))
        request.input.example_list.examples.extend(_example(e) for e in examples)
        response = self._predictions.Classify(request, timeout=kwargs.get("timeout", self.timeout))
        return [[(c.label, c.score) for c in r.classes] for r in response.result.classifications]

    def regress(
        self, model: str, examples: list[dict], signature: str = DEFAULT_SIGNATURE, **kwargs
    ) -> list[float]:
        request = regression_pb2.RegressionRequest()
        _set_spec(request.model_spec, model, signature, kwargs.get("version"), kwargs.get("label"))
        request.input.example_list.examples.extend(_example(e) for e in examples)
        response = self._predictions.Regress(request, timeout=kwargs.get("timeout", self.timeout))
        return [r.value for r in response.result.regressions]

    def metadata(self, model: str, version: int | None = None, label: str | None = None) -> dict:
        """Signature key -> SignatureDef proto."""
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        _set_spec(request.model_spec, model, None, version, label)
        response = self._predictions.GetModelMetadata(request, timeout=self.timeout)
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signature_map)
        return dict(signature_map.signature_def)

    def status(self, model: str, version: int | None = None) -> list[dict]:
        """[{"version", "state", "error_code", "error_message"}] per version."""
        request = get_model_status_pb2.GetModelStatusRequest()
        _set_spec(request.model_spec, model, None, version, None)
        response = self._models.GetModelStatus(request, timeout=self.timeout)
        return [
            json_format.MessageToDict(
                s, preserving_proto_field_name=True, including_default_value_fields=True
            )
            | {"version": s.version}
            for s in response.model_version_status
        ]

    def close(self) -> None:
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def rest_predict(
    base_url: str,
    model: str,
    inputs: dict,
    signature: str = DEFAULT_SIGNATURE,
    version: int | None = None,
    timeout: float = 30.0,
) -> dict:
    """Predict over REST (columnar `inputs` format); returns the JSON `outputs`."""
    path = f"/v1/models/{model}" + (f"/versions/{version}" if version is not None else "")

    def jsonable(value):
        array = np.asarray(value)
        if array.dtype.kind in "SO":
            return (
                [jsonable(v) for v in value]
                if array.ndim
                else (value.decode() if isinstance(value, bytes) else value)
            )
        return array.tolist()

    body = json.dumps(
        {"signature_name": signature, "inputs": {k: jsonable(v) for k, v in inputs.items()}}
    ).encode()
    request = urllib.request.Request(base_url.rstrip("/") + path + ":predict", data=body)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            outputs = json.load(response)["outputs"]
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"HTTP {e.code}: {json.loads(e.read()).get('error')}") from None
    return outputs if isinstance(outputs, dict) else {"output": outputs}


def format_output(name: str, value) -> str:
    """One readable line per output: strings decoded, floats rounded, big arrays summarised."""
    array = np.asarray(value)
    if array.dtype == object or array.dtype.kind == "S":
        array = (
            np.vectorize(
                lambda v: v.decode("utf-8", "replace") if isinstance(v, bytes) else v,
                otypes=[object],
            )(array)
            if array.size
            else array
        )
    text = np.array2string(array, precision=4, threshold=20, edgeitems=3, separator=", ")
    dtype = "string" if array.dtype.kind in "OU" else array.dtype
    return f"{name} {list(array.shape)} {dtype}: {text}"


FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default).

    Called when the module runs as a program, never on import, so tests and other scripts can
    import it; tests run `main` in-process on a fresh FlagValues (see tests/conftest.py).
    """
    flags.DEFINE_string(
        "server",
        "localhost:8500",
        "gRPC host:port, or the REST base URL with --rest.",
        flag_values=flag_values,
    )
    flags.DEFINE_string("model_name", None, "Model to query.", flag_values=flag_values)
    flags.DEFINE_string(
        "signature_name", DEFAULT_SIGNATURE, "Signature to run.", flag_values=flag_values
    )
    flags.DEFINE_list(
        "text", [], "Input text(s), comma-separated or repeated.", flag_values=flag_values
    )
    flags.DEFINE_list(
        "text_b", [], "Second text(s) (classifier text_b / SQuAD context).", flag_values=flag_values
    )
    flags.DEFINE_bool(
        "rest", False, "Use the REST API at --server instead of gRPC.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "version", None, "Model version (default: latest).", flag_values=flag_values
    )
    flags.DEFINE_float("timeout", 30.0, "Deadline per request, seconds.", flag_values=flag_values)


def text_inputs(input_names: list[str], text: list[str], text_b: list[str]) -> dict:
    """Maps --text/--text_b onto the signature's string inputs (see _TEXT_INPUTS)."""
    for first, second in _TEXT_INPUTS:
        if set(input_names) == {first, second} - {None}:
            inputs = {first: np.array(text, dtype=object)}
            if second:
                if len(text_b) != len(text):
                    raise ValueError(f"--text_b needs one value per --text for input {second!r}")
                inputs[second] = np.array(text_b, dtype=object)
            return inputs
    raise ValueError(f"signature inputs {sorted(input_names)} are not text inputs this CLI knows")


def main(argv):
    del argv
    if not FLAGS.model_name or not FLAGS.text:
        sys.exit("error: --model_name and --text are required")
    try:
        if FLAGS.rest:
            url = f"{FLAGS.server.rstrip('/')}/v1/models/{FLAGS.model_name}/metadata"
            with urllib.request.urlopen(url, timeout=FLAGS.timeout) as response:
                signatures = json.load(response)["metadata"]["signature_def"]["signature_def"]
            names = list(signatures[FLAGS.signature_name]["inputs"])
            outputs = rest_predict(
                FLAGS.server,
                FLAGS.model_name,
                text_inputs(names, FLAGS.text, FLAGS.text_b),
                FLAGS.signature_name,
                FLAGS.version,
                FLAGS.timeout,
            )
        else:
            with ServingClient(FLAGS.server, FLAGS.timeout) as client:
                signature = client.metadata(FLAGS.model_name, FLAGS.version)[FLAGS.signature_name]
                outputs = client.predict(
                    FLAGS.model_name,
                    text_inputs(list(signature.inputs), FLAGS.text, FLAGS.text_b),
                    FLAGS.signature_name,
                    FLAGS.version,
                )
    except grpc.RpcError as e:
        sys.exit(f"error: {e.code().name}: {e.details()}")
    except (ValueError, KeyError, RuntimeError, OSError) as e:
        sys.exit(f"error: {e}")
    for name in sorted(outputs):
        print(format_output(name, outputs[name]))


if __name__ == "__main__":
    define_flags()
    app.run(main)
