"""gRPC PredictionService and ModelService servicers over an InferenceService.

Example:

>>> server = grpc.server(futures.ThreadPoolExecutor(16))
>>> add_servicers(server, make_service())
"""

import time

import grpc
from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

from serving.inference import InferenceService
from serving.servable import ServingError


def _deadline(context) -> float | None:
    remaining = context.time_remaining()
    # grpc reports a huge number (or None) when the client set no deadline.
    return None if remaining is None or remaining > 1e9 else time.monotonic() + remaining


def _call(context, fn, *args):
    try:
        return fn(*args)
    except ServingError as e:
        context.abort(e.code, e.message)


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, service: InferenceService):
        self._service = service

    def Predict(self, request, context):
        return _call(context, self._service.predict, request, _deadline(context))

    def Classify(self, request, context):
        return _call(context, self._service.classify, request, _deadline(context))

    def Regress(self, request, context):
        return _call(context, self._service.regress, request, _deadline(context))

    def MultiInference(self, request, context):
        return _call(context, self._service.multi_inference, request, _deadline(context))

    def GetModelMetadata(self, request, context):
        return _call(context, self._service.get_model_metadata, request)


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, service: InferenceService):
        self._service = service

    def GetModelStatus(self, request, context):
        return _call(context, self._service.get_model_status, request)

    def HandleReloadConfigRequest(self, request, context):
        return _call(context, self._service.reload_config, request)


def add_servicers(server: grpc.Server, service: InferenceService) -> None:
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionServicer(service), server
    )
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelServicer(service), server)
