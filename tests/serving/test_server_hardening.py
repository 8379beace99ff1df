"""The server under hostile or careless clients: oversize requests, slow clients, deadlines.

One server with small limits: gRPC messages up to 64 KiB (`--grpc_channel_arguments`, as TF
Serving), REST bodies up to 64 KiB and 8 rows per request (ours), 3 s REST timeout. Batching
waits up to 60 s for a batch of 8 rows, so 8-row requests run at once and a 1-row request
stays queued past any deadline.
"""

import ipaddress
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import psutil
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

LIMIT = 65536
ROWS = 8
CONFIG = """
model_config_list {{
  config {{ name: "strings" base_path: "{root}/strings" model_platform: "tensorflow" }}
  config {{ name: "affine" base_path: "{root}/affine" model_platform: "tensorflow" }}
  config {{ name: "examples" base_path: "{root}/examples" model_platform: "tensorflow" }}
}}
"""
BATCHING = f"""
max_batch_size {{ value: {ROWS} }}
batch_timeout_micros {{ value: 60000000 }}
num_batch_threads {{ value: 2 }}
max_enqueued_batches {{ value: 100 }}
"""
X = np.arange(2 * ROWS, dtype=np.float32).reshape(ROWS, 2)


@pytest.fixture(scope="module")
def server(tmp_path_factory, serve_models):
    root = tmp_path_factory.mktemp("hardening")
    (root / "batching.txt").write_text(BATCHING)
    versions = [("strings", "strings", 1), ("affine", "affine1", 1), ("examples", "examples", 1)]
    with serve_models(
        root,
        CONFIG,
        versions,
        f"--grpc_channel_arguments=grpc.max_receive_message_length={LIMIT}",
        f"--rest_api_max_request_bytes={LIMIT}",
        f"--max_request_batch_size={ROWS}",
        "--rest_api_timeout_in_ms=3000",
        "--enable_batching",
        f"--batching_parameters_file={root / 'batching.txt'}",
    ) as server:
        yield server


def grpc_code(call, *args, **kwargs) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as error:
        call(*args, **kwargs)
    return error.value.code()


