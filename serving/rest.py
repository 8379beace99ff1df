"""TF Serving's HTTP/REST API (`/v1/models/...`) on the standard library's threading HTTP server.

- `GET  /v1/models/<name>[/versions/<v>|/labels/<l>]`           model status
- `GET  /v1/models/<name>[/versions/<v>|/labels/<l>]/metadata`  signatures
- `POST /v1/models/<name>[/versions/<v>|/labels/<l>]:predict`   `instances` (row) or `inputs`
  (columnar) in, `predictions` / `outputs` out; binary strings as `{"b64": ...}`
- `POST ...:classify` / `...:regress`                           `examples` (+ `context`) in
- `GET  <prometheus path>` when monitoring is enabled
Errors are `{"error": "..."}` with TF Serving's HTTP status for the gRPC code. Bodies over the
server's cap are refused from their Content-Length, unread (429, RESOURCE_EXHAUSTED).

Example:

>>> server = RestServer(RestApi(make_service(), 30000, None), "127.0.0.1", 8501)
>>> server.start()
"""

import base64
import json
import re
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import numpy as np
import tensorflow as tf
from absl import logging
from google.protobuf import json_format
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    regression_pb2,
)

from serving.inference import InferenceService
from serving.servable import ServingError

# TF Serving's mapping of status codes to HTTP (util/net_http's ToHTTPStatusCode).
_HTTP_STATUS = {
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.INVALID_ARGUMENT: HTTPStatus.BAD_REQUEST,
    grpc.StatusCode.FAILED_PRECONDITION: HTTPStatus.BAD_REQUEST,
    grpc.StatusCode.OUT_OF_RANGE: HTTPStatus.BAD_REQUEST,
    grpc.StatusCode.DEADLINE_EXCEEDED: HTTPStatus.GATEWAY_TIMEOUT,
    grpc.StatusCode.NOT_FOUND: HTTPStatus.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS: HTTPStatus.CONFLICT,
    grpc.StatusCode.ABORTED: HTTPStatus.CONFLICT,
    grpc.StatusCode.PERMISSION_DENIED: HTTPStatus.FORBIDDEN,
    grpc.StatusCode.UNAUTHENTICATED: HTTPStatus.UNAUTHORIZED,
    grpc.StatusCode.RESOURCE_EXHAUSTED: HTTPStatus.TOO_MANY_REQUESTS,
    grpc.StatusCode.UNIMPLEMENTED: HTTPStatus.NOT_IMPLEMENTED,
    grpc.StatusCode.UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
}

_PATH = re.compile(
    r"/v1/models/(?P<name>[^/:]+)"
    # ASCII digits only: `\d` would also take other scripts' digits, which int() reads too.
    r"(?:/versions/(?P<version>[0-9]+)|/labels/(?P<label>[^/:]+))?"
    r"(?:/(?P<metadata>metadata)|:(?P<method>predict|classify|regress))?"
)
# How long a refused request's unread body is drained before the connection closes.
_DISCARD_SECONDS = 2
# Model names and labels are map keys, never paths; still, refuse anything path-like.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")


def _invalid(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.INVALID_ARGUMENT, message)


def _is_b64(value) -> bool:
    return isinstance(value, dict) and list(value) == ["b64"]


def _to_bytes(value):
    if isinstance(value, list):
        return [_to_bytes(v) for v in value]
    if _is_b64(value):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (ValueError, TypeError):
            raise _invalid(f"Invalid base64 value: {value['b64']!r}") from None
    if isinstance(value, str):
        return value.encode("utf-8")
    raise _invalid(f"Expected a string or {{'b64': ...}}, got {json.dumps(value)}")


# The JSON value types each kind of input takes, as TF Serving's parser checks them (RapidJSON's
# IsBool / IsInt64 / IsNumber): `true` is not a number and 7.5 not an integer.
_JSON_TYPES = {"bool": (bool,), "integer": (int,), "floating": (int, float)}
INT64 = np.iinfo(np.int64)


