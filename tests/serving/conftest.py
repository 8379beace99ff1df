"""Fixtures for the serving contract tests: tiny SavedModels and a server subprocess."""

import contextlib
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from serving.client import ServingClient
from serving.process import ServerProcess
from serving.toy_models import save_affine_model, save_examples_model, save_strings_model


@pytest.fixture(scope="session")
def saved_models(tmp_path_factory) -> dict[str, Path]:
    """Template SavedModels (copy them into a base path as numeric version folders)."""
    root = tmp_path_factory.mktemp("saved_models")
    return {
        "strings": save_strings_model(root / "strings", warmup_requests=3),
        "affine1": save_affine_model(root / "affine1", 1.0),
        "affine2": save_affine_model(root / "affine2", 2.0),
        "affine3": save_affine_model(root / "affine3", 3.0),
        "examples": save_examples_model(root / "examples"),
    }


@pytest.fixture
def start_server(tmp_path):
    """Starts servers with the given flags (always --embedded); stops them after the test."""
    servers = []

    def start(*args: str, env: dict | None = None) -> ServerProcess:
        server = ServerProcess(["--embedded", *args], tmp_path / f"server{len(servers)}.log", env)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def copy_version(template: Path, base_path: Path, version: int) -> Path:
    """Copies a SavedModel in as `base_path/version`, atomically (rename), as deployments should."""
    staging = base_path.parent / f".staging-{base_path.name}-{version}"
    shutil.copytree(template, staging)
    target = base_path / str(version)
    os.rename(staging, target)
    return target


@pytest.fixture(scope="session")
def server_process():
    """The ServerProcess class (test modules cannot import conftest)."""
    return ServerProcess


@pytest.fixture(scope="session")
def install_version():
    """`install_version(template, base_path, version)`: see copy_version."""
    return copy_version


@pytest.fixture(scope="session")
def serve_models(saved_models) -> Callable:
    """`with serve_models(root, config, versions, *flags) as server:` installs `versions`
    ((model, saved_models template, version) triples) under `root`, writes `config` (a
    model_config_list with `{root}` in its paths) to root/models.config, starts an embedded
    server on it with `flags`, and waits until every model is available; the server must stop
    cleanly afterwards."""

    @contextlib.contextmanager
    def serve(
        root: Path, config: str, versions: Iterable[tuple[str, str, int]], *flags: str
    ) -> Iterator[ServerProcess]:
        models = {}  # insertion-ordered set
        for model, template, version in versions:
            (root / model).mkdir(exist_ok=True)
            copy_version(saved_models[template], root / model, version)
            models[model] = None
        (root / "models.config").write_text(config.format(root=root))
        server = ServerProcess(
            ["--embedded", f"--model_config_file={root / 'models.config'}", *flags],
            root / "server.log",
        )
        try:
            for model in models:
                server.wait_available(model)
            yield server
        finally:
            assert server.stop() == 0, server.log()

    return serve


@pytest.fixture(scope="module")
def client(server):
    """A gRPC client of the test module's `server` fixture."""
    with ServingClient(server.target) as client:
        yield client
