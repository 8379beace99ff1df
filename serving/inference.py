"""The request handling behind both APIs: PredictionService and ModelService semantics.

gRPC and REST translate their wire formats to these calls, so status codes, version selection and
signature rules are the same for both, and are TF Serving's:
- Predict runs any signature (default `serving_default`), honours `output_filter` and echoes
  the resolved `model_spec` (name, version, signature) in the response.
- Classify/Regress need a signature whose method name is `tensorflow/serving/classify` /
  `tensorflow/serving/regress`, with one string input named `inputs` fed serialized
  `tf.Example`s; outputs `classes`/`scores` (classify) or `outputs` (regress).

Example:

>>> service = InferenceService(manager)
>>> service.predict(predict_request, deadline=None).outputs["y"]
"""

import os
import time
from collections.abc import Callable

import grpc
import numpy as np
import tensorflow as tf
from absl import logging
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    predict_pb2,
    prediction_log_pb2,
    regression_pb2,
)

from bert_tf.tfrecords import check_tfrecord_file
from serving.batching import BatchScheduler
from serving.metrics import Metrics
from serving.model_manager import ModelManager
from serving.servable import Servable, ServingError, Signature, load_servable
from serving.signatures import WARMUP_FILE

_MAX_WARMUP_RECORDS = 1000  # TF Serving's limit

CLASSIFY = tf.saved_model.CLASSIFY_METHOD_NAME
REGRESS = tf.saved_model.REGRESS_METHOD_NAME


def check_deadline(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise ServingError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline exceeded")


def tensor_proto_to_array(name: str, proto, max_bytes: int = 0) -> np.ndarray:
    """A TensorProto as an array; RESOURCE_EXHAUSTED if it would decode to over `max_bytes`.

    A TensorProto may declare any shape and hold one value that fills it, so a tiny request
    could otherwise allocate gigabytes; the declared size is checked before decoding.
    """
    try:
        # Strings repeat the last value too: count a reference (8 bytes) per element.
        item_bytes = (
            8 if proto.dtype == tf.string.as_datatype_enum else tf.as_dtype(proto.dtype).size
        )
    except TypeError:  # not a dtype: make_ndarray reports it below
        item_bytes = 0
    if max_bytes and item_bytes:
        dims = [d.size for d in proto.tensor_shape.dim]
        if all(d >= 0 for d in dims) and item_bytes * int(np.prod(dims, dtype=object)) > max_bytes:
            raise ServingError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"input {name!r}: shape {dims} would decode to more than the server's limit of "
                f"{max_bytes} bytes (grpc.max_receive_message_length)",
            )
    try:
        return tf.make_ndarray(proto)
    except (TypeError, ValueError) as e:
        raise ServingError(grpc.StatusCode.INVALID_ARGUMENT, f"input {name!r}: {e}") from None


def examples_from_input(request_input) -> np.ndarray:
    """Serialized tf.Examples of an `Input` (context features merged into each example)."""
    kind = request_input.WhichOneof("kind")
    if kind == "example_list":
        examples = list(request_input.example_list.examples)
    elif kind == "example_list_with_context":
        with_context = request_input.example_list_with_context
        examples = []
        for example in with_context.examples:
            merged = tf.train.Example()
            merged.CopyFrom(with_context.context)
            merged.MergeFrom(example)
            examples.append(merged)
    else:
        raise ServingError(grpc.StatusCode.INVALID_ARGUMENT, "Input is empty")
    if not examples:
        raise ServingError(grpc.StatusCode.INVALID_ARGUMENT, "Input is empty")
    return np.array([e.SerializeToString() for e in examples], dtype=object)


def _check_method(signature: Signature, method_name: str) -> None:
    kind = "classification" if method_name == CLASSIFY else "regression"
    if signature.method_name != method_name:
        raise ServingError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"Expected {kind} signature method_name to be {method_name}. "
            f"Was: {signature.method_name}",
        )
    if list(signature.input_specs) != [tf.saved_model.CLASSIFY_INPUTS]:
        raise ServingError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"Expected one input named {tf.saved_model.CLASSIFY_INPUTS!r} in {kind} signature "
            f"{signature.name!r}, got {sorted(signature.input_specs)}",
        )


