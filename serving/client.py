"""Client for TF Serving (the real one or ours): a small Python API and a command line.

    python -m serving.client --server=localhost:8500 --model_name=sst2 \\
        --text="a masterful, moving film"
    python -m serving.client --model_name=mnli --text="A dog runs." --text_b="An animal moves."
    python -m serving.client --rest --server=localhost:8501 --model_name=sst2 \\
        --text="a gem" --text="dull, flat"
    python -m serving.client --model_name=sst2 --signature_name=classify --text_file=reviews.txt
    python -m serving.client --model_name=squad --text="Who wrote it?" \\
        --text_b="The book was written by Jane Austen."

`--text` is one text (commas included); repeat it for several, or give `--text_file` (UTF-8, one
input a line: `text` or `text<TAB>text_b`). A classifier's `text_b` defaults to "" (a single
sentence); a SQuAD model's second text is the context, which is required. A signature whose
method is classify/regress (e.g. `--signature_name=classify`) gets tf.Examples with `text_a`
(+ `text_b`) and prints label/score pairs (or values). `--server` is `host:port` for both APIs
(a full `http://` URL also works with `--rest`); the default port is 8500, or 8501 with `--rest`.

The command line never imports TensorFlow (only grpc, numpy and the generated protos), so a call
takes about a second instead of TensorFlow's import time.

Python API:

>>> with ServingClient("localhost:8500") as client:
...     client.predict("bert_encoder", {"text": ["hello world"]})["pooled_output"].shape
(1, 384)
"""

import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import json
import math
import sys
import types
import urllib.error
import urllib.request

import grpc
import numpy as np
from absl import flags
from google.protobuf import json_format

from bert_tf import fileio, flags_util


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
# The BERT exports' string inputs: (first text, second text) per signature kind (a
# single-sentence classifier exported with single_segment=True takes `text_a` alone).
_TEXT_INPUTS = [("text", None), ("text_a", None), ("text_a", "text_b"), ("question", "context")]

# --- numpy <-> TensorProto (as tf.make_tensor_proto / tf.make_ndarray, without TensorFlow) -----

_NUMPY_DTYPES = {
    types_pb2.DT_FLOAT: np.float32,
    types_pb2.DT_DOUBLE: np.float64,
    types_pb2.DT_HALF: np.float16,
    types_pb2.DT_INT8: np.int8,
    types_pb2.DT_INT16: np.int16,
    types_pb2.DT_INT32: np.int32,
    types_pb2.DT_INT64: np.int64,
    types_pb2.DT_UINT8: np.uint8,
    types_pb2.DT_UINT16: np.uint16,
    types_pb2.DT_UINT32: np.uint32,
    types_pb2.DT_UINT64: np.uint64,
    types_pb2.DT_BOOL: np.bool_,
    types_pb2.DT_COMPLEX64: np.complex64,
    types_pb2.DT_COMPLEX128: np.complex128,
}
_PROTO_DTYPES = {np.dtype(v): k for k, v in _NUMPY_DTYPES.items()}
# The repeated field holding a dtype's values when `tensor_content` is not used.
_VALUE_FIELDS = {
    types_pb2.DT_FLOAT: "float_val",
    types_pb2.DT_DOUBLE: "double_val",
    types_pb2.DT_HALF: "half_val",  # float16 bit patterns
    types_pb2.DT_INT8: "int_val",
    types_pb2.DT_INT16: "int_val",
    types_pb2.DT_INT32: "int_val",
    types_pb2.DT_UINT8: "int_val",
    types_pb2.DT_UINT16: "int_val",
    types_pb2.DT_INT64: "int64_val",
    types_pb2.DT_UINT32: "uint32_val",
    types_pb2.DT_UINT64: "uint64_val",
    types_pb2.DT_BOOL: "bool_val",
    types_pb2.DT_COMPLEX64: "scomplex_val",  # (real, imaginary) pairs
    types_pb2.DT_COMPLEX128: "dcomplex_val",
}


def _to_bytes(value) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, np.bytes_ | np.str_):
        return _to_bytes(value.item())
    raise TypeError(f"expected str or bytes in a string tensor, got {type(value).__name__}")


