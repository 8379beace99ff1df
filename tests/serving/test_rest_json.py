"""REST JSON -> tensors: values are checked against the signature input's dtype as TF Serving's
parser does (no silent wrap, truncation or bool-as-number), and path versions past int64 are a
400, not an internal error (a libFuzzer find: tests/fuzz_corpus/rest_request/)."""

import json

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.config import model_server_config_pb2

from serving import rest, toy_models
from serving.inference import make_service
from serving.servable import ServingError


@pytest.mark.parametrize(
    ("value", "dtype", "expected"),
    [
        ([[1, -2], [3, 2**31 - 1]], tf.int32, np.array([[1, -2], [3, 2**31 - 1]], np.int32)),
        ([2**63 - 1], tf.int64, np.array([2**63 - 1], np.int64)),
        ([1, 2.5], tf.float32, np.array([1.0, 2.5], np.float32)),
        ([True, False], tf.bool, np.array([True, False])),
        ([], tf.int32, np.zeros([0], np.int32)),
        (7, tf.int64, np.array(7, np.int64)),
    ],
)
def test_numbers_of_the_inputs_dtype(value, dtype, expected):
    array = rest.json_to_array("x", value, dtype)
    assert array.dtype == expected.dtype
    np.testing.assert_array_equal(array, expected)


@pytest.mark.parametrize(
    ("value", "dtype", "message"),
    [
        ([2**31], tf.int32, "2147483648 is out of range for int32"),
        ([[0, -(2**31) - 1]], tf.int32, "-2147483649 is out of range for int32"),
        ([2**64], tf.int64, "out of range for int64"),
        ([-1], tf.uint8, "-1 is out of range for uint8"),
        ([7.5], tf.int32, "JSON value 7.5 is not of expected type: int32"),
        ([1, True], tf.int64, "JSON value true is not of expected type: int64"),
        ([True], tf.float32, "JSON value true is not of expected type: float"),
        ([1], tf.bool, "JSON value 1 is not of expected type: bool"),
        (["1"], tf.int32, 'JSON value "1" is not of expected type: int32'),
        ([[1, 2], [3]], tf.int32, "JSON value [1, 2] is not of expected type: int32"),
        ([None], tf.float32, "JSON value null is not of expected type: float"),
    ],
)
def test_values_the_dtype_cannot_hold_are_invalid_argument(value, dtype, message):
    with pytest.raises(ServingError, match="Input 'x': .*" + message.replace("[", r"\[")) as e:
        rest.json_to_array("x", value, dtype)
    assert e.value.code.name == "INVALID_ARGUMENT"


def _rest(api, method, path, body=None):
    status, _, payload = api.handle(method, path, json.dumps(body).encode() if body else b"")
    return status, json.loads(payload)


@pytest.fixture(scope="module")
def api(tmp_path_factory):

    base = tmp_path_factory.mktemp("affine")
    toy_models.save_affine_model(base / "1", 1.0)
    service = make_service(poll_wait_seconds=0, max_request_batch_size=64)
    service.manager.set_config(
        [
            model_server_config_pb2.ModelConfig(
                name="affine", base_path=str(base), model_platform="tensorflow"
            )
        ]
    )
    return rest.RestApi(service, timeout_ms=60_000, metrics_path=None)


@pytest.mark.parametrize("suffix", ["", "/metadata", ":predict"])
def test_version_past_int64_is_a_bad_request(api, suffix):
    version = "9" * 55
    body = {"instances": [[1.0, 2.0]]} if suffix == ":predict" else None
    status, answer = _rest(
        api, "POST" if body else "GET", f"/v1/models/affine/versions/{version}{suffix}", body
    )
    assert status == 400
    assert answer["error"] == f"Failed to convert version: {version} to numeric."
    # The largest int64 is a version like any other: not loaded here, so 404.
    status, _ = _rest(
        api, "POST" if body else "GET", f"/v1/models/affine/versions/{2**63 - 1}{suffix}", body
    )
    assert status == 404


def test_only_ascii_digits_are_a_version(api):
    status, answer = _rest(
        api, "GET", "/v1/models/affine/versions/\u0661/metadata"
    )  # Arabic-Indic 1
    assert status == 404 and "Malformed request" in answer["error"]
    assert _rest(api, "GET", "/v1/models/affine/versions/1/metadata")[0] == 200


def test_example_integer_past_int64_is_a_bad_request():
    with pytest.raises(ServingError, match="out of range for int64"):
        rest.json_to_example({"n": [1, 2**63]})
    example = rest.json_to_example({"n": [-(2**63), 2**63 - 1]})
    assert list(example.features.feature["n"].int64_list.value) == [-(2**63), 2**63 - 1]
