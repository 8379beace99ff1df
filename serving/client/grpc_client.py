"""The gRPC client of TF Serving's PredictionService and ModelService (`ServingClient`)."""

import grpc
import numpy as np
from google.protobuf import json_format

from serving.client.codec import make_ndarray, make_tensor_proto
from serving.client.protos import (
    DEFAULT_SIGNATURE,
    classification_pb2,
    example_pb2,
    feature_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)


def _set_spec(spec, model: str, signature: str | None, version: int | None, label: str | None):
    spec.name = model
    if signature is not None:
        spec.signature_name = signature
    if version is not None:
        spec.version.value = version
    if label:
        spec.version_label = label


def _example(features: dict) -> example_pb2.Example:
    feature = {}
    for key, value in features.items():
        values = np.asarray(value).reshape(-1)
        if values.dtype.kind in "iub":
            feature[key] = feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=values))
        elif values.dtype.kind == "f":
            feature[key] = feature_pb2.Feature(float_list=feature_pb2.FloatList(value=values))
        else:
            encoded = [v if isinstance(v, bytes) else str(v).encode() for v in values]
            feature[key] = feature_pb2.Feature(bytes_list=feature_pb2.BytesList(value=encoded))
    return example_pb2.Example(features=feature_pb2.Features(feature=feature))


class ServingClient:
    """gRPC client for PredictionService / ModelService.

    Args:
        target: `host:port` of the gRPC API.
        timeout: default deadline per call, in seconds.
    """

    def __init__(self, target: str, timeout: float = 30.0):
        self._channel = grpc.insecure_channel(
            target, options=[("grpc.max_receive_message_length", -1)]
        )
        self._predictions = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)
        self._models = model_service_pb2_grpc.ModelServiceStub(self._channel)
        self.timeout = timeout

    def predict(
        self,
        model: str,
        inputs: dict,
        signature: str = DEFAULT_SIGNATURE,
        version: int | None = None,
        label: str | None = None,
        output_filter: list[str] | tuple = (),
        timeout: float | None = None,
    ) -> dict[str, np.ndarray]:
        """Runs a signature; string outputs come back as object arrays of bytes."""
        request = predict_pb2.PredictRequest(output_filter=output_filter)
        _set_spec(request.model_spec, model, signature, version, label)
        for name, value in inputs.items():
            request.inputs[name].CopyFrom(make_tensor_proto(value))
        response = self._predictions.Predict(request, timeout=timeout or self.timeout)
        return {name: make_ndarray(proto) for name, proto in response.outputs.items()}

    def classify(
        self, model: str, examples: list[dict], signature: str = DEFAULT_SIGNATURE, **kwargs
    ) -> list[list[tuple[str, float]]]:
        """[(label, score)] per example; `examples` are dicts of feature name -> value(s)."""
        request = classification_pb2.ClassificationRequest()
        _set_spec(request.model_spec, model, signature, kwargs.get("version"), kwargs.get("label"))
        request.input.example_list.examples.extend(_example(e) for e in examples)
        response = self._predictions.Classify(request, timeout=kwargs.get("timeout", self.timeout))
        return [[(c.label, c.score) for c in r.classes] for r in response.result.classifications]

    def regress(
        self, model: str, examples: list[dict], signature: str = DEFAULT_SIGNATURE, **kwargs
    ) -> list[float]:
        request = regression_pb2.RegressionRequest()
        _set_spec(request.model_spec, model, signature, kwargs.get("version"), kwargs.get("label"))
        request.input.example_list.examples.extend(_example(e) for e in examples)
        response = self._predictions.Regress(request, timeout=kwargs.get("timeout", self.timeout))
        return [r.value for r in response.result.regressions]

    def metadata(self, model: str, version: int | None = None, label: str | None = None) -> dict:
        """Signature key -> SignatureDef proto."""
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        _set_spec(request.model_spec, model, None, version, label)
        response = self._predictions.GetModelMetadata(request, timeout=self.timeout)
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signature_map)
        return dict(signature_map.signature_def)

    def status(self, model: str, version: int | None = None) -> list[dict]:
        """[{"version", "state", "error_code", "error_message"}] per version."""
        request = get_model_status_pb2.GetModelStatusRequest()
        _set_spec(request.model_spec, model, None, version, None)
        response = self._models.GetModelStatus(request, timeout=self.timeout)
        return [
            json_format.MessageToDict(
                s, preserving_proto_field_name=True, including_default_value_fields=True
            )
            | {"version": s.version}
            for s in response.model_version_status
        ]

    def close(self) -> None:
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