def json_to_array(name: str, value, dtype: tf.DType) -> np.ndarray:
    """A JSON value as an array of the signature input's dtype (TF Serving parses by signature)."""
    try:
        if dtype == tf.string:
            array = np.array(_to_bytes(value), dtype=object)
            if not all(isinstance(x, bytes) for x in array.flat):
                raise ValueError("ragged nested lists")
            return array
        return _numbers(name, value, dtype)
    except (ValueError, TypeError) as e:
        raise _invalid(
            f"Input {name!r}: cannot convert {str(value)[:100]} to {dtype.name}: {e}"
        ) from None


def _numbers(name: str, value, dtype: tf.DType) -> np.ndarray:
    """Numbers of a bool/integer/float input, each of a JSON type the dtype takes and, for
    integers, in its range (numpy alone would wrap 2**31 round in int32, truncate 7.5 to 7 and
    take `true` as 1)."""
    kind = "bool" if dtype.is_bool else "integer" if dtype.is_integer else "floating"
    values = np.array(value, dtype=object)  # nested lists of one shape; a ragged one: leaves
    for leaf in values.flat:
        # bool is an int subclass in Python, so the exact type is what counts.
        if type(leaf) not in _JSON_TYPES[kind]:
            raise _invalid(
                f"Input {name!r}: JSON value {json.dumps(leaf)[:100]} is not of expected "
                f"type: {dtype.name}"
            )
    if kind == "integer" and values.size:
        limits = np.iinfo(dtype.as_numpy_dtype)
        low, high = min(values.flat), max(values.flat)
        if low < limits.min or high > limits.max:
            out = low if low < limits.min else high
            raise _invalid(
                f"Input {name!r}: {out} is out of range for {dtype.name} "
                f"([{limits.min}, {limits.max}])"
            )
    return values.astype(dtype.as_numpy_dtype)


# --- float32 values at float32 precision in JSON ----------------------------------------------
#
# Python's json writes a float by its shortest float64 repr, so a float32 0.1 (as the float64
# 0.100000001490116...) comes out as 0.10000000149011612. TF Serving writes float32 tensors at
# float32 precision. So each float32 value becomes the float64 nearest its shortest float32
# round-trip decimal (whose repr is that decimal), vectorized: for each value, the fewest
# significant digits d (7 first, then fewer or more) whose rounding `rint(v * 10**s) / 10**s`
# (s = d - 1 - decimal exponent) parses back to the same float32.

_POWERS_OF_10 = 10.0 ** np.arange(23)  # exact in float64
# x86's 80-bit (or a 128-bit) long double: 10**s to 10**27 exact, 64-bit products and quotients.
_LONG_DOUBLE = np.finfo(np.longdouble).nmant >= 63
_LONG_POWERS_OF_10 = np.longdouble(10) ** np.arange(64).astype(np.longdouble)
_LONG_EPSILON = np.finfo(np.longdouble).eps


