"""Keeps the configured models' versions loaded, following TF Serving's manager semantics.

Every poll lists each model's `base_path` for numeric version folders, picks the versions its
`model_version_policy` aspires to (latest N by default, all, or specific), loads the new ones
(then they serve at once: "latest" means the newest loaded version) and only then unloads the
versions no longer aspired, and only if an aspired version is available, so a version that fails
to load (reported in `status`, state END with its error) never takes the serving one's place.
Requests keep a reference to their Servable, so unloading never cuts off in-flight requests.
Only version folders inside the configured base path are loaded (`check_inside_base_path`).

Example:

>>> manager = ModelManager(load_servable, poll_wait_seconds=1)
>>> manager.set_config([ModelConfig(name="m", base_path="/models/m", model_platform="tensorflow")])
>>> manager.get("m").version
2
"""

import os
import re
import threading
from collections.abc import Callable

import grpc
import tensorflow as tf
from absl import logging
from tensorflow_serving.apis import get_model_status_pb2
from tensorflow_serving.config import model_server_config_pb2

from serving.servable import Servable, ServingError

ModelConfig = model_server_config_pb2.ModelConfig
State = get_model_status_pb2.ModelVersionStatus.State

_VERSION_DIR = re.compile(r"\d+")


def aspired_versions(policy, on_disk: list[int]) -> list[int]:
    """The versions (of those on disk) that a `ServableVersionPolicy` wants served."""
    kind = policy.WhichOneof("policy_choice")
    if kind == "all":
        return list(on_disk)
    if kind == "specific":
        return sorted(set(policy.specific.versions) & set(on_disk))
    num_versions = policy.latest.num_versions if kind == "latest" else 1
    return sorted(on_disk)[-max(num_versions, 1) :]


def check_inside_base_path(base_path: str, version_path: str) -> None:
    """Raises PERMISSION_DENIED if `version_path`, or a link inside it, leads out of `base_path`.

    A version folder (or its `variables/`, assets...) symlinked to elsewhere on the disk would
    let whoever can write the base path make the server load any SavedModel (SavedModels are
    code), so only folders inside the configured base path are loaded. Links that stay inside
    (e.g. Kubernetes' `..data` volume layout) are fine. Local paths only: object stores
    (`gs://`, `s3://`) have no links.
    """
    if "://" in base_path:
        return
    root = os.path.realpath(base_path)

    def check(path: str) -> None:
        real = os.path.realpath(path)
        if os.path.commonpath([root, real]) != root:
            raise ServingError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{path} resolves to {real}, outside the model's base path {root}: not loaded",
            )

    check(version_path)
    for folder, subfolders, files in os.walk(version_path):  # does not follow links
        for name in subfolders + files:
            if os.path.islink(os.path.join(folder, name)):
                check(os.path.join(folder, name))


def validate_config(configs: list[ModelConfig]) -> None:
    """Rejects configs the real tensorflow_model_server would also reject, naming the field."""
    names = [c.name for c in configs]
    for config in configs:
        if not config.name or not config.base_path:
            raise ValueError(f"model_config_list: every config needs name and base_path: {config}")
        if config.model_platform != "tensorflow":
            raise ValueError(
                f"model {config.name!r}: model_platform must be 'tensorflow', "
                f"got {config.model_platform!r}"
            )
        if names.count(config.name) > 1:
            raise ValueError(f"model_config_list: model name {config.name!r} appears twice")


class _Model:
    def __init__(self, config: ModelConfig):
        self.config = config
        self.available: dict[int, Servable] = {}
        # version -> (state, error code, error message), as GetModelStatus reports it.
        self.status: dict[int, tuple[int, grpc.StatusCode, str]] = {}