def make_tensor_proto(value) -> tensor_pb2.TensorProto:
    """A TensorProto of an array-like, as `tf.make_tensor_proto` makes it.

    Arrays (and anything with a `dtype`) keep their dtype; Python numbers and lists get TF's
    defaults: float32 for floats, int32 for ints (int64 when out of range). str/bytes (or
    object arrays of them) are DT_STRING, str encoded as UTF-8.
    """
    if isinstance(value, tensor_pb2.TensorProto):
        return value
    if hasattr(value, "dtype"):
        array = np.asarray(value)
    else:  # Python scalars and lists
        try:
            array = np.asarray(value)
        except UnicodeDecodeError:  # str and non-ASCII bytes together
            array = np.array(value, dtype=object)
        if array.dtype.kind in "SU":  # bytes as given (numpy's "S" drops trailing NULs)
            array = np.array(value, dtype=object)
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        elif array.dtype == np.int64 and (
            not array.size or (array.min() >= -(2**31) and array.max() < 2**31)
        ):
            array = array.astype(np.int32)
    proto = tensor_pb2.TensorProto(
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in array.shape]
        )
    )
    if array.dtype.kind in "OSU":
        proto.dtype = types_pb2.DT_STRING
        proto.string_val.extend(_to_bytes(v) for v in array.reshape(-1))
        return proto
    dtype = _PROTO_DTYPES.get(array.dtype.newbyteorder("="))
    if dtype is None:
        raise TypeError(f"unsupported dtype for a TensorProto: {array.dtype}")
    proto.dtype = dtype
    proto.tensor_content = np.ascontiguousarray(array, array.dtype.newbyteorder("<")).tobytes()
    return proto


def make_ndarray(proto: tensor_pb2.TensorProto) -> np.ndarray:
    """The numpy array of a TensorProto, as `tf.make_ndarray` (strings: object array of bytes)."""
    shape = [d.size for d in proto.tensor_shape.dim]
    count = math.prod(shape)
    if proto.dtype == types_pb2.DT_STRING:
        values = list(proto.string_val)
        if len(values) < count:  # TF repeats the last value (or b"") to fill the shape
            values += [values[-1] if values else b""] * (count - len(values))
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array.reshape(shape)
    if proto.dtype not in _NUMPY_DTYPES:
        name = types_pb2.DataType.Name(proto.dtype)
        raise TypeError(f"unsupported TensorProto dtype without TensorFlow: {name}")
    dtype = np.dtype(_NUMPY_DTYPES[proto.dtype])
    if proto.tensor_content:
        return (
            np.frombuffer(proto.tensor_content, dtype.newbyteorder("<"))
            .astype(dtype)
            .reshape(shape)
        )
    values = getattr(proto, _VALUE_FIELDS[proto.dtype])
    if proto.dtype == types_pb2.DT_HALF:
        values = np.asarray(values, np.uint16).view(np.float16)
    elif dtype.kind == "c":
        values = np.asarray(values, np.float32 if dtype == np.complex64 else np.float64).view(dtype)
    else:
        values = np.asarray(values, dtype)
    if values.size == count:
        return values.reshape(shape)
    if values.size == 0:
        return np.zeros(shape, dtype)
    if values.size > count:
        raise ValueError(f"TensorProto has {values.size} values for shape {shape}")
    return np.pad(values, (0, count - values.size), "edge").reshape(shape)


def _set_spec(spec, model: str, signature: str | None, version: int | None, label: str | None):
    spec.name = model
    if signature is not None:
        spec.signature_name = signature
    if version is not None:
        spec.version.value = version
    if label:
        spec.version_label = label


def _example(features: dict) -> example_pb2.Example:
    feature = {}
    for key, value in features.items():
        values = np.asarray(value).reshape(-1)
        if values.dtype.kind in "iub":
            feature[key] = feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=values))
        elif values.dtype.kind == "f":
            feature[key] = feature_pb2.Feature(float_list=feature_pb2.FloatList(value=values))
        else:
            encoded = [v if isinstance(v, bytes) else str(v).encode() for v in values]
            feature[key] = feature_pb2.Feature(bytes_list=feature_pb2.BytesList(value=encoded))
    return example_pb2.Example(features=feature_pb2.Features(feature=feature))


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
            request.inputs[name].CopyFrom(make_tensor_proto(value))
        response = self._predictions.Predict(request, timeout=timeout or self.timeout)
        return {name: make_ndarray(proto) for name, proto in response.outputs.items()}

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


