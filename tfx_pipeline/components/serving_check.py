"""`ServingCheck`: the serving check before push, writing TFX's `InfraBlessing`.

TFX's InfraValidator does this by starting TF Serving in Docker or on Kubernetes; this one starts
the model server as a child process on free loopback ports: `python -m serving.server`, which
execs the real `tensorflow_model_server` when that binary is on PATH (the image that serves it)
and is this repo's compatible server otherwise. It

1. checks the export's ops (`serving.op_check`): one that the stock `tensorflow_model_server`
   (TF Serving 2.16.1: core TF + tensorflow-text 2.12.1's `ops_lib`) does not register, and
   `allow_ops` does not name, is not blessed at once, naming the op: this repo's server runs
   such a model (it imports tensorflow_text) but the stock one would fail to load it;
2. copies the Trainer's export in as version 1 of `model_name` (TF Serving's layout) and starts
   the server on it, which replays the export's warmup requests as it loads
   (`assets.extra/tf_serving_warmup_requests`, written by `serving.export`);
3. meanwhile loads the export in this process (`tf.saved_model.load`) and runs each warmup
   request's signature on its inputs: the expected answers;
4. sends every warmup request (PredictRequests) to the server over gRPC (`ServingClient`) and
   over REST (`rest_predict`), and checks each answer against the expected one: the same output
   names and shapes, strings and integers equal, floats within `ATOL + RTOL * |expected|`
   (`np.allclose`; a separately built `tensorflow_model_server` may round differently);
5. stops the server (SIGTERM, then SIGKILL if it has not exited after a minute) in all cases.

Blessed: every op is in the stock list (or `allow_ops`), the model loaded and every answer
matched. Anything else (an op outside; the export does not load, in the server or in-process; the server exits or does not make the model available; a request
fails or times out; an answer differs; no warmup requests to send) is not blessed, as TFX's
InfraValidator marks it: `blessed` = 0 and an `INFRA_NOT_BLESSED` file, plus the custom property
`not_blessed_reason`. The component does not fail then, so the Pusher (which reads `blessed`)
pushes nothing and says why. The whole check is bounded by `timeout_seconds`: loading and the
requests share that deadline.

Output `blessing` (InfraBlessing) custom properties: `blessed` (1/0), `not_blessed_reason`,
`model_server` (`tensorflow_model_server` or `serving.server`), `requests_checked` (answers
compared: requests x 2 APIs). The server's log is copied beside them, `model_server.log`.

Example (in a pipeline):

    check = ServingCheck(model=trainer.outputs["model"], model_name="bert")
    # a model server built with more ops: ServingCheck(..., allow_ops=["OpA", "OpB"])
    pusher = Pusher(..., infra_blessing=check.outputs["blessing"])
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import grpc
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the exported tokenizer's ops)
from absl import logging
from tensorflow_serving.apis import prediction_log_pb2
from tfx import types
from tfx.dsl.components.base import base_component, base_executor, executor_spec
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter
from tfx.utils import io_utils

from serving import MODEL_SERVER_BINARY, op_check
from serving.client import ServingClient, make_ndarray, rest_predict
from serving.process import ServerProcess
from serving.signatures import WARMUP_FILE
from tfx_pipeline.components import model_artifact

# TFX InfraValidator's marks (tfx/components/infra_validator/executor.py), which TFX's Pusher
# reads (`model_utils.is_infra_validated`: the `blessed` property).
BLESSED_KEY = "blessed"
BLESSED_FILENAME = "INFRA_BLESSED"
NOT_BLESSED_FILENAME = "INFRA_NOT_BLESSED"
NOT_BLESSED_REASON = "not_blessed_reason"
MODEL_SERVER = "model_server"
REQUESTS_CHECKED = "requests_checked"
SERVER_LOG = "model_server.log"
# Tolerance of float answers vs the in-process SavedModel's (np.allclose): this repo's server
# runs the same TensorFlow on the same batches; TF Serving's own build may pick other kernels.
RTOL = 1e-4
ATOL = 1e-4
DEFAULT_TIMEOUT_SECONDS = 600  # a loaded 2-core machine has taken over a minute to import TF


class CheckFailed(Exception):
    """The model is not servable as exported (the message is the not-blessed reason)."""


class ServingCheckSpec(ComponentSpec):
    PARAMETERS: ClassVar[dict] = {
        "model_name": ExecutionParameter(type=str),
        "timeout_seconds": ExecutionParameter(type=int),
        # Comma-separated: ops the target server has beyond the stock list (serving.op_check).
        "allow_ops": ExecutionParameter(type=str, optional=True),
    }
    INPUTS: ClassVar[dict] = {"model": ChannelParameter(type=standard_artifacts.Model)}
    OUTPUTS: ClassVar[dict] = {"blessing": ChannelParameter(type=standard_artifacts.InfraBlessing)}


def warmup_requests(export_dir: str) -> list:
    """The PredictRequests of the export's warmup file (CheckFailed if it has none)."""
    path = os.path.join(export_dir, WARMUP_FILE)
    if not tf.io.gfile.exists(path):
        raise CheckFailed(f"no warmup requests to send: {path} does not exist")
    requests = []
    for record in tf.data.TFRecordDataset(path):
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        if log.WhichOneof("log_type") == "predict_log":  # the server replays the others itself
            requests.append(log.predict_log.request)
    if not requests:
        raise CheckFailed(f"no warmup PredictRequests to send in {path}")
    return requests