class ModelManager:
    """Loads, swaps and unloads model versions; thread-safe.

    Args:
        loader: `loader(name, version, path) -> Servable` (loads and warms up a version).
        poll_wait_seconds: how often `start()`'s thread re-lists the base paths.
        on_unload: called with each Servable after it stops serving.
    """

    def __init__(
        self,
        loader: Callable[[str, int, str], Servable],
        poll_wait_seconds: float = 1.0,
        on_unload: Callable[[Servable], None] | None = None,
    ):
        self._loader = loader
        self._poll_wait = poll_wait_seconds
        self._on_unload = on_unload or Servable.close
        self._models: dict[str, _Model] = {}
        self._lock = threading.Lock()  # guards _models and their maps
        self._poll_lock = threading.Lock()  # one poll/reload at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def set_config(self, configs: list[ModelConfig]) -> None:
        """Replaces the served models (like HandleReloadConfigRequest) and loads them now."""
        validate_config(configs)
        with self._poll_lock:
            with self._lock:
                old = self._models
                self._models = {}
                for config in configs:
                    model = old.get(config.name)
                    keep = model is not None and model.config.base_path == config.base_path
                    self._models[config.name] = model if keep else _Model(config)
                    self._models[config.name].config = config
                dropped = [
                    s
                    for n, m in old.items()
                    if self._models.get(n) is not m
                    for s in m.available.values()
                ]
            for servable in dropped:
                logging.info("Unloading %s version %d", servable.name, servable.version)
                self._on_unload(servable)
            self._poll_locked()
            for config in configs:
                self._check_labels(self._models[config.name])

    def _check_labels(self, model: _Model) -> None:
        for label, version in model.config.version_labels.items():
            if version not in model.available:
                raise ValueError(
                    f"Request to assign label {label!r} to version {version} of model "
                    f"{model.config.name!r}, which is not currently available for inference"
                )

    def poll(self) -> None:
        """Loads new aspired versions and unloads unaspired ones once; used by the poll thread."""
        with self._poll_lock:
            self._poll_locked()

    def _poll_locked(self) -> None:
        with self._lock:
            models = list(self._models.values())
        for model in models:
            self._poll_model(model)

    def _poll_model(self, model: _Model) -> None:
        name, base_path = model.config.name, model.config.base_path
        try:
            entries = tf.io.gfile.listdir(base_path)
        except tf.errors.NotFoundError:
            logging.log_every_n_seconds(
                logging.WARNING,
                "No versions of servable %s found under base path %s",
                60,
                name,
                base_path,
            )
            return
        # Only numeric folders directly under the configured base path are ever loaded.
        on_disk = [
            int(e.rstrip("/"))
            for e in entries
            if _VERSION_DIR.fullmatch(e.rstrip("/"))
            and tf.io.gfile.isdir(os.path.join(base_path, e))
        ]
        aspired = aspired_versions(model.config.model_version_policy, on_disk)
        for version in aspired:
            state = model.status.get(version)
            if version in model.available or (state and state[1] != grpc.StatusCode.OK):
                continue  # loaded, or failed before (TF Serving does not retry it either)
            self._load(model, version, os.path.join(base_path, str(version)))
        with self._lock:
            if not any(v in model.available for v in aspired):
                return  # keep serving what we have until an aspired version is available
            retired = [model.available.pop(v) for v in list(model.available) if v not in aspired]
            for servable in retired:
                model.status[servable.version] = (State.END, grpc.StatusCode.OK, "")
        for servable in retired:
            logging.info("Unloaded %s version %d", name, servable.version)
            self._on_unload(servable)

    def _load(self, model: _Model, version: int, path: str) -> None:
        name = model.config.name
        with self._lock:
            model.status[version] = (State.LOADING, grpc.StatusCode.OK, "")
        logging.info("Loading %s version %d from %s", name, version, path)
        try:
            check_inside_base_path(model.config.base_path, path)
            servable = self._loader(name, version, path)
        except Exception as e:  # any load failure is reported, never raised into serving
            code = e.code if isinstance(e, ServingError) else grpc.StatusCode.UNKNOWN
            if isinstance(e, tf.errors.OpError):
                code = ServingError.from_tf_error(e).code
            logging.error("Loading %s version %d failed: %s", name, version, e)
            with self._lock:
                model.status[version] = (State.END, code, f"{type(e).__name__}: {e}")
            return
        with self._lock:
            model.available[version] = servable
            model.status[version] = (State.AVAILABLE, grpc.StatusCode.OK, "")
        logging.info("Successfully loaded %s version %d", name, version)

    def get(self, name: str, version: int | None = None, label: str | None = None) -> Servable:
        """The servable for a ModelSpec: a version, a label, or the newest available."""
        with self._lock:
            model = self._models.get(name)
            if label:
                if model is None or label not in model.config.version_labels:
                    raise ServingError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"Unrecognized servable version label: {label}",
                    )
                version = model.config.version_labels[label]
            if version is not None:
                servable = model.available.get(version) if model else None
                if servable is None:
                    raise ServingError(
                        grpc.StatusCode.NOT_FOUND,
                        f"Servable not found for request: Specific({name}, {version})",
                    )
                return servable
            if model is None:
                raise ServingError(
                    grpc.StatusCode.NOT_FOUND, f"Servable not found for request: Latest({name})"
                )
            if not model.available:
                raise ServingError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"Servable not found for request: Latest({name}): no version is ready yet",
                )
            return model.available[max(model.available)]

    def status(
        self, name: str, version: int | None = None
    ) -> list[tuple[int, int, grpc.StatusCode, str]]:
        """[(version, state, error code, error message)] as GetModelStatus reports them."""
        with self._lock:
            model = self._models.get(name)
            statuses = dict(model.status) if model else {}
        if version is not None:
            if version not in statuses:
                raise ServingError(
                    grpc.StatusCode.NOT_FOUND, f"Could not find version {version} of model {name}"
                )
            statuses = {version: statuses[version]}
        if not statuses:
            raise ServingError(
                grpc.StatusCode.NOT_FOUND, f"Could not find any versions of model {name}"
            )
        return [(v, *statuses[v]) for v in sorted(statuses)]

    def start(self) -> None:
        """Polls every `poll_wait_seconds` in a background thread until `stop()`."""

        def loop():
            while not self._stop.wait(self._poll_wait):
                try:
                    self.poll()
                except Exception:  # a bad poll must not end polling
                    logging.exception("Polling the model base paths failed")

        if self._poll_wait > 0:
            self._thread = threading.Thread(target=loop, daemon=True, name="fs-poll")
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            servables = [s for m in self._models.values() for s in m.available.values()]
        for servable in servables:
            self._on_unload(servable)
