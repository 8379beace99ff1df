"""TF Serving's version policies on a running server: `specific` serves exactly the listed
versions, `latest { num_versions: N }` the newest N, following new versions on disk."""

import time

import grpc
import numpy as np
import pytest

from serving.client import ServingClient

CONFIG = """
model_config_list {{
  config {{
    name: "pinned" base_path: "{root}/pinned" model_platform: "tensorflow"
    model_version_policy {{ specific {{ versions: 1 versions: 3 }} }}
  }}
  config {{
    name: "newest2" base_path: "{root}/newest2" model_platform: "tensorflow"
    model_version_policy {{ latest {{ num_versions: 2 }} }}
  }}
}}
"""
X = np.array([[1.0, 2.0]], np.float32)


def _available(client: ServingClient, model: str) -> list[int]:
    return sorted(int(s["version"]) for s in client.status(model) if s["state"] == "AVAILABLE")


def _wait_until_serving(client: ServingClient, model: str, versions: list[int]) -> None:
    """Waits (with a deadline) until exactly `versions` of `model` are AVAILABLE."""
    deadline = time.monotonic() + 120
    while _available(client, model) != versions and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _available(client, model) == versions, model


def _bias(client: ServingClient, model: str, version: int | None = None) -> float:
    """The affine toy model's bias: its version number here (y = 2x + bias)."""
    return float(client.predict(model, {"x": X}, version=version)["y"][0, 0] - 2 * X[0, 0])


def test_specific_and_latest_n_serve_the_versions_they_name(
    tmp_path, serve_models, install_version, saved_models
):
    versions = [(model, f"affine{v}", v) for model in ("pinned", "newest2") for v in (1, 2, 3)]
    flags = "--file_system_poll_wait_seconds=1"
    with (
        serve_models(tmp_path, CONFIG, versions, flags) as server,
        ServingClient(server.target) as client,
    ):
        _wait_until_serving(client, "pinned", [1, 3])
        _wait_until_serving(client, "newest2", [2, 3])
        assert _bias(client, "pinned") == 3.0  # no version asked: the newest served
        assert _bias(client, "pinned", version=1) == 1.0
        with pytest.raises(grpc.RpcError) as error:
            client.predict("pinned", {"x": X}, version=2)  # on disk, not in the policy
        assert error.value.code() == grpc.StatusCode.NOT_FOUND

        # A new version on disk: latest-2 moves on to it and unloads 2; specific does not.
        install_version(saved_models["affine1"], tmp_path / "newest2", 4)
        install_version(saved_models["affine1"], tmp_path / "pinned", 4)
        _wait_until_serving(client, "newest2", [3, 4])
        assert _bias(client, "newest2") == 1.0  # version 4 is a copy of affine1
        assert _available(client, "pinned") == [1, 3]