def _inputs(request) -> dict[str, np.ndarray]:
    return {name: make_ndarray(proto) for name, proto in request.inputs.items()}


def expected_outputs(export_dir: str, requests: list) -> list[dict[str, np.ndarray]]:
    """Each request's outputs from the export loaded in this process (output_filter applied)."""
    try:
        signatures = tf.saved_model.load(export_dir).signatures
    except Exception as e:
        raise CheckFailed(f"the export does not load in-process: {_first_line(e)}") from e
    answers = []
    for request in requests:
        name = request.model_spec.signature_name or "serving_default"
        if name not in signatures:
            raise CheckFailed(f"warmup request names signature {name!r}; the export has none")
        inputs = {k: tf.constant(v) for k, v in _inputs(request).items()}
        outputs = {k: v.numpy() for k, v in signatures[name](**inputs).items()}
        kept = set(request.output_filter) or set(outputs)
        answers.append({k: v for k, v in outputs.items() if k in kept})
    return answers


def _from_json(value, like: np.ndarray) -> np.ndarray:
    """A REST output (JSON lists) as an array comparable with `like` (strings as bytes)."""
    if like.dtype != object:
        return np.asarray(value, dtype=like.dtype)

    def decode(v):
        if isinstance(v, list):
            return [decode(x) for x in v]
        if isinstance(v, dict):  # {"b64": ...}: TF Serving's binary strings
            return base64.b64decode(v["b64"])
        return v.encode("utf-8")

    return np.array(decode(value), dtype=object)


def mismatch(expected: dict[str, np.ndarray], served: dict[str, np.ndarray]) -> str | None:
    """How `served` differs from `expected` (None: the same within RTOL/ATOL)."""
    if set(served) != set(expected):
        return f"outputs {sorted(served)}, expected {sorted(expected)}"
    for name, want in expected.items():
        got = np.asarray(served[name])
        if got.shape != want.shape:
            return f"output {name!r} has shape {got.shape}, expected {want.shape}"
        if want.dtype.kind == "f":
            if not np.allclose(got, want, rtol=RTOL, atol=ATOL):
                diff = float(np.max(np.abs(got.astype(np.float64) - want)))
                return f"output {name!r} differs by up to {diff:.3g} (rtol {RTOL}, atol {ATOL})"
        elif not np.array_equal(got, want):
            return f"output {name!r} differs: {got.reshape(-1)[:3]} vs {want.reshape(-1)[:3]}"
    return None


def _first_line(error: BaseException, limit: int = 300) -> str:
    text = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {text[:limit]}"


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise CheckFailed("timed out: the check ran past timeout_seconds")
    return left


def _ask(
    api: str, server: ServerProcess, client: ServingClient, model_name: str, request, deadline
):
    """The server's outputs for `request` over `api` ("gRPC" or "REST": JSON values as sent);
    a failed call as CheckFailed."""
    signature = request.model_spec.signature_name or "serving_default"
    inputs = _inputs(request)
    try:
        if api == "gRPC":
            return client.predict(
                model_name,
                inputs,
                signature,
                output_filter=list(request.output_filter),
                timeout=_remaining(deadline),
            )
        return rest_predict(
            server.rest, model_name, inputs, signature, timeout=_remaining(deadline)
        )
    except grpc.RpcError as e:
        raise CheckFailed(f"{e.code().name}: {e.details()}") from e
    except (RuntimeError, OSError) as e:  # HTTP errors, refused connections, timeouts
        raise CheckFailed(_first_line(e)) from e


def _rest_arrays(served: dict, want: dict[str, np.ndarray]) -> dict:
    """REST's JSON outputs as arrays like `want`'s. REST has no output filter (outputs `want`
    lacks are left out), and a single output comes back unnamed ("output")."""
    if set(served) == {"output"} and len(want) == 1 and "output" not in want:
        served = {next(iter(want)): served["output"]}
    return {k: _from_json(v, want[k]) if k in want else v for k, v in served.items()}


def _query(server: ServerProcess, model_name: str, requests, expected, deadline) -> int:
    """Sends each request over gRPC and REST and compares; returns the answers compared."""
    checked = 0
    with ServingClient(server.target) as client:
        for i, (request, want) in enumerate(zip(requests, expected, strict=True)):
            where = (
                f"warmup request {i + 1} ({request.model_spec.signature_name or 'serving_default'})"
            )
            for api in ("gRPC", "REST"):
                try:
                    served = _ask(api, server, client, model_name, request, deadline)
                except CheckFailed as e:
                    raise CheckFailed(f"{where} over {api} failed: {e}") from e
                if api == "REST":
                    served = _rest_arrays(served, want)
                    if request.output_filter:
                        served = {k: v for k, v in served.items() if k in want}
                problem = mismatch(want, served)
                if problem:
                    raise CheckFailed(f"{where} over {api}: {problem}, vs the export in-process")
                checked += 1
    return checked


