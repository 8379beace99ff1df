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

from bert_tf.net import MAX_RESTARTS, free_port

REPO = Path(__file__).resolve().parents[1]
AVAILABLE = get_model_status_pb2.ModelVersionStatus.AVAILABLE
END = get_model_status_pb2.ModelVersionStatus.END
# The channel polls a server that binds its port only once its models have loaded: gRPC's
# default reconnect backoff (1 s growing 1.6x to 120 s) had it notice a ready server ~8 s late.
CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
)


class ServerProcess:
    """`python -m serving.server <args>` on free loopback ports; `stop()` sends SIGTERM."""

    def __init__(self, args: list[str], log_path: Path, env: dict | None = None):
        self.args, self.env = list(args), env or os.environ.copy()
        self.log_path = Path(log_path)
        self.restarts = 0  # starts again on new ports, after losing a port to another process
        self._start()

    def _start(self) -> None:
        # Free now, but another process may bind one before the server does: see wait_available.
        self.port, self.rest_port = free_port(), free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.rest = f"http://127.0.0.1:{self.rest_port}"
        command = [
            sys.executable,
            "-m",
            "serving.server",
            f"--port={self.port}",
            f"--rest_api_port={self.rest_port}",
            *self.args,
        ]
        with open(self.log_path, "ab" if self.restarts else "wb") as log:
            self.process = subprocess.Popen(command, cwd=REPO, env=self.env, stdout=log, stderr=log)
        self.channel = grpc.insecure_channel(self.target, options=CHANNEL_OPTIONS)

    def _lost_a_port(self) -> bool:
        """Did the server exit because another process bound one of its ports first?"""
        return any(
            line.startswith(f"error: --{flag}={port}: ")
            for line in self.log().splitlines()
            for flag, port in (("port", self.port), ("rest_api_port", self.rest_port))
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_available(
        self, model_name: str, timeout: float = 600, fail_on_load_error: bool = False
    ) -> None:
        """Waits until a version of `model_name` is AVAILABLE (raises with the log if not).

        `fail_on_load_error`: raise at once (RuntimeError naming the version and its error) when
        a version ended with an error, as a model that fails to load does; without it, waits on
        for another version until `timeout`.

        A server that fails exits and is reported at once; the long timeout is for a busy
        machine, where importing TensorFlow alone has taken over a minute. A server that lost
        a port to another process between `free_port` and its bind starts again on new ports
        (`target` and `rest` change; at most `MAX_RESTARTS` times).
        """
        stub = model_service_pb2_grpc.ModelServiceStub(self.channel)
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = model_name
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.process.poll() is not None:
                if self._lost_a_port() and self.restarts < MAX_RESTARTS:
                    self.restarts += 1
                    self.channel.close()
                    self._start()
                    stub = model_service_pb2_grpc.ModelServiceStub(self.channel)
                    continue
                raise RuntimeError(f"server exited early:\n{self.log()}")
            try:
                statuses = stub.GetModelStatus(request, timeout=5).model_version_status
                if any(s.state == AVAILABLE for s in statuses):
                    return
                failed = [s for s in statuses if s.state == END and s.status.error_code]
                if fail_on_load_error and failed:
                    raise RuntimeError(
                        f"{model_name} version {failed[0].version} failed to load: "
                        f"{failed[0].status.error_message}"
                    )
            except grpc.RpcError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{model_name} not available:\n{self.log()}")

    def stop(self) -> int:
        """SIGTERM, then waits for the drained exit (SIGKILL after a minute, so no server is
        left running); returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            try:
                return self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                return self.process.wait()
        finally:
            self.channel.close()
