"""Starts `python -m serving.server` as a child process on free loopback ports.

Used by the demo, the benchmarks and the contract tests: they all talk to the server only through
its public gRPC/REST APIs, exactly as they would to a real `tensorflow_model_server`.

Example:

    from serving.process import ServerProcess

    server = ServerProcess(["--embedded", "--model_name=bert", "--model_base_path=/models/bert"],
                           log_path=Path("/tmp/server.log"))
    server.wait_available("bert")
    ...  # ServingClient(server.target), or HTTP at server.rest
    server.stop()  # SIGTERM: drains in-flight requests, exits 0
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

from bert_tf.net import free_port

REPO = Path(__file__).resolve().parents[1]
AVAILABLE = get_model_status_pb2.ModelVersionStatus.AVAILABLE


class ServerProcess:
    """`python -m serving.server <args>` on free loopback ports; `stop()` sends SIGTERM."""

    def __init__(self, args: list[str], log_path: Path, env: dict | None = None):
        self.port, self.rest_port = free_port(), free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.rest = f"http://127.0.0.1:{self.rest_port}"
        self.log_path = Path(log_path)
        command = [
            sys.executable,
            "-m",
            "serving.server",
            f"--port={self.port}",
            f"--rest_api_port={self.rest_port}",
            *args,
        ]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command, cwd=REPO, env=env or os.environ.copy(), stdout=log, stderr=log
            )
        self.channel = grpc.insecure_channel(self.target)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_available(self, model_name: str, timeout: float = 600) -> None:
        """Waits until a version of `model_name` is AVAILABLE (raises with the log if not).

        A server that fails exits and is reported at once; the long timeout is for a busy
        machine, where importing TensorFlow alone has taken over a minute.
        """
        stub = model_service_pb2_grpc.ModelServiceStub(self.channel)
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = model_name
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log()}")
            try:
                statuses = stub.GetModelStatus(request, timeout=5).model_version_status
                if any(s.state == AVAILABLE for s in statuses):
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{model_name} not available:\n{self.log()}")

    def stop(self) -> int:
        """SIGTERM, then waits for the drained exit; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        finally:
            self.channel.close()
