"""Security checks without a server process: request limits, path tricks, base paths, source scan."""

import ast
import email.message
import os
import subprocess
import sys
from pathlib import Path

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2
from tensorflow_serving.config import model_server_config_pb2

from serving.inference import InferenceService, tensor_proto_to_array
from serving.model_manager import ModelManager, check_inside_base_path
from serving.rest import RestApi, request_body_length
from serving.servable import ServingError
from serving.server import GRPC_MAX_MESSAGE_BYTES, delegated_argv, grpc_server_options

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

REPO = Path(__file__).resolve().parents[2]


def test_grpc_options_default_to_tf_serving_limits_and_take_channel_arguments():
    assert grpc_server_options("") == {
        "grpc.max_receive_message_length": GRPC_MAX_MESSAGE_BYTES,
        "grpc.max_send_message_length": GRPC_MAX_MESSAGE_BYTES,
        "grpc.so_reuseport": 0,
    }
    assert GRPC_MAX_MESSAGE_BYTES == 2**31 - 1  # TF Serving's SetMaxMessageSize(kint32max)
    options = grpc_server_options(
        "grpc.max_receive_message_length=65536, grpc.primary_user_agent=bert"
    )
    assert options["grpc.max_receive_message_length"] == 65536
    assert options["grpc.primary_user_agent"] == "bert"
    with pytest.raises(ValueError, match=r"--grpc_channel_arguments.*'oops'"):
        grpc_server_options("oops")


def test_our_limit_flags_are_not_passed_to_the_real_server():
    argv = [
        "--port=8500",
        "--max_request_batch_size=8",
        "--rest_api_max_request_bytes",
        "1024",
        "--grpc_channel_arguments=grpc.max_receive_message_length=65536",
        "--embedded",
        "--host=0.0.0.0",
    ]
    assert delegated_argv(argv) == [
        "--port=8500",
        "--grpc_channel_arguments=grpc.max_receive_message_length=65536",
    ]


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--grpc_channel_arguments=grpc.max_receive_message_length", "--grpc_channel_arguments"),
        ("--max_request_batch_size=-1", "max_request_batch_size"),
        ("--rest_api_max_request_bytes=lots", "rest_api_max_request_bytes"),
        ("--tensorflow_intra_op_parallelism=-1", "tensorflow_intra_op_parallelism"),
    ],
)
def test_bad_limit_flags_fail_with_a_clear_message(flag, message):
    result = subprocess.run(
        [sys.executable, "-m", "serving.server", "--embedded", "--model_base_path=/nope", flag],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr


def _headers(**values) -> email.message.Message:
    headers = email.message.Message()
    for key, value in values.items():
        headers[key.replace("_", "-")] = value
    return headers


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({"Content_Length": "65537"}, grpc.StatusCode.RESOURCE_EXHAUSTED),
        ({"Content_Length": "10000000000000000000000"}, grpc.StatusCode.RESOURCE_EXHAUSTED),
        ({"Content_Length": "-1"}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"Content_Length": "12abc"}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"Content_Length": "1\u00b2"}, grpc.StatusCode.INVALID_ARGUMENT),  # "1²": isdigit()
        ({"Transfer_Encoding": "chunked"}, grpc.StatusCode.UNIMPLEMENTED),
    ],
)
def test_request_body_length_refused_before_reading(headers, code):
    with pytest.raises(ServingError) as error:
        request_body_length(_headers(**headers), max_bytes=65536)
    assert error.value.code == code


def test_request_body_length_accepted():
    assert request_body_length(_headers(Content_Length="65536"), max_bytes=65536) == 65536
    assert request_body_length(_headers(), max_bytes=65536) == 0
    assert request_body_length(_headers(Content_Length="9" * 12), max_bytes=0) == int("9" * 12)