def _classification_result(signature: Signature, outputs, num_examples: int):
    classes = outputs.get(tf.saved_model.CLASSIFY_OUTPUT_CLASSES)
    scores = outputs.get(tf.saved_model.CLASSIFY_OUTPUT_SCORES)
    if classes is None and scores is None:
        raise ServingError(
            grpc.StatusCode.INVALID_ARGUMENT,
            "Expected classification signature outputs to contain at least one of "
            f"classes or scores. Signature was: {signature.name}",
        )
    result = classification_pb2.ClassificationResult()
    for i in range(num_examples):
        classification = result.classifications.add()
        row_classes = classes[i].reshape(-1) if classes is not None else None
        row_scores = scores[i].reshape(-1) if scores is not None else None
        for j in range(len(row_classes if row_classes is not None else row_scores)):
            item = classification.classes.add()
            if row_classes is not None:
                item.label = row_classes[j].decode("utf-8", "replace")
            if row_scores is not None:
                item.score = float(row_scores[j])
    return result


def _regression_result(signature: Signature, outputs, num_examples: int):
    values = outputs.get(tf.saved_model.REGRESS_OUTPUTS)
    if values is None:
        raise ServingError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"No regression outputs found in SignatureDef: {signature.name}",
        )
    values = values.reshape(num_examples, -1)
    if values.shape[1] != 1:
        raise ServingError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"Expected one regression output value per example, got shape {list(values.shape)}",
        )
    result = regression_pb2.RegressionResult()
    for value in values[:, 0]:
        result.regressions.add(value=float(value))
    return result


