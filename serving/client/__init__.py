"""Client for TF Serving (the real one or ours): a small Python API and a command line
(`python -m serving.client --server=localhost:8500 --model_name=sst2 --text="a gem"`; its usage
and flags: serving/client/__main__.py, `--help`). Neither imports TensorFlow.

Python API:

>>> with ServingClient("localhost:8500") as client:
...     client.predict("bert_encoder", {"text": ["hello world"]})["pooled_output"].shape
(1, 384)

Modules: `protos` (TF Serving's protos loaded without TensorFlow), `codec` (numpy <->
TensorProto), `grpc_client` (`ServingClient`), `rest_client` (`rest_predict`, ...), `texts`
(texts as a signature's inputs), `formatting` (output lines) and `cli` (the flags and `main`
that `python -m serving.client`, i.e. `__main__`, runs).
"""

# Every module takes its protos from serving.client.protos, whose placeholder is thus in place
# before any of TensorFlow's protos is imported.
from serving.client.codec import make_ndarray, make_tensor_proto
from serving.client.formatting import format_classes, format_output, format_values
from serving.client.grpc_client import ServingClient
from serving.client.protos import CLASSIFY_METHOD, DEFAULT_SIGNATURE, REGRESS_METHOD
from serving.client.rest_client import (
    rest_classify,
    rest_metadata,
    rest_predict,
    rest_regress,
    rest_url,
)
from serving.client.texts import read_text_file, text_examples, text_inputs

__all__ = [
    "CLASSIFY_METHOD",
    "DEFAULT_SIGNATURE",
    "REGRESS_METHOD",
    "ServingClient",
    "format_classes",
    "format_output",
    "format_values",
    "make_ndarray",
    "make_tensor_proto",
    "read_text_file",
    "rest_classify",
    "rest_metadata",
    "rest_predict",
    "rest_regress",
    "rest_url",
    "text_examples",
    "text_inputs",
]
