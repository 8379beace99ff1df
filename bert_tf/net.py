"""Network helpers shared by the launcher, the model-server process helper and tests.

Example:

    from bert_tf.net import free_port
    address = f"127.0.0.1:{free_port()}"
"""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that is free right now (another process may take it before it is
    bound again: callers that can, retry)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