class InferenceService:
    """PredictionService + ModelService logic over a ModelManager.

    Args:
        manager: the model manager (see `make_manager`).
        metrics: where request counts and latencies go.
        max_request_batch_size: most rows (dimension 0) or examples per request; 0: no limit.
        max_tensor_bytes: most bytes a gRPC input tensor may decode to; 0: no limit.
    """

    def __init__(
        self,
        manager: ModelManager,
        metrics: Metrics | None = None,
        max_request_batch_size: int = 0,
        max_tensor_bytes: int = 0,
    ):
        self.manager = manager
        self.metrics = metrics or Metrics()
        self.max_request_batch_size = max_request_batch_size
        self.max_tensor_bytes = max_tensor_bytes

    def check_batch_size(self, size: int) -> None:
        """RESOURCE_EXHAUSTED when a request holds more rows than `--max_request_batch_size`."""
        if self.max_request_batch_size and size > self.max_request_batch_size:
            raise ServingError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"Request batch size {size} exceeds the server's limit of "
                f"{self.max_request_batch_size} (--max_request_batch_size)",
            )

    def decode_inputs(self, tensor_protos) -> dict[str, np.ndarray]:
        return {
            k: tensor_proto_to_array(k, v, self.max_tensor_bytes) for k, v in tensor_protos.items()
        }

    def observe(self, model_name: str, api: str, entrypoint: str, call: Callable):
        """Runs `call()`, counting it by status and timing it, as TF Serving's metrics do."""
        start = time.monotonic()
        status = "OK"
        try:
            with self.metrics.in_flight(model_name, api).track_inprogress():
                return call()
        except ServingError as e:
            status = e.code.name
            raise
        finally:
            self.metrics.count_request(model_name, api, status)
            self.metrics.observe_latency(
                model_name, api, entrypoint, (time.monotonic() - start) * 1e6
            )

    def resolve(self, model_spec) -> Servable:
        version = model_spec.version.value if model_spec.HasField("version") else None
        return self.manager.get(model_spec.name, version, model_spec.version_label or None)

    @staticmethod
    def _fill_spec(spec, servable: Servable, signature_name: str) -> None:
        spec.name = servable.name
        spec.version.value = servable.version
        spec.signature_name = signature_name

    def predict_arrays(
        self, servable: Servable, signature_name: str, inputs: dict, output_filter=(), deadline=None
    ) -> dict[str, np.ndarray]:
        """Runs a signature on numpy inputs; returns the (filtered) outputs."""
        signature = servable.signature(signature_name)
        unknown = sorted(set(output_filter) - set(signature.output_names))
        if unknown:
            raise ServingError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"output tensor alias not found in signature: {unknown[0]} Outputs expected to "
                f"be in the set {{{','.join(signature.output_names)}}}.",
            )
        for value in inputs.values():
            if np.ndim(value):
                self.check_batch_size(np.shape(value)[0])
        check_deadline(deadline)
        start = time.monotonic()
        outputs = signature(inputs, deadline)
        self.metrics.observe_runtime_latency(
            servable.name, "predict", (time.monotonic() - start) * 1e6
        )
        return {k: v for k, v in outputs.items() if not output_filter or k in output_filter}

    def predict(self, request, deadline=None, entrypoint="GRPC"):
        def call():
            servable = self.resolve(request.model_spec)
            signature = servable.signature(request.model_spec.signature_name)
            inputs = self.decode_inputs(request.inputs)
            outputs = self.predict_arrays(
                servable, signature.name, inputs, request.output_filter, deadline
            )
            response = predict_pb2.PredictResponse()
            self._fill_spec(response.model_spec, servable, signature.name)
            for name, value in outputs.items():
                response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
            return response

        return self.observe(request.model_spec.name, "predict", entrypoint, call)

    def _run_examples(self, servable, signature_name, method_name, request_input, deadline):
        signature = servable.signature(signature_name)
        _check_method(signature, method_name)
        examples = examples_from_input(request_input)
        self.check_batch_size(len(examples))
        check_deadline(deadline)
        start = time.monotonic()
        outputs = signature.run({tf.saved_model.CLASSIFY_INPUTS: examples})
        api = "classify" if method_name == CLASSIFY else "regress"
        self.metrics.observe_runtime_latency(servable.name, api, (time.monotonic() - start) * 1e6)
        if method_name == CLASSIFY:
            return signature, _classification_result(signature, outputs, len(examples))
        return signature, _regression_result(signature, outputs, len(examples))

    def classify(self, request, deadline=None, entrypoint="GRPC"):
        return self._examples_api(
            "classify", request, deadline, entrypoint, classification_pb2.ClassificationResponse
        )

    def regress(self, request, deadline=None, entrypoint="GRPC"):
        return self._examples_api(
            "regress", request, deadline, entrypoint, regression_pb2.RegressionResponse
        )

    def _examples_api(self, api, request, deadline, entrypoint, response_class):
        """The Classify or Regress API (`api`): the request's examples through its signature."""
        method = CLASSIFY if api == "classify" else REGRESS

        def call():
            servable = self.resolve(request.model_spec)
            signature, result = self._run_examples(
                servable, request.model_spec.signature_name, method, request.input, deadline
            )
            response = response_class(result=result)
            self._fill_spec(response.model_spec, servable, signature.name)
            return response

        return self.observe(request.model_spec.name, api, entrypoint, call)

    def multi_inference(self, request, deadline=None, entrypoint="GRPC"):
        tasks = list(request.tasks)
        model_name = tasks[0].model_spec.name if tasks else ""

        def call():
            if not tasks:
                raise ServingError(grpc.StatusCode.INVALID_ARGUMENT, "Found no inference tasks")
            specs = {(t.model_spec.name, t.model_spec.version.value) for t in tasks}
            if len(specs) > 1:
                raise ServingError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "All ModelSpecs in a MultiInferenceRequest must access the same model name",
                )
            names = [t.model_spec.signature_name or "serving_default" for t in tasks]
            if len(set(names)) != len(names):
                raise ServingError(
                    grpc.StatusCode.INVALID_ARGUMENT, f"Duplicate evaluation of signature: {names}"
                )
            servable = self.resolve(tasks[0].model_spec)
            response = inference_pb2.MultiInferenceResponse()
            for task, name in zip(tasks, names, strict=True):
                if task.method_name not in (CLASSIFY, REGRESS):
                    raise ServingError(
                        grpc.StatusCode.UNIMPLEMENTED,
                        f"Unsupported signature method_name: {task.method_name}",
                    )
                _, result = self._run_examples(
                    servable, name, task.method_name, request.input, deadline
                )
                item = response.results.add()
                self._fill_spec(item.model_spec, servable, name)
                field = (
                    "classification_result"
                    if task.method_name == CLASSIFY
                    else ("regression_result")
                )
                getattr(item, field).CopyFrom(result)
            return response

        return self.observe(model_name, "multi_inference", entrypoint, call)

    def get_model_metadata(self, request, entrypoint="GRPC"):
        def call():
            if list(request.metadata_field) != ["signature_def"]:
                raise ServingError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "Metadata field(s) other than signature_def are not supported; "
                    f"got {list(request.metadata_field)}",
                )
            servable = self.resolve(request.model_spec)
            response = get_model_metadata_pb2.GetModelMetadataResponse()
            response.model_spec.name = servable.name
            response.model_spec.version.value = servable.version
            signature_map = get_model_metadata_pb2.SignatureDefMap()
            for key, signature_def in servable.signature_defs.items():
                signature_map.signature_def[key].CopyFrom(signature_def)
            response.metadata["signature_def"].Pack(signature_map)
            return response

        return self.observe(request.model_spec.name, "get_model_metadata", entrypoint, call)

    def get_model_status(self, request):
        spec = request.model_spec
        version = spec.version.value if spec.HasField("version") else None
        if spec.version_label:
            version = self.manager.get(spec.name, label=spec.version_label).version
        response = get_model_status_pb2.GetModelStatusResponse()
        for v, state, code, message in self.manager.status(spec.name, version):
            status = response.model_version_status.add(version=v, state=state)
            status.status.error_code = code.value[0]
            status.status.error_message = message
        return response

    def reload_config(self, request):
        response = model_management_pb2.ReloadConfigResponse()
        try:
            self.manager.set_config(list(request.config.model_config_list.config))
        except ValueError as e:
            raise ServingError(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
        response.status.error_code = grpc.StatusCode.OK.value[0]
        return response

    def replay_warmup(self, servable: Servable) -> int:
        """Replays `assets.extra/tf_serving_warmup_requests` (PredictionLogs) on `servable`."""
        path = os.path.join(servable.path, WARMUP_FILE)
        if not tf.io.gfile.exists(path):
            return 0
        # TF Serving fails the load on a corrupt warmup record (DataLossError), but like
        # TFRecordDataset reads a file cut inside a record header as a shorter one: fail that
        # load too (ValueError naming the file) rather than warm up on part of the requests.
        check_tfrecord_file(path)
        count = 0
        for record in tf.data.TFRecordDataset(path).take(_MAX_WARMUP_RECORDS):
            log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
            kind = log.WhichOneof("log_type")
            if kind == "predict_log":
                request = log.predict_log.request
                self.predict_arrays(
                    servable,
                    servable.signature(request.model_spec.signature_name).name,
                    self.decode_inputs(request.inputs),
                    request.output_filter,
                )
            elif kind in ("classify_log", "regress_log"):
                request = getattr(log, kind).request
                method = CLASSIFY if kind == "classify_log" else REGRESS
                self._run_examples(
                    servable, request.model_spec.signature_name, method, request.input, None
                )
            else:
                raise ValueError(f"{path}: unsupported warmup log type {kind!r}")
            count += 1
            self.metrics.count_warmup(servable.name)
        logging.info(
            "Finished reading warmup data for model at %s. Number of warmup records read: %d.",
            path,
            count,
        )
        return count


def make_service(
    poll_wait_seconds: float = 1.0,
    batching_parameters=None,
    enable_model_warmup: bool = True,
    metrics: Metrics | None = None,
    max_request_batch_size: int = 0,
    max_tensor_bytes: int = 0,
) -> InferenceService:
    """A service whose manager loads versions with batching (if parameters given) and warmup.

    `max_request_batch_size` and `max_tensor_bytes`: see InferenceService.
    """
    metrics = metrics or Metrics()
    service: InferenceService

    def load(name: str, version: int, path: str) -> Servable:
        try:
            servable = load_servable(name, version, path)
            if enable_model_warmup:  # before batching: a failed warmup leaves no threads behind
                service.replay_warmup(servable)
            if batching_parameters is not None:
                servable.enable_batching(
                    lambda signature: BatchScheduler.from_proto(
                        signature.run,
                        batching_parameters,
                        lambda size: metrics.observe_batch(name, signature.name, size),
                    )
                )
        except Exception:
            metrics.count_load(path, "error")
            raise
        metrics.count_load(path, "success")
        return servable

    service = InferenceService(
        ModelManager(load, poll_wait_seconds), metrics, max_request_batch_size, max_tensor_bytes
    )
    return service
