"""TF Serving's HTTP/REST API (`/v1/models/...`) on the standard library's threading HTTP server.

- `GET  /v1/models/<name>[/versions/<v>|/labels/<l>]`           model status
- `GET  /v1/models/<name>[/versions/<v>|/labels/<l>]/metadata`  signatures
- `POST /v1/models/<name>[/versions/<v>|/labels/<l>]:predict`   `instances` (row) or `inputs`
  (columnar) in, `predictions` / `outputs` out; binary strings as `{"b64": ...}`
- `POST ...:classify` / `...:regress`                           `examples` (+ `context`) in
- `GET  <prometheus path>` when monitoring is enabled
Errors are `{"error": "..."}` with TF Serving's HTTP status for the gRPC code. Bodies over the
server's cap are refused from their Content-Length, unread (429, RESOURCE_EXHAUSTED). The JSON
bodies' conversion to and from tensors and protos is serving/rest_json.py's (its public names are
importable from here too).

Example:

>>> server = RestServer(RestApi(make_service(), 30000, None), "127.0.0.1", 8501)
>>> server.start()
"""

import json
import re
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from absl import logging
from google.protobuf import json_format
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    regression_pb2,
)

from serving.inference import InferenceService
from serving.rest_json import (
    INT64,
    array_to_json,
    float32_json_values,
    invalid_argument,
    json_to_array,
    json_to_example,
    json_to_input,
    json_to_inputs,
    outputs_to_json,
)
from serving.servable import ServingError

__all__ = [
    "INT64",
    "RestApi",
    "RestServer",
    "array_to_json",
    "error_response",
    "float32_json_values",
    "json_to_array",
    "json_to_example",
    "request_body_length",
]

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
        raise invalid_argument(f"Invalid Content-Length: {value[:40]!r}")
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
                raise invalid_argument(f"Invalid model name or label in path: {value[:100]!r}")
        spec = {"name": name}
        if match["version"]:
            version = int(match["version"])
            if version > INT64.max:  # ModelSpec.version is an Int64Value
                raise invalid_argument(
                    f"Failed to convert version: {match['version'][:100]} to numeric."
                )
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
                raise invalid_argument(f"JSON Parse error: {e}") from None
            if not isinstance(request, dict):
                raise invalid_argument("JSON Value: request body must be a JSON object")
            signature_name = request.get("signature_name", "")
            if not isinstance(signature_name, str):
                raise invalid_argument("'signature_name' must be a string")
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
            inputs, row_format = json_to_inputs(request, signature.input_specs)
            outputs = self.service.predict_arrays(
                servable, signature.name, inputs, deadline=deadline
            )
            return outputs_to_json(outputs, row_format)

        return self.service.observe(model_spec.name, "predict", "REST", call)

    def _classify(self, spec, request, deadline):
        proto = classification_pb2.ClassificationRequest()
        json_format.ParseDict({"model_spec": spec}, proto)
        proto.input.CopyFrom(json_to_input(request))
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
        proto.input.CopyFrom(json_to_input(request))
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