# --- REST ------------------------------------------------------------------------------------


def rest_url(server: str) -> str:
    """The REST base URL of `server`: `host:port` gets `http://`; full URLs are kept."""
    server = server.strip().rstrip("/")
    return server if "://" in server else "http://" + server


def _model_path(model: str, version: int | None) -> str:
    return f"/v1/models/{model}" + (f"/versions/{version}" if version is not None else "")


def _rest_call(url: str, body: dict | None, timeout: float):
    """GET (or POST `body` as JSON) `url`; TF Serving's `{"error": ...}` as a RuntimeError."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:
        payload = e.read()
        try:
            message = json.loads(payload).get("error")
        except (ValueError, AttributeError):
            message = payload.decode("utf-8", "replace")[:200] or e.reason
        raise RuntimeError(f"HTTP {e.code}: {message}") from None


def _jsonable(value):
    array = np.asarray(value)
    if array.dtype.kind in "SO":
        return (
            [_jsonable(v) for v in value]
            if array.ndim
            else (value.decode() if isinstance(value, bytes) else value)
        )
    return array.tolist()


def rest_predict(
    base_url: str,
    model: str,
    inputs: dict,
    signature: str = DEFAULT_SIGNATURE,
    version: int | None = None,
    timeout: float = 30.0,
) -> dict:
    """Predict over REST (columnar `inputs` format); returns the JSON `outputs`.

    `base_url`: `http://host:port` or just `host:port`.
    """
    body = {"signature_name": signature, "inputs": {k: _jsonable(v) for k, v in inputs.items()}}
    url = rest_url(base_url) + _model_path(model, version) + ":predict"
    outputs = _rest_call(url, body, timeout)["outputs"]
    return outputs if isinstance(outputs, dict) else {"output": outputs}


def _rest_examples(examples: list[dict]) -> list[dict]:
    def value(v):
        values = [_jsonable(x) for x in np.asarray(v, dtype=object).reshape(-1)]
        return values[0] if len(values) == 1 else values

    return [{k: value(v) for k, v in e.items()} for e in examples]


def rest_classify(
    base_url: str,
    model: str,
    examples: list[dict],
    signature: str = DEFAULT_SIGNATURE,
    version: int | None = None,
    timeout: float = 30.0,
) -> list[list[tuple[str, float]]]:
    """Classify over REST (`:classify`); [(label, score)] per example, as `ServingClient`."""
    body = {"signature_name": signature, "examples": _rest_examples(examples)}
    url = rest_url(base_url) + _model_path(model, version) + ":classify"
    return [
        [(label, score) for label, score in r] for r in _rest_call(url, body, timeout)["results"]
    ]


def rest_regress(
    base_url: str,
    model: str,
    examples: list[dict],
    signature: str = DEFAULT_SIGNATURE,
    version: int | None = None,
    timeout: float = 30.0,
) -> list[float]:
    """Regress over REST (`:regress`); one value per example."""
    body = {"signature_name": signature, "examples": _rest_examples(examples)}
    url = rest_url(base_url) + _model_path(model, version) + ":regress"
    return list(_rest_call(url, body, timeout)["results"])


# --- Command line ----------------------------------------------------------------------------


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


def _quoted(text: str, limit: int = 60) -> str:
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return json.dumps(text, ensure_ascii=False)


def _row_name(text: str, text_b: str | None) -> str:
    return _quoted(text) + (f" | {_quoted(text_b)}" if text_b else "")


def format_classes(
    texts: list[str], texts_b: list[str | None], results: list[list[tuple[str, float]]]
) -> list[str]:
    """One line per input: its texts, then `label score` pairs, best first."""
    lines = []
    for text, text_b, classes in zip(texts, texts_b, results, strict=True):
        ranked = sorted(enumerate(classes), key=lambda item: -item[1][1])
        pairs = ", ".join(f"{label or f'#{i}'} {score:.4f}" for i, (label, score) in ranked)
        lines.append(f"{_row_name(text, text_b)}: {pairs}")
    return lines


def format_values(texts: list[str], texts_b: list[str | None], values: list[float]) -> list[str]:
    return [
        f"{_row_name(text, text_b)}: {value:.6g}"
        for text, text_b, value in zip(texts, texts_b, values, strict=True)
    ]


FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default).

    Called when the module runs as a program, never on import, so tests and other scripts can
    import it; tests run `main` in-process on a fresh FlagValues (see tests/conftest.py).
    """
    flags.DEFINE_string(
        "server",
        None,
        "host:port of the gRPC API (default localhost:8500), or with --rest of the REST API "
        "(default localhost:8501; a full http:// URL also works).",
        flag_values=flag_values,
    )
    flags.DEFINE_string("model_name", None, "Model to query.", flag_values=flag_values)
    flags.DEFINE_string(
        "signature_name",
        DEFAULT_SIGNATURE,
        "Signature to run; a classify/regress one (e.g. `classify`) gets tf.Examples.",
        flag_values=flag_values,
    )
    flags.DEFINE_multi_string(
        "text",
        [],
        "An input text (commas are part of it)",
        flag_values=flag_values,
    )
    flags.DEFINE_multi_string(
        "text_b",
        [],
        "The second text of each --text, in order: a classifier's text_b (none, or one empty "
        "value: single sentences), a SQuAD model's context (required)",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "text_file",
        None,
        "UTF-8 file of inputs, one a line: `text`, or `text<TAB>text_b`; blank lines are "
        "skipped. Instead of --text/--text_b.",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "rest", False, "Use the REST API at --server instead of gRPC.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "version", None, "Model version (default: latest).", flag_values=flag_values
    )
    flags.DEFINE_float("timeout", 30.0, "Deadline per request, seconds.", flag_values=flag_values)