def _rounded(values, exponent, digits: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(`values` rounded to `digits` significant digits, None): |scale| <= 22, so the powers of
    ten are exact and each result is the double nearest its decimal (one correct rounding)."""
    scale = digits - 1 - exponent
    factor = _POWERS_OF_10[np.abs(scale)]
    if not scale.size or scale.min() >= 0:
        return np.rint(values * factor) / factor, None
    up = scale >= 0
    return np.where(up, np.rint(values * factor) / factor, np.rint(values / factor) * factor), None


def _rounded_long(values, exponent, digits: int) -> tuple[np.ndarray, np.ndarray]:
    """As _rounded for any float32 (|scale| <= 53) in long double, with a `certain` mask: False
    where the decimal lies so near a midpoint between two doubles that long double's rounding
    might have picked the other one (rare: those go through numpy's per-value repr)."""
    scale = digits - 1 - exponent
    factor = _LONG_POWERS_OF_10[np.abs(scale)]
    long_values = values.astype(np.longdouble)
    up = scale >= 0
    count = np.rint(np.where(up, long_values * factor, long_values / factor))
    decimal = np.where(up, count / factor, count * factor)
    candidate = decimal.astype(np.float64)
    neighbour = np.nextafter(candidate, np.where(decimal > candidate, np.inf, -np.inf))
    half_gap = (np.abs(neighbour - candidate) / 2).astype(np.longdouble)
    off = np.abs(decimal - candidate.astype(np.longdouble))
    return candidate, np.abs(off - half_gap) > 8 * _LONG_EPSILON * np.abs(decimal)


def _shortest(values, exponent, rounder) -> tuple[np.ndarray, np.ndarray]:
    """(the shortest round-trip decimals of float32 `values` (float64), indices unresolved)."""
    target = values.astype(np.float32)
    result = values.copy()
    certain = np.ones(values.shape, bool)

    def attempt(index, digits):
        candidate, sure = rounder(values[index], exponent[index], digits)
        good = candidate.astype(np.float32) == target[index]
        result[index[good]] = candidate[good]
        if sure is not None:
            certain[index[good]] = sure[good]
        return good

    good = attempt(np.arange(values.size), 7)
    down = np.flatnonzero(good)  # 7 digits round-trip: fewer while they still do
    for digits in range(6, 0, -1):
        if not down.size:
            break
        down = down[attempt(down, digits)]
    up = np.flatnonzero(~good)  # 7 do not: 8, else 9 (which always do, up to rounding)
    for digits in (8, 9):
        if not up.size:
            break
        up = up[~attempt(up, digits)]
    return result, np.union1d(up, np.flatnonzero(~certain))


def float32_json_values(array) -> np.ndarray:
    """float32 values as the float64 values of their shortest float32 round-trip decimals.

    JSON then writes 0.1, not 0.10000000149011612 (see above). NaN, inf and 0 are kept.
    """
    x = np.asarray(array, np.float32)
    with np.errstate(all="ignore"):  # log10(0), NaN payloads, float32 overflow of candidates
        return _float32_json_values(x)


def _float32_json_values(x: np.ndarray) -> np.ndarray:
    flat = x.astype(np.float64).ravel()
    exponent = np.floor(np.log10(np.abs(flat)))
    finite = np.isfinite(exponent)  # False for 0, inf and NaN
    exact = finite & (exponent >= -14) & (exponent <= 22)  # |scale| <= 22 for 1 to 9 digits
    left = []
    for index, rounder in (
        (np.flatnonzero(exact), _rounded),
        (np.flatnonzero(finite & ~exact), _rounded_long if _LONG_DOUBLE else None),
    ):
        if not index.size:
            continue
        if rounder is None:
            left.append(index)
            continue
        values, unresolved = _shortest(flat[index], exponent[index].astype(np.int64), rounder)
        flat[index] = values
        left.append(index[unresolved])
    for i in np.concatenate(left) if left else ():
        flat[i] = float(str(np.float32(flat[i])))  # numpy's str: the shortest float32 repr
    return flat.reshape(x.shape)


def array_to_json(name: str, array: np.ndarray):
    """An output array as JSON; strings decode as UTF-8 unless binary (or the alias ends `_bytes`).

    float32 values are written at float32 precision (see float32_json_values), others as is."""
    if array.dtype == np.float32:
        return float32_json_values(array).tolist()
    if array.dtype != object:
        return array.tolist()

    def convert(value):
        if isinstance(value, list):
            return [convert(v) for v in value]
        if not name.endswith("_bytes"):
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                pass
        return {"b64": base64.b64encode(value).decode("ascii")}

    return convert(array.tolist())


def _feature(value) -> tf.train.Feature:
    values = value if isinstance(value, list) else [value]
    if all(isinstance(v, bool | int) for v in values):
        for v in values:
            if not INT64.min <= v <= INT64.max:
                raise _invalid(f"Example feature value {v} is out of range for int64")
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    if all(isinstance(v, bool | int | float) for v in values):
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[_to_bytes(v) for v in values]))


