"""Contract tests of the RPCs and REST endpoints against one server (several models)."""

import base64
import json
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    inference_pb2,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from serving.client import format_output, text_inputs
from serving.signatures import read_signature_defs

CONFIG = """
model_config_list {{
  config {{ name: "strings" base_path: "{root}/strings" model_platform: "tensorflow" }}
  config {{
    name: "affine" base_path: "{root}/affine" model_platform: "tensorflow"
    model_version_policy {{ all {{}} }}
    version_labels {{ key: "stable" value: 1 }}
    version_labels {{ key: "canary" value: 2 }}
  }}
  config {{ name: "examples" base_path: "{root}/examples" model_platform: "tensorflow" }}
}}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory, serve_models):
    root = tmp_path_factory.mktemp("api_models")
    (root / "monitoring.config").write_text(
        'prometheus_config { enable: true path: "/monitoring/prometheus/metrics" }'
    )
    versions = [
        ("strings", "strings", 1),
        ("affine", "affine1", 1),
        ("affine", "affine2", 2),
        ("examples", "examples", 1),
    ]
    monitoring = f"--monitoring_config_file={root / 'monitoring.config'}"
    threads = ("--tensorflow_intra_op_parallelism=1", "--tensorflow_inter_op_parallelism=2")
    with serve_models(root, CONFIG, versions, monitoring, *threads) as server:
        server.root = root
        yield server


@pytest.fixture(scope="module")
def stub(server):
    return prediction_service_pb2_grpc.PredictionServiceStub(server.channel)


def rest(server, path, body=None):
    """(HTTP status, JSON) of a GET (or POST when `body` is given)."""
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(server.rest + path, data=data)) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def grpc_code(call, *args, **kwargs) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as error:
        call(*args, **kwargs)
    return error.value.code()


X = np.array([[1.0, 2.0], [-3.0, 0.5]], np.float32)


def test_thread_pool_flags_are_applied(server):
    # TensorFlow's own flags, read when its runtime started: the server logs what it set.
    assert "TensorFlow threads: intra-op 1, inter-op 2" in server.log()


def test_status_grpc_and_rest(server, client):
    statuses = client.status("affine")
    assert [(s["version"], s["state"]) for s in statuses] == [(1, "AVAILABLE"), (2, "AVAILABLE")]
    assert statuses[0]["status"]["error_code"] == "OK"
    code, body = rest(server, "/v1/models/affine/versions/2")
    assert code == 200
    assert body["model_version_status"] == [
        {"version": "2", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    ]
    assert (
        rest(server, "/v1/models/affine/labels/stable")[1]["model_version_status"][0]["version"]
        == "1"
    )


def test_metadata_matches_saved_signatures(server, client, stub):
    expected = read_signature_defs(str(server.root / "affine" / "2"))
    assert set(expected) == {"serving_default", "scaled", "__saved_model_init_op"}
    assert client.metadata("affine") == expected
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = "affine"
    response = stub.GetModelMetadata(request)
    assert response.model_spec.version.value == 2
    assert response.metadata["signature_def"].type_url.endswith(
        "tensorflow.serving.SignatureDefMap"
    )
    code, body = rest(server, "/v1/models/examples/metadata")
    assert code == 200
    signatures = body["metadata"]["signature_def"]["signature_def"]
    assert signatures["classify"]["method_name"] == "tensorflow/serving/classify"
    assert signatures["regress"]["inputs"]["inputs"]["dtype"] == "DT_STRING"


def test_predict_equals_in_process_outputs(server, client):
    texts = np.array(["héllo wörld", "", "BERT"], dtype=object)
    got = client.predict("strings", {"text": texts})
    want = tf.saved_model.load(str(server.root / "strings" / "1")).signatures["serving_default"](
        text=tf.constant(texts)
    )
    np.testing.assert_array_equal(got["length"], want["length"].numpy())
    np.testing.assert_array_equal(got["upper"], want["upper"].numpy())
    assert got["upper"][0].decode() == "HéLLO WöRLD"  # tf.strings.upper is ASCII-only


@pytest.mark.parametrize(
    ("kwargs", "bias", "version"),
    [
        ({}, 2.0, 2),
        ({"version": 1}, 1.0, 1),
        ({"label": "stable"}, 1.0, 1),
        ({"label": "canary"}, 2.0, 2),
    ],
)
def test_predict_version_selection_and_spec_echo(stub, kwargs, bias, version):
    request = predict_pb2.PredictRequest(output_filter=["y"])
    request.model_spec.name = "affine"
    if "version" in kwargs:
        request.model_spec.version.value = kwargs["version"]
    if "label" in kwargs:  # version and version_label are a oneof
        request.model_spec.version_label = kwargs["label"]
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(X))
    response = stub.Predict(request)
    assert set(response.outputs) == {"y"}
    np.testing.assert_allclose(tf.make_ndarray(response.outputs["y"]), 2 * X + bias)
    assert (response.model_spec.name, response.model_spec.version.value) == ("affine", version)
    assert response.model_spec.signature_name == "serving_default"


@pytest.mark.parametrize(
    ("model", "inputs", "kwargs", "code"),
    [
        ("nope", {"x": X}, {}, grpc.StatusCode.NOT_FOUND),
        ("affine", {"x": X}, {"version": 7}, grpc.StatusCode.NOT_FOUND),
        ("affine", {"x": X}, {"label": "nope"}, grpc.StatusCode.INVALID_ARGUMENT),
        ("affine", {"x": X}, {"signature": "nope"}, grpc.StatusCode.FAILED_PRECONDITION),
        ("affine", {"x": X.astype(np.float64)}, {}, grpc.StatusCode.INVALID_ARGUMENT),
        ("affine", {"x": np.ones([2, 3], np.float32)}, {}, grpc.StatusCode.INVALID_ARGUMENT),
        ("affine", {"x": X, "extra": X}, {}, grpc.StatusCode.INVALID_ARGUMENT),
        ("affine", {"x": X}, {"signature": "scaled"}, grpc.StatusCode.INVALID_ARGUMENT),
        ("affine", {"x": X}, {"output_filter": ["nope"]}, grpc.StatusCode.INVALID_ARGUMENT),
        (
            # ~4 MB of text cannot cross loopback and run within 1 ms, so the deadline always
            # passes mid-request (a one-string request sometimes beat a 0.1 ms deadline).
            "strings",
            {"text": np.array(["a" * 4000] * 1000, dtype=object)},
            {"timeout": 1e-3},
            grpc.StatusCode.DEADLINE_EXCEEDED,
        ),
    ],
)
def test_predict_error_codes(client, model, inputs, kwargs, code):
    assert grpc_code(client.predict, model, inputs, **kwargs) == code


@pytest.mark.parametrize(
    ("path", "body", "code"),
    [
        ("/v1/models/nope:predict", {"instances": [[1.0, 2.0]]}, 404),
        ("/v1/models/affine/versions/7:predict", {"instances": [[1.0, 2.0]]}, 404),
        ("/v1/models/affine/labels/nope:predict", {"instances": [[1.0, 2.0]]}, 400),
        ("/v1/models/affine:predict", {"signature_name": "nope", "instances": [[1.0, 2.0]]}, 400),
        ("/v1/models/affine:predict", {"instances": [["a", "b"]]}, 400),
        ("/v1/models/affine:predict", {"instances": [[1.0, 2.0, 3.0]]}, 400),
        ("/v1/models/affine:predict", {"inputs": [[1.0, 2.0]], "instances": []}, 400),
        ("/v1/models/affine:predict", "not an object", 400),
        ("/v1/models/affine:explain", {"instances": [[1.0, 2.0]]}, 404),
        ("/v1/models/strings/versions/1:classify", {"examples": [{"x": 1.0}]}, 400),
    ],
)
def test_rest_error_codes(server, path, body, code):
    status, response = rest(server, path, body)
    assert status == code
    assert isinstance(response["error"], str) and response["error"]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/models/..",
        "/v1/models/..%2F..%2Fetc/metadata",
        "/v1/models/%2e%2e/metadata",
        "/v1/models/%2e%2e%2f%2e%2e%2fetc%2fpasswd:predict",
        "/v1/models/%2Ftmp:predict",
        "/v1/models/affine/labels/..:predict",
        "/v1/models/.hidden/metadata",
    ],
)
def test_path_trick_model_names_rejected(server, path):
    status, response = rest(server, path, {"instances": [[1.0, 2.0]]} if ":" in path else None)
    assert status == 400
    assert "Invalid model name" in response["error"]


def test_rest_row_and_columnar_match_grpc(server, client):
    scale = np.array([2.0, -1.0], np.float32)
    want = client.predict("affine", {"x": X, "scale": scale}, signature="scaled")["z"]
    rows = [{"x": x.tolist(), "scale": float(s)} for x, s in zip(X, scale, strict=True)]
    code, row = rest(
        server, "/v1/models/affine:predict", {"signature_name": "scaled", "instances": rows}
    )
    assert code == 200
    np.testing.assert_allclose(row["predictions"], want)  # one output: plain values per row
    body = {"signature_name": "scaled", "inputs": {"x": X.tolist(), "scale": scale.tolist()}}
    code, columnar = rest(server, "/v1/models/affine/versions/2:predict", body)
    assert code == 200
    np.testing.assert_allclose(columnar["outputs"], want)
    # Two outputs: a dict per row vs a dict of columns.
    _, row = rest(server, "/v1/models/affine/labels/stable:predict", {"instances": X.tolist()})
    _, columnar = rest(server, "/v1/models/affine/labels/stable:predict", {"inputs": X.tolist()})
    grpc_out = client.predict("affine", {"x": X}, label="stable")
    np.testing.assert_allclose([r["y"] for r in row["predictions"]], grpc_out["y"])
    assert [r["batch_size"] for r in row["predictions"]] == grpc_out["batch_size"].tolist()
    np.testing.assert_allclose(columnar["outputs"]["y"], grpc_out["y"])


def test_rest_strings_and_b64(server, client):
    raw = "ünïcode".encode()
    body = {"instances": [{"b64": base64.b64encode(raw).decode()}, "plain"]}
    code, response = rest(server, "/v1/models/strings:predict", body)
    assert code == 200
    want = client.predict("strings", {"text": np.array([raw, b"plain"], dtype=object)})
    assert [p["length"] for p in response["predictions"]] == want["length"].tolist()
    assert [p["upper"] for p in response["predictions"]] == [u.decode() for u in want["upper"]]


def test_classify_and_regress_grpc_and_rest(server, client):
    examples = [{"x": 1.5, "tag": "ab"}, {"x": -2.0}]
    classes = client.classify("examples", examples, signature="classify")
    assert [[label for label, _ in c] for c in classes] == [["neg", "pos"], ["neg", "pos"]]
    sigmoid = 1 / (1 + np.exp(-np.array([1.5, -2.0])))
    np.testing.assert_allclose([c[1][1] for c in classes], sigmoid, rtol=1e-6)
    np.testing.assert_allclose([c[0][1] for c in classes], 1 - sigmoid, rtol=1e-6)
    np.testing.assert_allclose(
        client.regress("examples", examples, signature="regress"), [6.5, -6.0]
    )
    assert client.classify("examples", examples) == classes  # serving_default is a classifier
    code, body = rest(
        server, "/v1/models/examples:classify", {"signature_name": "classify", "examples": examples}
    )
    assert code == 200
    np.testing.assert_allclose(
        [[s for _, s in c] for c in body["results"]], [[s for _, s in c] for c in classes]
    )
    body = {"signature_name": "regress", "context": {"tag": "abc"}, "examples": [{"x": 1.0}]}
    assert rest(server, "/v1/models/examples:regress", body) == (200, {"results": [6.0]})
    # A predict signature is not a regressor, and a classifier is not one either.
    assert grpc_code(client.regress, "strings", examples) == grpc.StatusCode.INVALID_ARGUMENT
    assert grpc_code(client.regress, "examples", examples, signature="classify") == (
        grpc.StatusCode.INVALID_ARGUMENT
    )


def test_multi_inference(stub, client):
    request = inference_pb2.MultiInferenceRequest()
    for signature, method in [
        ("classify", "tensorflow/serving/classify"),
        ("regress", "tensorflow/serving/regress"),
    ]:
        task = request.tasks.add(method_name=method)
        task.model_spec.name = "examples"
        task.model_spec.signature_name = signature
    example = request.input.example_list.examples.add()
    example.features.feature["x"].float_list.value.append(1.0)
    response = stub.MultiInference(request)
    classification, regression = response.results
    assert classification.model_spec.signature_name == "classify"
    assert [c.label for c in classification.classification_result.classifications[0].classes] == [
        "neg",
        "pos",
    ]
    assert regression.regression_result.regressions[0].value == pytest.approx(3.0)
    request.tasks[1].model_spec.name = "affine"
    assert grpc_code(stub.MultiInference, request) == grpc.StatusCode.INVALID_ARGUMENT


def test_warmup_replayed_and_metrics_exported(server, client):
    """Passes alone and in any order: it makes the requests whose counters it reads."""
    client.predict("strings", {"text": np.array(["x"], dtype=object)})
    missing = grpc_code(client.predict, "nope", {"x": X})
    assert missing == grpc.StatusCode.NOT_FOUND
    with urllib.request.urlopen(server.rest + "/monitoring/prometheus/metrics") as response:
        text = response.read().decode()
    assert ':tensorflow:serving:model_warmup_request_count{model_name="strings"} 3.0' in text
    assert 'API="predict",model_name="strings",status="OK"}' in text
    assert 'API="predict",model_name="nope",status="NOT_FOUND"}' in text
    assert ":tensorflow:serving:request_latency_bucket" in text
    # The model run alone, as TF Serving's runtime latency: what the request adds is ours.
    assert (
        ':tensorflow:serving:runtime_latency_count{API="predict",model_name="strings",'
        'runtime="TF1"}' in text
    )


def test_client_helpers():
    inputs = text_inputs(["text_b", "text_a"], ["a", "b"], ["c", "d"])
    assert inputs["text_a"].tolist() == ["a", "b"] and inputs["text_b"].tolist() == ["c", "d"]
    assert list(text_inputs(["text"], ["a"], [])) == ["text"]
    with pytest.raises(ValueError, match="one value per --text"):
        text_inputs(["question", "context"], ["q"], [])
    with pytest.raises(ValueError, match="not text inputs"):
        text_inputs(["x"], ["a"], [])
    assert format_output("upper", np.array([b"HI"], dtype=object)) == "upper [1] string: ['HI']"
    assert format_output("upper", np.array(["HI"])) == "upper [1] string: ['HI']"  # REST JSON
    assert "0.3333" in format_output("p", np.array([1 / 3], np.float32))
    assert "..." in format_output("big", np.zeros([100], np.float32))