def model_server_program() -> str:
    """What `python -m serving.server` runs here: the real binary when it is on PATH."""
    return MODEL_SERVER_BINARY if shutil.which(MODEL_SERVER_BINARY) else "serving.server"


def check_serving(
    export_dir: str,
    work_dir: str,
    model_name: str,
    timeout_seconds: float,
    allow_ops: Sequence[str] = (),
) -> int:
    """Checks the ops of `export_dir`, serves it and checks its answers (see the module
    docstring); returns how many answers it compared. Raises CheckFailed (or the error met)
    when the model is not servable. `work_dir`: a local folder for the model copy and
    `SERVER_LOG`."""
    deadline = time.monotonic() + timeout_seconds
    try:
        op_check.check_ops(
            export_dir, allow_ops, allow_hint="list them in ServingCheck(allow_ops=...): {ops}"
        )
    except op_check.OpsOutsideError as e:
        raise CheckFailed(str(e)) from None
    except Exception as e:  # its saved_model.pb does not parse: what loading it reads first
        raise CheckFailed(f"the export does not load in-process: {_first_line(e)}") from e
    requests = warmup_requests(export_dir)
    base_path = os.path.join(work_dir, "models", model_name)
    io_utils.copy_dir(export_dir, os.path.join(base_path, "1"))  # local: the server reads it
    logging.info("ServingCheck: serving %s with %s", export_dir, model_server_program())
    server = ServerProcess(
        [f"--model_name={model_name}", f"--model_base_path={base_path}"],
        log_path=os.path.join(work_dir, SERVER_LOG),
    )
    try:
        expected = expected_outputs(export_dir, requests)  # while the server loads
        try:
            server.wait_available(model_name, _remaining(deadline), fail_on_load_error=True)
        except TimeoutError:
            raise CheckFailed(
                f"timed out: {model_name} not available after {timeout_seconds} s"
            ) from None
        except RuntimeError as e:
            raise CheckFailed(f"the model server did not load the model: {_first_line(e)}") from e
        return _query(server, model_name, requests, expected, deadline)
    finally:
        server.stop()


def _mark(blessing: types.Artifact, blessed: bool, reason: str = "") -> None:
    io_utils.write_string_file(
        os.path.join(blessing.uri, BLESSED_FILENAME if blessed else NOT_BLESSED_FILENAME), ""
    )
    blessing.set_int_custom_property(BLESSED_KEY, int(blessed))
    if reason:
        blessing.set_string_custom_property(NOT_BLESSED_REASON, reason)


class Executor(base_executor.BaseExecutor):
    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        model = artifact_utils.get_single_instance(input_dict["model"])
        blessing = artifact_utils.get_single_instance(output_dict["blessing"])
        export_dir = model_artifact.serving_dir(model)
        blessing.set_string_custom_property(MODEL_SERVER, model_server_program())
        with tempfile.TemporaryDirectory(prefix="serving-check-") as work_dir:
            try:
                checked = check_serving(
                    export_dir,
                    work_dir,
                    exec_properties["model_name"],
                    exec_properties["timeout_seconds"],
                    [op for op in (exec_properties.get("allow_ops") or "").split(",") if op],
                )
            except Exception as e:  # as TFX's InfraValidator: not blessed, the run goes on
                reason = str(e) if isinstance(e, CheckFailed) else _first_line(e)
                logging.error("ServingCheck: not blessed: %s", reason)
                _mark(blessing, False, reason)
            else:
                logging.info("ServingCheck: blessed: %d answers equal the export's", checked)
                blessing.set_int_custom_property(REQUESTS_CHECKED, checked)
                _mark(blessing, True)
            log = os.path.join(work_dir, SERVER_LOG)
            if os.path.exists(log):
                io_utils.copy_file(log, os.path.join(blessing.uri, SERVER_LOG), overwrite=True)


class ServingCheck(base_component.BaseComponent):
    """Serves the Trainer's export and checks its answers before the Pusher pushes it (see the
    module docstring).

    Args:
        model: the Trainer's model.
        model_name: the name it is served under (the Pusher's model name).
        timeout_seconds: the whole check's limit (loading and requests); past it, not blessed.
        allow_ops: ops the target model server registers beyond the stock TF Serving's
            (`serving/tf_serving_ops.txt`); any other op outside that list is not blessed.
    """

    SPEC_CLASS = ServingCheckSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(
        self,
        model: types.BaseChannel,
        model_name: str,
        timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
        allow_ops: Sequence[str] = (),
    ):
        # Only when given: an unchanged spec (and compiled pipeline) otherwise.
        extra = {"allow_ops": ",".join(allow_ops)} if allow_ops else {}
        spec = ServingCheckSpec(
            model=model,
            model_name=model_name,
            timeout_seconds=timeout_seconds,
            blessing=types.Channel(type=standard_artifacts.InfraBlessing),
            **extra,
        )
        super().__init__(spec=spec)