def json_to_example(features) -> tf.train.Example:
    if not isinstance(features, dict):
        raise _invalid(f"Each example must be a JSON object, got {json.dumps(features)[:100]}")
    return tf.train.Example(
        features=tf.train.Features(feature={k: _feature(v) for k, v in features.items()})
    )


def error_response(error: ServingError) -> tuple[int, str, bytes]:
    """(HTTP status, content type, body) of an error, as TF Serving answers it."""
    status = _HTTP_STATUS.get(error.code, HTTPStatus.INTERNAL_SERVER_ERROR)
    return int(status), "application/json", json.dumps({"error": error.message}).encode("utf-8")


def request_body_length(headers, max_bytes: int) -> int:
    """The body length a request declares, checked before any of the body is read.

    Raises ServingError: RESOURCE_EXHAUSTED (HTTP 429, TF Serving's mapping) over `max_bytes`
    (0: no limit), INVALID_ARGUMENT for a malformed Content-Length, UNIMPLEMENTED for a
    chunked body (its size is unknown until read; clients send Content-Length).
    """
    if headers.get("Transfer-Encoding"):
        raise ServingError(
            grpc.StatusCode.UNIMPLEMENTED,
            "Transfer-Encoding is not supported: send the body with a Content-Length",
        )
    value = (headers.get("Content-Length") or "0").strip()
    # ASCII digits only: str.isdigit() also accepts "²", which int() refuses.
    if not re.fullmatch(r"[0-9]+", value) or len(headers.get_all("Content-Length") or []) > 1:
        raise _invalid(f"Invalid Content-Length: {value[:40]!r}")
    length = int(value)
    if max_bytes and length > max_bytes:
        raise ServingError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"Request body of {length} bytes exceeds the server's limit of {max_bytes} bytes "
            "(--rest_api_max_request_bytes)",
        )
    return length