def post(server, path: str, data: bytes, timeout: float = 60) -> tuple[int, dict]:
    request = urllib.request.Request(server.rest + path, data=data)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def raw_http(server, request: bytes, timeout: float = 60) -> bytes:
    """Sends raw bytes, returns everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=timeout) as s:
        s.sendall(request)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_binds_loopback_by_default(server):
    listening = [
        c.laddr
        for c in psutil.Process(server.process.pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]
    assert {a.port for a in listening} == {server.port, server.rest_port}
    for address in listening:  # gRPC listens on an IPv4-mapped IPv6 socket: ::ffff:127.0.0.1
        ip = ipaddress.ip_address(address.ip)
        assert (getattr(ip, "ipv4_mapped", None) or ip) == ipaddress.ip_address("127.0.0.1")


def test_grpc_message_over_receive_limit_is_resource_exhausted(server, client):
    fits = np.array([b"a" * (LIMIT // ROWS - 100)] * ROWS, dtype=object)
    assert client.predict("strings", {"text": fits})["length"].tolist() == [len(fits[0])] * ROWS
    too_big = np.array([b"a" * (LIMIT // ROWS + 100)] * ROWS, dtype=object)
    assert grpc_code(client.predict, "strings", {"text": too_big}) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED
    )


def test_tiny_request_declaring_a_huge_tensor_is_resource_exhausted(server):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "affine"
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(1.0, shape=[ROWS, 2**28]))  # 8 GiB
    stub = prediction_service_pb2_grpc.PredictionServiceStub(server.channel)
    assert grpc_code(stub.Predict, request, timeout=60) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert psutil.Process(server.process.pid).memory_info().rss < 4 << 30


def test_batch_size_cap_grpc_and_rest(server, client):
    np.testing.assert_allclose(client.predict("affine", {"x": X})["y"], 2 * X + 1)
    nine = np.concatenate([X, X[:1]])
    assert grpc_code(client.predict, "affine", {"x": nine}) == grpc.StatusCode.RESOURCE_EXHAUSTED
    examples = [{"x": float(i)} for i in range(ROWS + 1)]
    assert grpc_code(client.classify, "examples", examples, signature="classify") == (
        grpc.StatusCode.RESOURCE_EXHAUSTED
    )
    assert len(client.classify("examples", examples[:ROWS], signature="classify")) == ROWS
    status, body = post(
        server, "/v1/models/affine:predict", json.dumps({"instances": nine.tolist()}).encode()
    )
    assert status == 429  # TF Serving's HTTP status for RESOURCE_EXHAUSTED
    assert "--max_request_batch_size" in body["error"]


def test_rest_body_over_limit_is_refused_unread(server):
    # A 10 GB body is announced but never sent: the answer comes from the headers alone.
    answer = raw_http(
        server,
        b"POST /v1/models/affine:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n",
    )
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 429") and b"Connection: close" in head
    assert "--rest_api_max_request_bytes" in json.loads(body)["error"]
    # A body of the limit, padded with JSON whitespace, is served; one byte more is not.
    request = json.dumps({"instances": X.tolist()}).encode()
    fits = request + b" " * (LIMIT - len(request))
    status, body = post(server, "/v1/models/affine:predict", fits)
    assert status == 200 and len(body["predictions"]) == ROWS
    assert post(server, "/v1/models/affine:predict", fits + b" ")[0] == 429
    # A client that writes a large body before reading still gets the answer, not a reset.
    assert post(server, "/v1/models/affine:predict", fits + b" " * (8 << 20))[0] == 429


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        (b"Content-Length: -5\r\n", b"400"),
        (b"Content-Length: 12, 12\r\n", b"400"),
        (b"Transfer-Encoding: chunked\r\n", b"501"),
    ],
)
def test_malformed_body_framing_is_refused(server, headers, status):
    answer = raw_http(server, b"POST /v1/models/affine:predict HTTP/1.1\r\n" + headers + b"\r\n")
    assert answer.split(b" ", 2)[1] == status
    assert b"Connection: close" in answer


def test_rest_timeout_is_respected(server):
    """A request that cannot finish within --rest_api_timeout_in_ms gets 504, not a hang."""
    status, body = post(server, "/v1/models/affine:predict", b'{"instances": [[1.0, 2.0]]}')
    assert status == 504, body  # the 1-row batch waits 60 s; the deadline is 3 s
    assert "Deadline exceeded" in body["error"]


def test_slow_clients_do_not_block_others(server, client):
    """Clients that trickle a request byte by byte, or stall mid-body, hold only their own
    connection: other REST and gRPC requests are served meanwhile. A stalled client is then
    disconnected by the server's socket timeout."""
    request = b"POST /v1/models/affine:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 999\r\n\r\n"
    stop, trickling = threading.Event(), []

    def trickle():
        with socket.create_connection(("127.0.0.1", server.rest_port), timeout=60) as s:
            trickling.append(s)
            for byte in request:
                if stop.wait(0.5):  # well under the server's 5 s read timeout
                    return
                s.sendall(bytes([byte]))

    threads = [threading.Thread(target=trickle) for _ in range(16)]
    for thread in threads:
        thread.start()
    stalled = socket.create_connection(("127.0.0.1", server.rest_port), timeout=60)
    stalled.sendall(request + b'{"instances": ')  # then nothing more
    try:
        while len(trickling) < len(threads):
            time.sleep(0.05)
        # Every trickling connection is open and mid-request while these are served.
        body = json.dumps({"instances": X.tolist()}).encode()
        for _ in range(3):
            status, response = post(server, "/v1/models/affine:predict", body, timeout=30)
            assert status == 200 and len(response["predictions"]) == ROWS
            np.testing.assert_allclose(
                client.predict("affine", {"x": X}, timeout=30)["y"], 2 * X + 1
            )
        assert not stop.is_set() and all(t.is_alive() for t in threads)
        assert stalled.recv(1) == b""  # closed by the server, not answered
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        stalled.close()