def read_text_file(path: str) -> tuple[list[str], list[str | None], list[str]]:
    """(texts, second texts (None where a line has no tab), `path:line` of each) of a file."""
    try:
        data = fileio.read_bytes(path)  # a local file or a tf.io.gfile URI (gs://)
    except OSError as e:
        raise ValueError(f"--text_file: cannot read {path}: {e.strerror or e}") from None
    data = data.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ValueError(
            f"--text_file {path}:{line}: not UTF-8 ({e.reason}: byte {data[e.start]:#04x})"
        ) from None
    texts, texts_b, sources = [], [], []
    for number, line in enumerate(content.split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        text, tab, text_b = line.partition("\t")
        texts.append(text)
        texts_b.append(text_b if tab else None)
        sources.append(f"{path}:{number}")
    if not texts:
        raise ValueError(f"--text_file {path}: no texts in the file")
    return texts, texts_b, sources


def _pair_texts(
    second: str, text: list[str], text_b: list[str | None], sources: list[str] | None = None
) -> list[str]:
    """The second input per text; a classifier's (`text_b`) defaults to "" (single sentence)."""
    if second == "text_b" and (not text_b or list(text_b) == [""]):
        return [""] * len(text)
    if len(text_b) != len(text):
        what = " (a SQuAD context is required)" if second == "context" else ""
        raise ValueError(
            f"--text_b needs one value per --text for input {second!r}{what}: "
            f"got {len(text)} --text and {len(text_b)} --text_b"
        )
    for i, value in enumerate(text_b):
        if value is None and second != "text_b":
            where = sources[i] if sources else f"text {i + 1}"
            raise ValueError(f"{where}: no {second} (write `text<TAB>{second}`)")
    return ["" if value is None else value for value in text_b]


def text_inputs(
    input_names: list[str],
    text: list[str],
    text_b: list[str | None],
    sources: list[str] | None = None,
) -> dict:
    """Maps --text/--text_b onto the signature's string inputs (see _TEXT_INPUTS).

    `text_b`: empty (or one "") for single-sentence classifiers, else one per text (None: not
    given for that row; "" for `text_b`, an error for a SQuAD context, named by `sources`).
    """
    for first, second in _TEXT_INPUTS:
        if set(input_names) == {first, second} - {None}:
            inputs = {first: np.array(text, dtype=object)}
            if second:
                inputs[second] = np.array(_pair_texts(second, text, text_b, sources), dtype=object)
            elif any(text_b):  # (one empty --text_b, or lines without a tab: none given)
                raise ValueError(f"--text_b is not used: the signature's only input is {first!r}")
            return inputs
    raise ValueError(f"signature inputs {sorted(input_names)} are not text inputs this CLI knows")


def text_examples(text: list[str], text_b: list[str | None]) -> list[dict]:
    """tf.Example features per text for classify/regress: `text_a` (+ `text_b` when given)."""
    pairs = _pair_texts("text_b", text, text_b)
    return [{"text_a": a} | ({"text_b": b} if b else {}) for a, b in zip(text, pairs, strict=True)]


def _signature(signatures: dict, name: str):
    if name not in signatures:
        known = ", ".join(sorted(s for s in signatures if not s.startswith("__")))
        raise ValueError(f"model {FLAGS.model_name!r} has no signature {name!r} (it has: {known})")
    return signatures[name]


def _query(texts: list[str], texts_b: list[str | None], sources: list[str] | None) -> list[str]:
    """Runs the request the flags describe; the lines to print."""
    model, name, version, timeout = (
        FLAGS.model_name,
        FLAGS.signature_name,
        FLAGS.version,
        FLAGS.timeout,
    )
    with contextlib.ExitStack() as stack:
        if FLAGS.rest:
            base = rest_url(FLAGS.server or "localhost:8501")
            metadata = _rest_call(base + _model_path(model, version) + "/metadata", None, timeout)
            signature = _signature(metadata["metadata"]["signature_def"]["signature_def"], name)
            method, input_names = signature.get("method_name"), list(signature.get("inputs", {}))
            options = {"signature": name, "version": version, "timeout": timeout}
            classify = functools.partial(rest_classify, base, model, **options)
            regress = functools.partial(rest_regress, base, model, **options)
            predict = functools.partial(rest_predict, base, model, **options)
        else:
            grpc_client = stack.enter_context(
                ServingClient(FLAGS.server or "localhost:8500", timeout)
            )
            signature = _signature(grpc_client.metadata(model, version), name)
            method, input_names = signature.method_name, list(signature.inputs)
            options = {"signature": name, "version": version}
            classify = functools.partial(grpc_client.classify, model, **options)
            regress = functools.partial(grpc_client.regress, model, **options)
            predict = functools.partial(grpc_client.predict, model, **options)
        if method in (CLASSIFY_METHOD, REGRESS_METHOD):
            pairs = _pair_texts("text_b", texts, texts_b, sources)
            examples = text_examples(texts, pairs)
            if method == CLASSIFY_METHOD:
                return format_classes(texts, pairs, classify(examples))
            return format_values(texts, pairs, regress(examples))
        outputs = predict(text_inputs(input_names, texts, texts_b, sources))
    return [format_output(output, outputs[output]) for output in sorted(outputs)]


def main(argv):
    del argv
    try:
        if FLAGS.text_file:
            if FLAGS.text or FLAGS.text_b:
                raise ValueError("give --text_file or --text/--text_b, not both")
            texts, texts_b, sources = read_text_file(FLAGS.text_file)
        else:
            texts, texts_b, sources = FLAGS.text, FLAGS.text_b, None
        if not FLAGS.model_name or not texts:
            raise ValueError("--model_name and --text (or --text_file) are required")
        lines = _query(texts, texts_b, sources)
    except grpc.RpcError as e:
        sys.exit(f"error: {e.code().name}: {e.details()}")
    except (ValueError, KeyError, TypeError, RuntimeError, OSError) as e:
        sys.exit(f"error: {e}")
    for line in lines:
        print(line)


if __name__ == "__main__":
    define_flags()
    flags_util.run(main, literal=("text", "text_b"))