class RestApi:
    """Turns REST requests into InferenceService calls and responses into JSON."""

    def __init__(self, service: InferenceService, timeout_ms: int, metrics_path: str | None):
        self.service = service
        self.timeout_ms = timeout_ms
        self.metrics_path = metrics_path

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, str, bytes]:
        """Returns (HTTP status, content type, body)."""
        if method == "GET" and self.metrics_path and path == self.metrics_path:
            return 200, "text/plain; version=0.0.4", self.service.metrics.exposition()
        try:
            result = self._dispatch(method, path, body)
        except ServingError as e:
            return error_response(e)
        except Exception as e:  # a bug must still answer, as TF Serving's INTERNAL would
            logging.exception("REST %s %s failed", method, path[:200])
            return error_response(
                ServingError(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")
            )
        return int(HTTPStatus.OK), "application/json", json.dumps(result).encode("utf-8")

    def _dispatch(self, method: str, path: str, body: bytes):
        match = _PATH.fullmatch(path)
        if match is None:
            raise ServingError(
                grpc.StatusCode.NOT_FOUND, f"Malformed request: {method} {path[:200]}"
            )
        name, label = match["name"], match["label"]
        for value in (name, label):
            if value is not None and (not _SAFE_NAME.fullmatch(value) or ".." in value):
                raise _invalid(f"Invalid model name or label in path: {value[:100]!r}")
        spec = {"name": name}
        if match["version"]:
            version = int(match["version"])
            if version > INT64.max:  # ModelSpec.version is an Int64Value
                raise _invalid(f"Failed to convert version: {match['version'][:100]} to numeric.")
            spec["version"] = version  # Int64Value's JSON form is the number
        if label:
            spec["version_label"] = label
        if method == "GET" and not match["method"]:
            if match["metadata"]:
                return self._metadata(spec)
            return self._status(spec)
        if method == "POST" and match["method"]:
            try:
                request = json.loads(body or b"null")
            except ValueError as e:
                raise _invalid(f"JSON Parse error: {e}") from None
            if not isinstance(request, dict):
                raise _invalid("JSON Value: request body must be a JSON object")
            signature_name = request.get("signature_name", "")
            if not isinstance(signature_name, str):
                raise _invalid("'signature_name' must be a string")
            spec["signature_name"] = signature_name
            deadline = time.monotonic() + self.timeout_ms / 1000
            return getattr(self, "_" + match["method"])(spec, request, deadline)
        raise ServingError(grpc.StatusCode.NOT_FOUND, f"Malformed request: {method} {path[:200]}")

    def _status(self, spec):
        request = get_model_status_pb2.GetModelStatusRequest()
        json_format.ParseDict({"model_spec": spec}, request)
        response = self.service.get_model_status(request)
        return json_format.MessageToDict(
            response, preserving_proto_field_name=True, including_default_value_fields=True
        )

    def _metadata(self, spec):
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        json_format.ParseDict({"model_spec": spec}, request)
        response = self.service.get_model_metadata(request, entrypoint="REST")
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signature_map)
        return {
            "model_spec": json_format.MessageToDict(
                response.model_spec,
                preserving_proto_field_name=True,
                including_default_value_fields=True,
            ),
            "metadata": {
                "signature_def": json_format.MessageToDict(
                    signature_map, preserving_proto_field_name=True
                )
            },
        }

    def _predict(self, spec, request, deadline):
        model_spec = get_model_status_pb2.GetModelStatusRequest().model_spec
        json_format.ParseDict(spec, model_spec)

        def call():
            servable = self.service.resolve(model_spec)
            signature = servable.signature(model_spec.signature_name)
            inputs, row_format = self._parse_inputs(request, signature.input_specs)
            outputs = self.service.predict_arrays(
                servable, signature.name, inputs, deadline=deadline
            )
            return self._format_outputs(outputs, row_format)

        return self.service.observe(model_spec.name, "predict", "REST", call)

    @staticmethod
    def _parse_inputs(request, specs) -> tuple[dict, bool]:
        if ("instances" in request) == ("inputs" in request):
            raise _invalid("JSON Value: request must have exactly one of 'instances' or 'inputs'")
        single = next(iter(specs)) if len(specs) == 1 else None
        if "inputs" in request:
            value = request["inputs"]
            named = isinstance(value, dict) and not _is_b64(value)
            if not named and single is None:
                raise _invalid(f"'inputs' must be an object with keys {sorted(specs)}")
            columns = value if named else {single: value}
            row_format = False
        else:
            instances = request["instances"]
            if not isinstance(instances, list) or not instances:
                raise _invalid("'instances' must be a non-empty list")
            named = isinstance(instances[0], dict) and not _is_b64(instances[0])
            if not named and single is None:
                raise _invalid(f"Each instance must be an object with keys {sorted(specs)}")
            if named and any(
                not isinstance(i, dict) or i.keys() != instances[0].keys() for i in instances
            ):
                raise _invalid("All instances must be objects with the same keys")
            columns = (
                {k: [i[k] for i in instances] for k in instances[0]}
                if named
                else {single: instances}
            )
            row_format = True
        unknown = sorted(set(columns) - set(specs))
        if unknown:
            raise _invalid(
                f"input tensor alias not found in signature: {unknown[0]}. "
                f"Inputs expected to be in the set {{{','.join(sorted(specs))}}}."
            )
        return {k: json_to_array(k, v, specs[k].dtype) for k, v in columns.items()}, row_format

    @staticmethod
    def _format_outputs(outputs: dict, row_format: bool):
        if not row_format:
            converted = {k: array_to_json(k, v) for k, v in outputs.items()}
            if len(converted) == 1:
                return {"outputs": next(iter(converted.values()))}
            return {"outputs": converted}
        sizes = {v.shape[0] if v.ndim else None for v in outputs.values()}
        if len(sizes) != 1 or None in sizes:
            raise _invalid(
                "Output tensors have different (or no) batch dimensions; "
                "use the columnar 'inputs' format for this signature"
            )
        if len(outputs) == 1:
            ((name, value),) = outputs.items()
            return {"predictions": array_to_json(name, value)}
        columns = {k: array_to_json(k, v) for k, v in outputs.items()}
        return {"predictions": [{k: c[i] for k, c in columns.items()} for i in range(sizes.pop())]}

    def _input(self, request):
        examples = request.get("examples")
        if not isinstance(examples, list) or not examples:
            raise _invalid("'examples' must be a non-empty list of objects")
        input_pb = classification_pb2.ClassificationRequest().input
        if "context" in request:
            target = input_pb.example_list_with_context
            target.context.CopyFrom(json_to_example(request["context"]))
        else:
            target = input_pb.example_list
        target.examples.extend(json_to_example(e) for e in examples)
        return input_pb

    def _classify(self, spec, request, deadline):
        proto = classification_pb2.ClassificationRequest()
        json_format.ParseDict({"model_spec": spec}, proto)
        proto.input.CopyFrom(self._input(request))
        result = self.service.classify(proto, deadline, entrypoint="REST").result
        results = []
        for classification in result.classifications:
            # `score` is a proto float: written at float32 precision, as tensors are.
            scores = float32_json_values([c.score for c in classification.classes]).tolist()
            results.append(
                [[c.label, score] for c, score in zip(classification.classes, scores, strict=True)]
            )
        return {"results": results}

    def _regress(self, spec, request, deadline):
        proto = regression_pb2.RegressionRequest()
        json_format.ParseDict({"model_spec": spec}, proto)
        proto.input.CopyFrom(self._input(request))
        result = self.service.regress(proto, deadline, entrypoint="REST").result
        # `value` is a proto float: float32 precision, as tensors.
        return {"results": float32_json_values([r.value for r in result.regressions]).tolist()}