class RecordingService:
    """An InferenceService stand-in that records any call reaching it."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def record(*args, **kwargs):
            self.calls.append(name)
            raise ServingError(grpc.StatusCode.NOT_FOUND, "recorded")

        return record


@pytest.mark.parametrize(
    "path",
    [
        "/v1/models/..",
        "/v1/models/../metadata",
        "/v1/models/../../etc/passwd",
        "/v1/models/..%2F..%2Fetc/metadata",
        "/v1/models/%2e%2e:predict",
        "/v1/models/%2e%2e%2f%2e%2e%2fetc%2fpasswd:predict",
        "/v1/models/%2Ftmp:predict",
        "/v1/models//etc/passwd",
        "/v1/models/etc%00passwd",
        "/v1/models/a/labels/..:predict",
        "/v1/models/a/labels/%2e%2e/metadata",
        "/v1/models/.hidden/metadata",
        "/v1/models/a\\..\\..\\windows:predict",
        "/v1/models/a:predict?path=../../etc",
        "/../v1/models/a:predict",
    ],
)
def test_path_tricks_never_reach_the_models(path):
    service = RecordingService()
    api = RestApi(service, timeout_ms=1000, metrics_path=None)
    for method in ("GET", "POST"):
        status, _, body = api.handle(method, path, b'{"instances": [1]}')
        assert status in (400, 404), (method, path, body)
    assert service.calls == []  # no lookup, so no file system access either


def test_model_names_are_map_keys_not_paths():
    """A well-formed name reaches the service only as a ModelSpec name."""
    service = RecordingService()
    status, _, _ = RestApi(service, 1000, None).handle("GET", "/v1/models/etc/metadata", b"")
    assert status == 404 and service.calls == ["get_model_metadata"]


def test_declared_shape_larger_than_limit_refused_before_decoding():
    proto = tf.make_tensor_proto(1.0, shape=[8, 2**28])  # 8 GiB from a few bytes
    assert len(proto.SerializeToString()) < 100
    for dtype, value in ((tf.float32, 1.0), (tf.string, b"x")):
        proto = tf.make_tensor_proto(value, dtype=dtype, shape=[8, 2**28])
        with pytest.raises(ServingError) as error:
            tensor_proto_to_array("x", proto, max_bytes=1 << 20)
        assert error.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    small = tf.make_tensor_proto(2.0, shape=[4, 2])
    np.testing.assert_array_equal(tensor_proto_to_array("x", small, 1 << 20), np.full([4, 2], 2))
    with pytest.raises(ServingError) as error:
        tensor_proto_to_array("x", predict_pb2.PredictRequest().inputs["x"], 1 << 20)
    assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT  # DT_INVALID


def test_batch_size_cap():
    service = InferenceService(manager=None, max_request_batch_size=8)
    service.check_batch_size(8)
    with pytest.raises(ServingError, match="max_request_batch_size") as error:
        service.check_batch_size(9)
    assert error.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    InferenceService(manager=None).check_batch_size(10**9)  # 0: no limit


class FakeServable:
    def __init__(self, name, version, path):
        self.name, self.version, self.path = name, version, path


def _version(path: Path) -> Path:
    (path / "variables").mkdir(parents=True)
    (path / "saved_model.pb").write_bytes(b"")
    return path


def test_versions_leading_out_of_the_base_path_are_refused(tmp_path):
    base, outside = tmp_path / "models" / "m", tmp_path / "elsewhere"
    _version(base / "1")
    _version(outside / "model")
    os.symlink(outside / "model", base / "2")  # version folder linked out
    _version(base / "3")
    os.symlink(outside / "model" / "variables", base / "3" / "variables2")  # a link inside it
    _version(base / ".store" / "4")
    os.symlink(base / ".store" / "4", base / "4")  # stays inside: allowed
    loaded = []

    def loader(name, version, path):
        loaded.append(version)
        return FakeServable(name, version, path)

    manager = ModelManager(loader, poll_wait_seconds=0, on_unload=lambda servable: None)
    config = model_server_config_pb2.ModelConfig(
        name="m", base_path=str(base), model_platform="tensorflow"
    )
    config.model_version_policy.all.SetInParent()
    manager.set_config([config])
    assert sorted(loaded) == [1, 4]
    statuses = {v: (code, message) for v, _, code, message in manager.status("m")}
    for version in (2, 3):
        code, message = statuses[version]
        assert code == grpc.StatusCode.PERMISSION_DENIED
        assert "outside the model's base path" in message
    assert manager.get("m").version == 4
    with pytest.raises(ServingError):
        manager.get("m", version=2)
    check_inside_base_path("gs://bucket/m", "gs://bucket/m/1")  # object stores have no links


# Calls that run or deserialize code from data. Only these spots may use them (none today).
_UNSAFE_CALLS = {
    "eval",
    "exec",
    "compile",
    "__import__",
    "pickle.load",
    "pickle.loads",
    "pickle.Unpickler",
    "cPickle.load",
    "cPickle.loads",
    "dill.load",
    "dill.loads",
    "cloudpickle.load",
    "cloudpickle.loads",
    "marshal.load",
    "marshal.loads",
    "shelve.open",
    "yaml.load",
    "yaml.unsafe_load",
    "joblib.load",
    "torch.load",
    "pd.read_pickle",
    "pandas.read_pickle",
}
_ALLOWLIST: set[tuple[str, str]] = set()  # (path relative to the repo, call)


def _call_name(node: ast.Call) -> str:
    parts, func = [], node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def unsafe_uses(source: str, filename: str) -> list[str]:
    """`file:line: what` for each unsafe call, `allow_pickle=` argument or pickle-like import."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Call):
            name = _call_name(node)
            pickles = any(
                k.arg == "allow_pickle"
                and not (isinstance(k.value, ast.Constant) and not k.value.value)
                for k in node.keywords
            )
            if pickles or name in _UNSAFE_CALLS:
                what = f"{name}(allow_pickle=...)" if pickles else name
                if (filename, what) not in _ALLOWLIST:
                    found.append(f"{filename}:{node.lineno}: {what}")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if any(m.split(".")[0] in _UNSAFE_MODULES for m in modules):
                found.append(f"{filename}:{node.lineno}: imports {sorted(modules)}")
    return found


_UNSAFE_MODULES = ("pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve")


def test_no_pickle_or_eval_in_our_sources():
    """serving/, bert_tf/, tfx_pipeline/ and bench/ never unpickle or eval (untrusted) data."""
    found = []
    for folder in ("serving", "bert_tf", "tfx_pipeline", "bench"):
        for path in sorted((REPO / folder).rglob("*.py")):
            found += unsafe_uses(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    assert found == []


def test_source_scan_catches_what_it_looks_for():
    source = (
        "import pickle\n"
        "from dill import loads\n"
        "pickle.loads(b'')\n"
        "eval('1')\n"
        "np.load(f, allow_pickle=True)\n"
        "np.load(f, allow_pickle=False)\n"
        "model.evaluate(x)\n"
        "# eval( in a comment, 'exec(' in a string\n"
    )
    assert unsafe_uses(source, "x.py") == [
        "x.py:1: imports ['', 'pickle']",
        "x.py:2: imports ['dill', 'loads']",
        "x.py:3: pickle.loads",
        "x.py:4: eval",
        "x.py:5: np.load(allow_pickle=...)",
    ]
