"""TF Serving's BatchingParameters and MonitoringConfig messages, for parsing their text protos.

The pip package `tensorflow-serving-api` ships `model_server_config_pb2` but not
`session_bundle_config.proto` (BatchingParameters) or `monitoring_config.proto`, and no proto
compiler is installed, so the two messages are declared here with the same package, names and
field numbers as tensorflow/serving's .proto files. The same text files therefore configure both
this server and the real `tensorflow_model_server`.

Example:

>>> params = parse_text_file_contents("max_batch_size { value: 8 }", BatchingParameters)
>>> params.max_batch_size.value
8
"""

from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    text_format,
    wrappers_pb2,
)

_F = descriptor_pb2.FieldDescriptorProto


def _field(name, number, type_, type_name="", repeated=False):
    label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    field = _F(name=name, number=number, type=type_, label=label)
    if type_name:
        field.type_name = type_name
    return field


def _build_messages():
    file = descriptor_pb2.FileDescriptorProto(
        name="bert_tfx/serving/tf_serving_config_subset.proto",
        package="tensorflow.serving",
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    int64 = (_F.TYPE_MESSAGE, ".google.protobuf.Int64Value")
    file.message_type.add(
        name="BatchingParameters",
        field=[
            _field("max_batch_size", 1, *int64),
            _field("batch_timeout_micros", 2, *int64),
            _field("max_enqueued_batches", 3, *int64),
            _field("num_batch_threads", 4, *int64),
            _field("thread_pool_name", 5, _F.TYPE_MESSAGE, ".google.protobuf.StringValue"),
            _field("allowed_batch_sizes", 6, _F.TYPE_INT64, repeated=True),
            _field("pad_variable_length_inputs", 7, _F.TYPE_BOOL),
        ],
    )
    file.message_type.add(
        name="PrometheusConfig",
        field=[_field("enable", 1, _F.TYPE_BOOL), _field("path", 2, _F.TYPE_STRING)],
    )
    file.message_type.add(
        name="MonitoringConfig",
        field=[
            _field("prometheus_config", 1, _F.TYPE_MESSAGE, ".tensorflow.serving.PrometheusConfig")
        ],
    )
    # A private pool: a future tensorflow-serving-api that ships these messages cannot clash.
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file)
    factory = message_factory.MessageFactory(pool)
    return tuple(
        factory.GetPrototype(pool.FindMessageTypeByName(f"tensorflow.serving.{name}"))
        for name in ("BatchingParameters", "PrometheusConfig", "MonitoringConfig")
    )


BatchingParameters, PrometheusConfig, MonitoringConfig = _build_messages()


def parse_text_file_contents(text: str, message_class, source: str = "<string>"):
    """Parses a text proto into a new `message_class`, naming `source` in the error."""
    message = message_class()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as e:
        raise ValueError(
            f"{source}: not a valid {message.DESCRIPTOR.full_name} text proto: {e}"
        ) from None
    return message


def read_text_proto(path: str, message_class):
    """Reads a text proto file (local or any `tf.io.gfile` scheme) into `message_class`."""
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        raise ValueError(f"{path}: file not found")
    with tf.io.gfile.GFile(path) as f:
        return parse_text_file_contents(f.read(), message_class, source=path)