class RestServer:
    """Serves a RestApi on `host:port`: a thread per connection, so a slow client blocks only
    its own thread, and a socket timeout that drops a client idle (or stalled mid-request) for
    `idle_timeout` seconds.

    Args:
        max_request_bytes: larger bodies are refused unread (429, RESOURCE_EXHAUSTED); 0: no limit.
    """

    def __init__(
        self,
        api: RestApi,
        host: str,
        port: int,
        max_request_bytes: int = 0,
        idle_timeout: float = 5,
    ):
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Each read or write waits at most this long; idle keep-alive connections must not
            # block draining either. A timeout closes the connection (handle_one_request).
            timeout = idle_timeout

            def _respond(self, method: str):
                refused = False
                try:
                    length = request_body_length(self.headers, max_request_bytes)
                except ServingError as e:
                    refused = self.close_connection = True  # an unread body is no request
                    status, content_type, payload = error_response(e)
                else:
                    body = self.rfile.read(length) if length else b""
                    status, content_type, payload = api.handle(method, self.path, body)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                if self.close_connection:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(payload)
                if refused:
                    self._discard_input()

            def _discard_input(self):
                """Reads and drops what the client still sends, for a bounded time, so that a
                client writing its whole body before reading gets the answer, not a reset."""
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_WR)
                end = time.monotonic() + _DISCARD_SECONDS
                while (left := end - time.monotonic()) > 0:
                    self.connection.settimeout(left)
                    try:
                        if not self.connection.recv(1 << 16):
                            return
                    except OSError:
                        return

            def do_GET(self):
                self._respond("GET")

            def do_POST(self):
                self._respond("POST")

            def log_message(self, format, *args):
                logging.vlog(1, "REST %s", format % args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = False  # server_close() then waits for in-flight requests
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stops accepting, then waits for the requests being handled."""
        self._server.shutdown()
        self._server.server_close()
