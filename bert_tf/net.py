"""Ports and the local processes bound to them: helpers shared by the launcher, the local TFJob
client, the model-server process helper and tests.

Example:

    from bert_tf.net import free_port
    address = f"127.0.0.1:{free_port()}"
"""

from __future__ import annotations

import socket
import subprocess
import time

# What a TensorFlow worker says when its port was taken between free_port() and its bind.
BIND_ERROR = "Could not start gRPC server"
# How often a cluster of local processes starts again on new ports after losing one.
MAX_RESTARTS = 3


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that is free right now (another process may take it before it is
    bound again: callers that can, retry)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def stop_processes(processes, grace_s: float) -> None:
    """SIGTERM to each of `processes` still running, SIGKILL to those still running `grace_s`
    seconds later; returns once all have exited."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        process.terminate()
    deadline = time.monotonic() + grace_s
    for process in running:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
