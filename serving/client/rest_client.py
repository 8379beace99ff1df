"""The REST client of TF Serving's HTTP API (`/v1/models/...`): predict, classify, regress and
metadata, on the standard library's urllib."""

import json
import urllib.error
import urllib.request

import numpy as np

from serving.client.protos import DEFAULT_SIGNATURE


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


def _rest_examples_call(
    method: str,
    base_url: str,
    model: str,
    examples: list[dict],
    signature: str,
    version: int | None,
    timeout: float,
) -> list:
    """The `results` of the Classify or Regress API (`method`) on `examples`."""
    body = {"signature_name": signature, "examples": _rest_examples(examples)}
    url = rest_url(base_url) + _model_path(model, version) + ":" + method
    return _rest_call(url, body, timeout)["results"]


def rest_classify(
    base_url: str,
    model: str,
    examples: list[dict],
    signature: str = DEFAULT_SIGNATURE,
    version: int | None = None,
    timeout: float = 30.0,
) -> list[list[tuple[str, float]]]:
    """Classify over REST (`:classify`); [(label, score)] per example, as `ServingClient`."""
    results = _rest_examples_call(
        "classify", base_url, model, examples, signature, version, timeout
    )
    return [[(label, score) for label, score in r] for r in results]


def rest_regress(
    base_url: str,
    model: str,
    examples: list[dict],
    signature: str = DEFAULT_SIGNATURE,
    version: int | None = None,
    timeout: float = 30.0,
) -> list[float]:
    """Regress over REST (`:regress`); one value per example."""
    return list(
        _rest_examples_call("regress", base_url, model, examples, signature, version, timeout)
    )


def rest_metadata(
    base_url: str, model: str, version: int | None = None, timeout: float = 30.0
) -> dict:
    """Signature key -> SignatureDef (as JSON) over REST (`/metadata`), as `ServingClient`."""
    url = rest_url(base_url) + _model_path(model, version) + "/metadata"
    return _rest_call(url, None, timeout)["metadata"]["signature_def"]["signature_def"]
