"""The serving client: its command line (text inputs, classify/regress, --text_file, REST
host:port), its TensorFlow-free protos, and the REST API's float32 JSON, against one server."""

import importlib.util
import json
import re
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
import tensorflow as tf

from serving import client, rest
from serving.client import cli as client_cli
from serving.client import protos
from serving.process import REPO
from serving.signatures import set_method_names

LONG = "a masterful, moving film"


class PairModel(tf.Module):
    """A classifier's signatures (as serving/export_lib.py's) over text lengths, a SQuAD-like
    `squad` signature and an `encode` signature with float32 and float64 outputs."""

    @staticmethod
    def _pos(text_a, text_b):
        a = tf.cast(tf.strings.length(text_a), tf.float32)
        b = tf.cast(tf.strings.length(text_b), tf.float32)
        return a, b, a / (a + b)

    @tf.function(
        input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)]
    )
    def serve(self, text_a, text_b):
        _, _, pos = self._pos(text_a, text_b)
        return {
            "probabilities": tf.stack([1 - pos, pos], axis=1),
            "text_a": text_a,
            "text_b_length": tf.strings.length(text_b),
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def single(self, text_a):
        """A single_segment=True classifier export's `serving_default`: `text_a` alone."""
        return {"probabilities": tf.ones([tf.shape(text_a)[0], 2]) / 2, "text_a": text_a}

    @tf.function(
        input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)]
    )
    def squad(self, question, context):
        return {"answer_text": context, "question_length": tf.strings.length(question)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def encode(self, text):
        batch = tf.shape(text)[0]
        pooled = tf.constant([[0.1, 0.2, 1 / 3, -2.5e-20]], tf.float32)
        return {
            "pooled": tf.tile(pooled, [batch, 1]),
            "double": tf.fill([batch], tf.cast(tf.constant(0.1, tf.float32), tf.float64)),
        }

    def _parse(self, inputs):
        spec = {
            "text_a": tf.io.FixedLenFeature([], tf.string),
            "text_b": tf.io.FixedLenFeature([], tf.string, default_value=""),
        }
        features = tf.io.parse_example(inputs, spec)
        return self._pos(features["text_a"], features["text_b"])

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def classify(self, inputs):
        _, _, pos = self._parse(inputs)
        classes = tf.tile(tf.constant([["neg", "pos"]]), [tf.shape(pos)[0], 1])
        return {"classes": classes, "scores": tf.stack([1 - pos, pos], axis=1)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def regress(self, inputs):
        a, b, _ = self._parse(inputs)
        return {"outputs": a + 0.5 * b}


# Imports the client, then TensorFlow (a process that had not imported it): both must work.
_TENSORFLOW_AFTER_CLIENT = """
import sys
import numpy as np
from serving import client
from serving.client import grpc_client, protos
assert "tensorflow" not in sys.modules, "the client imported tensorflow"
import tensorflow as tf
from tensorflow.core.example import example_pb2
assert tf.constant(2.0).numpy() == 2.0
assert tf.tsl is sys.modules["tensorflow.tsl"]  # bound as a plain import binds it
assert tf.train.Example is example_pb2.Example is protos.example_pb2.Example
assert type(tf.make_tensor_proto([1.0])) is protos.tensor_pb2.TensorProto
request = protos.predict_pb2.PredictRequest()
request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.ones([2], np.float32)))
request.inputs["y"].CopyFrom(client.make_tensor_proto(tf.constant(["a", "b"])))
assert tf.make_ndarray(request.inputs["y"]).tolist() == [b"a", b"b"]
example = grpc_client._example({"text_a": "héllo"}).SerializeToString()
spec = {"text_a": tf.io.FixedLenFeature([], tf.string)}
assert tf.io.parse_single_example(example, spec)["text_a"].numpy().decode() == "héllo"
print("ok")
"""


@pytest.fixture(scope="module")
def tensorflow_after_client():
    """The check above in a child process, started first: it overlaps the server's start."""
    process = subprocess.Popen(
        [sys.executable, "-c", _TENSORFLOW_AFTER_CLIENT],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    yield process
    if process.poll() is None:
        process.kill()
        process.communicate()


@pytest.fixture(scope="module")
def server(tmp_path_factory, server_process, tensorflow_after_client):
    root = tmp_path_factory.mktemp("client")
    path = root / "pair" / "1"
    model = PairModel()
    signatures = {
        "serving_default": model.serve,
        "single": model.single,
        "squad": model.squad,
        "encode": model.encode,
        "classify": model.classify,
        "regress": model.regress,
    }
    tf.saved_model.save(model, str(path), signatures=signatures)
    set_method_names(
        str(path),
        {
            "classify": tf.saved_model.CLASSIFY_METHOD_NAME,
            "regress": tf.saved_model.REGRESS_METHOD_NAME,
        },
    )
    server = server_process(
        ["--embedded", "--model_name=pair", f"--model_base_path={root / 'pair'}"],
        root / "server.log",
    )
    try:
        server.wait_available("pair")
        yield server
    finally:
        assert server.stop() == 0, server.log()


@pytest.fixture
def cli(server, run_main, capsys):
    """`cli(*flags)` runs the client's main in-process against `server` (gRPC unless --rest):
    (exit status, stdout lines, stderr)."""

    def run(*args: str, rest_api: bool = False):
        target = f"127.0.0.1:{server.rest_port}" if rest_api else server.target
        flags = [f"--server={target}", "--model_name=pair", *(["--rest"] if rest_api else [])]
        try:
            run_main(client_cli, *flags, *args)
            status = 0
        except SystemExit as e:
            status = e.code
        out, err = capsys.readouterr()
        return status, out.splitlines(), (status if isinstance(status, str) else err)

    return run


@pytest.mark.parametrize("rest_api", [False, True], ids=["grpc", "rest"])
def test_single_sentence_classifier_needs_no_text_b(cli, rest_api):
    for extra in ([], ["--text_b="]):
        status, lines, _ = cli(f"--text={LONG}", "--text=bad", *extra, rest_api=rest_api)
        assert status == 0, lines
        # Commas stay in the text: two rows, text_b "" for both.
        assert f"text_a [2] string: ['{LONG}', 'bad']" in lines
        # (REST's JSON numbers come back as int64/float64.)
        assert any(re.fullmatch(r"text_b_length \[2\] int\d+: \[0, 0\]", x) for x in lines)
    status, lines, _ = cli("--text=ab", "--text_b=cd", rest_api=rest_api)
    assert any(re.match(r"probabilities \[1, 2\] float\d+: \[\[0\.5, 0\.5\]\]", x) for x in lines)
    status, _, error = cli("--text=a", "--text=b", "--text_b=x", rest_api=rest_api)
    assert status and "one value per --text" in error
    # A classifier exported with single_segment=True takes `text_a` alone.
    for extra in ([], ["--text_b="]):
        args = ["--signature_name=single", f"--text={LONG}", *extra]
        status, lines, _ = cli(*args, rest_api=rest_api)
        assert f"text_a [1] string: ['{LONG}']" in lines, lines
    status, _, error = cli("--signature_name=single", "--text=a", "--text_b=b", rest_api=rest_api)
    assert status and "--text_b is not used: the signature's only input is 'text_a'" in error


def test_squad_context_is_required(cli):
    status, _, error = cli("--signature_name=squad", "--text=Who wrote it?")
    assert status and "one value per --text" in error and "SQuAD context" in error
    status, lines, _ = cli("--signature_name=squad", "--text=Who?", "--text_b=Jane, in 1813.")
    assert "answer_text [1] string: ['Jane, in 1813.']" in lines
    status, _, error = cli("--signature_name=encode", "--text=x", "--text_b=y")
    assert status and "--text_b is not used" in error
    status, _, error = cli("--signature_name=nope", "--text=x")
    assert status and "has no signature 'nope'" in error and "classify, encode, regress" in error


@pytest.mark.parametrize("rest_api", [False, True], ids=["grpc", "rest"])
def test_classify_and_regress_signatures(cli, rest_api):
    status, lines, _ = cli(
        "--signature_name=classify", "--text=great film", "--text=ab", rest_api=rest_api
    )
    assert status == 0, lines
    assert lines == ['"great film": pos 1.0000, neg 0.0000', '"ab": pos 1.0000, neg 0.0000']
    status, lines, _ = cli(
        "--signature_name=classify", "--text=abc", "--text_b=a", rest_api=rest_api
    )
    assert lines == ['"abc" | "a": pos 0.7500, neg 0.2500']
    status, lines, _ = cli(
        "--signature_name=regress", f"--text={LONG}", "--text_b=ab", rest_api=rest_api
    )
    assert lines == [f'"{LONG}" | "ab": {len(LONG) + 1}']


def test_text_file(cli, tmp_path):
    path = tmp_path / "texts.txt"
    path.write_bytes(f"\ufeff{LONG}\r\n\nshort\tpair, b\n".encode())
    status, lines, _ = cli(f"--text_file={path}")
    assert status == 0, lines
    assert f"text_a [2] string: ['{LONG}', 'short']" in lines
    assert "text_b_length [2] int32: [0, 7]" in lines
    status, lines, _ = cli(f"--text_file={path}", "--signature_name=classify")
    assert lines == [
        f'"{LONG}": pos 1.0000, neg 0.0000',
        '"short" | "pair, b": neg 0.5833, pos 0.4167',
    ]
    status, _, error = cli(f"--text_file={path}", "--signature_name=squad")
    assert status == f"error: {path}:1: no context (write `text<TAB>context`)"
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nlatin-1 caf\xe9\n")
    status, _, error = cli(f"--text_file={bad}")
    assert status.startswith(f"error: --text_file {bad}:2: not UTF-8")
    status, _, error = cli(f"--text_file={tmp_path / 'missing.txt'}")
    assert status == f"error: --text_file: cannot read {tmp_path / 'missing.txt'}: " + (
        "No such file or directory"
    )
    status, _, error = cli(f"--text_file={path}", "--text=x")
    assert status and "not both" in error


def test_rest_server_as_host_port(server):
    assert client.rest_url("localhost:8501") == "http://localhost:8501"
    assert client.rest_url("https://example.com/serving/") == "https://example.com/serving"
    host_port = f"127.0.0.1:{server.rest_port}"
    outputs = client.rest_predict(host_port, "pair", {"text_a": ["a"], "text_b": ["bc"]})
    np.testing.assert_allclose(outputs["probabilities"], [[2 / 3, 1 / 3]], rtol=1e-6)
    assert client.rest_classify(host_port, "pair", [{"text_a": "abc"}], "classify") == [
        [("neg", 0.0), ("pos", 1.0)]
    ]
    assert client.rest_regress(server.rest, "pair", [{"text_a": "ab"}], "regress") == [2.0]


def test_cli_does_not_import_tensorflow(server):
    command = [sys.executable, "-X", "importtime", "-m", "serving.client"]
    command += [f"--server={server.target}", "--model_name=pair", f"--text={LONG}"]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - start
    print(f"client CLI call: {seconds:.2f} s")
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"text_a [1] string: ['{LONG}']" in result.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()]
    assert "tensorflow.core.framework.tensor_pb2" in imported
    assert not [m for m in imported if m == "tensorflow" or m.startswith("tensorflow.python")]


def test_tensorflow_imported_after_the_client_works(tensorflow_after_client):
    out, err = tensorflow_after_client.communicate(timeout=300)
    assert tensorflow_after_client.returncode == 0 and out.strip() == "ok", err[-3000:]


def test_client_imported_after_tensorflow(server):
    """With TensorFlow already imported, the client's protos are TensorFlow's own."""
    from tensorflow.core.framework import tensor_pb2

    tensorflow = sys.modules["tensorflow"]
    spec = importlib.util.spec_from_file_location("protos_after_tf", protos.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert sys.modules["tensorflow"] is tensorflow and module.tensor_pb2 is tensor_pb2
    assert module.predict_pb2 is protos.predict_pb2 and protos.tensor_pb2 is tensor_pb2
    with client.ServingClient(server.target) as c:
        out = c.predict("pair", {"text_a": ["abc"], "text_b": [""]}, output_filter=["text_a"])
    assert out["text_a"].tolist() == [b"abc"]


@pytest.mark.parametrize(
    "value",
    [
        [1.0, 2.5],
        [[1, 2], [3, 4]],
        [2**40],
        3,
        2.5,
        True,
        [],
        [[]],
        ["héllo", "wörld"],
        [b"\xff", b"nul\x00"],
        np.array([["a", "bc"]]),
        np.array([b"x"], dtype=object),
        np.arange(6, dtype=np.float64).reshape(2, 3),
        np.arange(4, dtype=np.int64),
        np.array([1, -2], np.int8),
        np.array([1, 2], np.uint16),
        np.array([1.5, -2], np.float16),
        np.array([True, False]),
        np.array([1 + 2j], np.complex64),
        np.zeros([2, 0, 3], np.float32),
        np.float32(0.25),
    ],
)
def test_tensor_protos_match_tensorflow(value):
    ours, theirs = client.make_tensor_proto(value), tf.make_tensor_proto(value)
    assert ours.dtype == theirs.dtype and ours.tensor_shape == theirs.tensor_shape
    want = tf.make_ndarray(theirs)
    for got in (tf.make_ndarray(ours), client.make_ndarray(ours), client.make_ndarray(theirs)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_make_ndarray_of_value_fields():
    """TensorProtos with typed value fields (not tensor_content), as other servers send them."""
    proto = tf.make_tensor_proto(7, shape=[2, 2])  # one value: TF repeats it
    assert client.make_ndarray(proto).tolist() == [[7, 7], [7, 7]]
    half = np.array([1.5, -2.0], np.float16)
    proto = tf.make_tensor_proto(half)
    proto.ClearField("tensor_content")
    proto.ClearField("half_val")
    proto.half_val.extend(half.view(np.uint16).tolist())
    assert client.make_ndarray(proto).dtype == np.float16
    np.testing.assert_array_equal(client.make_ndarray(proto), half)
    proto = tf.make_tensor_proto(np.float32([0.5, 0.25]))
    proto.ClearField("tensor_content")
    proto.ClearField("float_val")
    proto.float_val.extend([0.5, 0.25])
    assert client.make_ndarray(proto).tolist() == [0.5, 0.25]
    proto = tf.make_tensor_proto(np.complex64([1 + 2j]))
    proto.ClearField("tensor_content")
    proto.ClearField("scomplex_val")
    proto.scomplex_val.extend([1.0, 2.0])
    assert client.make_ndarray(proto).tolist() == [1 + 2j]
    assert client.make_ndarray(tf.make_tensor_proto(["a"], shape=[3])).tolist() == [b"a"] * 3
    # Mixed str and bytes (TensorFlow refuses these): str as UTF-8, bytes as given.
    mixed = client.make_tensor_proto(["é", b"\xff"])
    assert client.make_ndarray(mixed).tolist() == ["é".encode(), b"\xff"]


def test_rest_writes_float32_at_float32_precision(server):
    body = json.dumps({"signature_name": "encode", "instances": ["x"]}).encode()
    request = urllib.request.Request(server.rest + "/v1/models/pair:predict", data=body)
    with urllib.request.urlopen(request) as response:
        text = response.read().decode()
    assert '"pooled": [0.1, 0.2, 0.33333334, -2.5e-20]' in text, text
    assert '"double": 0.10000000149011612' in text, text  # float64: unchanged
    body = json.dumps({"signature_name": "classify", "examples": [{"text_a": "a", "text_b": "bc"}]})
    request = urllib.request.Request(server.rest + "/v1/models/pair:classify", data=body.encode())
    with urllib.request.urlopen(request) as response:
        assert json.load(response) == {"results": [[["neg", 0.6666666], ["pos", 0.33333334]]]}


def test_float32_json_values_are_shortest_round_trips():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = [0.1, 1 / 3, 1e-45, 3.4028235e38, 16777217, 1e23, 9.9999998e-15, 0.0, -0.0]
    values = np.concatenate(
        [bits, rng.standard_normal(20000).astype(np.float32), np.float32(special)]
    )
    values = values[np.isfinite(values)]
    values = values[: values.size // 7 * 7].reshape(-1, 7)
    got = rest.float32_json_values(values)
    assert got.shape == values.shape and got.dtype == np.float64
    want = [repr(float(str(v))) for v in values.ravel()]  # numpy's str: shortest float32 repr
    assert [repr(v) for v in got.ravel().tolist()] == want
    assert json.dumps(rest.float32_json_values([np.nan, -np.inf]).tolist()) == "[NaN, -Infinity]"
    assert rest.array_to_json("x", np.zeros([0, 2], np.float32)) == []
