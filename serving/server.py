"""A TensorFlow-Serving-compatible model server: `python -m serving.server`.

Flags are tensorflow_model_server's, so a command line (or Kubernetes args list) written for this
server runs the real one unchanged. When a `tensorflow_model_server` binary is on PATH and
`--embedded` is not given, this execs it with the same flags (minus ours: `--embedded`, `--host`,
and the request limits `--rest_api_max_request_bytes`, `--max_request_batch_size`; see
SECURITY.md).

This server imports tensorflow_text, so it runs every tensorflow-text op; the stock
`tensorflow_model_server` 2.13-2.19 registers only core TF and tensorflow-text 2.12.1's `ops_lib`
(serving/tf_serving_ops.txt). Loading a version that uses an op outside that list logs a warning
naming it: the stock server would refuse that version. `python -m serving.export` writes none.

Example:

    python -m serving.server --port=8500 --rest_api_port=8501 \\
        --model_name=bert --model_base_path=/models/bert
    python -m serving.server --model_config_file=serving/configs/models.config \\
        --enable_batching --batching_parameters_file=serving/configs/batching_parameters.txt
"""

import os
import select
import shutil
import signal
import socket
import sys
import threading

from absl import flags, logging

from bert_tf import flags_util, threads
from serving import MODEL_SERVER_BINARY

FLAGS = flags.FLAGS
# --rest_api_max_request_bytes' default (ours; the real server has no such cap).
DEFAULT_MAX_REQUEST_BYTES = 64 << 20


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default).

    Called when the module runs as a program, never on import, so tests and other scripts can
    import it; tests run `main` in-process on a fresh FlagValues (see tests/conftest.py).
    """
    flags.DEFINE_integer(
        "port", 8500, "Port to listen on for the gRPC API.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "rest_api_port", 8501, "Port for the HTTP/REST API; 0 disables it.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "rest_api_timeout_in_ms", 30000, "Timeout for HTTP/REST API calls.", flag_values=flag_values
    )
    flags.DEFINE_string(
        "model_name",
        "default",
        "Name of the model (without --model_config_file).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "model_base_path",
        "",
        "Folder of numeric version folders of the model.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "model_config_file",
        "",
        "ModelServerConfig text proto (several models).",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "model_config_file_poll_wait_seconds",
        0,
        "Re-read --model_config_file this often; 0: never.",
        flag_values=flag_values,
    )
    flags.DEFINE_float(
        "file_system_poll_wait_seconds",
        1,
        "Seconds between polls of the base paths for versions.",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "enable_batching",
        False,
        "Batch concurrent requests of a signature.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "batching_parameters_file", "", "BatchingParameters text proto.", flag_values=flag_values
    )
    flags.DEFINE_bool(
        "enable_model_warmup",
        True,
        "Replay assets.extra/tf_serving_warmup_requests on load.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "monitoring_config_file",
        "",
        "MonitoringConfig text proto (Prometheus).",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "grpc_max_threads", 64, "Threads serving gRPC requests.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "tensorflow_intra_op_parallelism",
        0,
        "Threads one TensorFlow op may use; 0: TensorFlow's choice (all cores). 1 serves "
        "batch-1 requests fastest (README: the serving configuration).",
        lower_bound=0,
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "tensorflow_inter_op_parallelism",
        0,
        "Threads running independent TensorFlow ops (and concurrent requests); 0: "
        "TensorFlow's choice (all cores).",
        lower_bound=0,
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "grpc_channel_arguments",
        "",
        "Comma-separated key=value gRPC server arguments, e.g. "
        "grpc.max_receive_message_length=4194304 (default limit: 2 GiB - 1, as TF Serving).",
        flag_values=flag_values,
    )
    # Ours only (removed when delegating): the real server binds every interface, inside a container.
    flags.DEFINE_string(
        "host", "127.0.0.1", "Interface the gRPC and REST ports bind to.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "rest_api_max_request_bytes",
        DEFAULT_MAX_REQUEST_BYTES,
        "Largest REST request body; larger ones get 429 (RESOURCE_EXHAUSTED) unread. 0: no limit.",
        lower_bound=0,
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "max_request_batch_size",
        1000,
        "Most rows (examples) in one request; more get RESOURCE_EXHAUSTED. 0: no limit.",
        lower_bound=0,
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "embedded",
        False,
        "Use this server even if tensorflow_model_server is on PATH.",
        flag_values=flag_values,
    )


_OUR_BOOL_FLAGS = ("embedded", "noembedded")
_OUR_VALUE_FLAGS = ("host", "rest_api_max_request_bytes", "max_request_batch_size")
_DRAIN_SECONDS = 30
# TF Serving's gRPC message limit (ServerBuilder::SetMaxMessageSize(kint32max)); larger requests
# get RESOURCE_EXHAUSTED from gRPC itself. --grpc_channel_arguments may lower it.
GRPC_MAX_MESSAGE_BYTES = 2**31 - 1


def delegated_argv(argv: list[str]) -> list[str]:
    """`argv` without the flags only this server knows (`--flag=v`, `--flag v`, `--noflag`)."""
    kept, skip_next = [], False
    for arg in argv:
        name = arg.lstrip("-").split("=", 1)[0]
        if skip_next:
            skip_next = False
        elif arg.startswith("-") and name in _OUR_BOOL_FLAGS + _OUR_VALUE_FLAGS:
            skip_next = "=" not in arg and name in _OUR_VALUE_FLAGS
        else:
            kept.append(arg)
    return kept


def grpc_server_options(channel_arguments: str) -> dict[str, int | str]:
    """gRPC server options: TF Serving's message limits, no port sharing, then
    `--grpc_channel_arguments`.

    As TF Serving, a value that parses as an integer is passed as one, anything else as a string.
    Raises ValueError naming the flag on an entry without `=`.
    """
    options: dict[str, int | str] = {
        "grpc.max_receive_message_length": GRPC_MAX_MESSAGE_BYTES,
        "grpc.max_send_message_length": GRPC_MAX_MESSAGE_BYTES,
        # gRPC sets SO_REUSEPORT on Linux: a second server on a taken port would bind and
        # share its connections silently; without it the bind fails and says so.
        "grpc.so_reuseport": 0,
    }
    for entry in filter(None, (e.strip() for e in channel_arguments.split(","))):
        key, sep, value = entry.partition("=")
        if not sep or not key:
            raise ValueError(
                f"--grpc_channel_arguments: expected comma-separated key=value, got {entry!r}"
            )
        try:
            options[key.strip()] = int(value)
        except ValueError:
            options[key.strip()] = value
    return options


def _model_configs():
    from tensorflow_serving.config import model_server_config_pb2

    from serving.config_protos import read_text_proto

    if FLAGS.model_config_file:
        if FLAGS.model_base_path:  # as TF Serving (its Docker entrypoint always passes both)
            logging.warning("--model_config_file given: ignoring --model_base_path")
        config = read_text_proto(FLAGS.model_config_file, model_server_config_pb2.ModelServerConfig)
        if config.WhichOneof("config") != "model_config_list":
            sys.exit(f"error: {FLAGS.model_config_file}: expected a model_config_list")
        return list(config.model_config_list.config)
    if not FLAGS.model_base_path:
        sys.exit("error: --model_base_path (or --model_config_file) is required")
    return [
        model_server_config_pb2.ModelConfig(
            name=FLAGS.model_name, base_path=FLAGS.model_base_path, model_platform="tensorflow"
        )
    ]


def _watch_config_file(service, stop: threading.Event) -> None:
    last = None
    while not stop.wait(FLAGS.model_config_file_poll_wait_seconds):
        try:
            configs = _model_configs()
            if configs != last:
                service.manager.set_config(configs)
                last = configs
        except (ValueError, SystemExit) as e:
            logging.error("Not applying %s: %s", FLAGS.model_config_file, e)


class StopSignals:
    """Catches SIGTERM and SIGINT from construction on; `wait()` returns once one has arrived.

    Not an `Event` that a Python handler sets: a signal that lands just before the main thread
    blocks in `Event.wait()` (or on one of gRPC's threads) does not wake it, and the server never
    drains (a SIGTERM right after startup hung a test this way). Python's C-level handler writes
    the signal number to the wakeup fd on whatever thread takes the signal, so it waits there.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self._read, write = socket.socketpair()
        self._read.setblocking(False)
        write.setblocking(False)
        self._write = write  # kept open: the handler writes to its fd
        signal.set_wakeup_fd(write.fileno(), warn_on_full_buffer=False)
        for signum in self.SIGNALS:  # the wakeup fd is written only for Python-handled signals
            signal.signal(signum, lambda *_: None)

    def wait(self) -> signal.Signals:
        """Blocks until SIGTERM or SIGINT has arrived (at any time since construction)."""
        while True:
            select.select([self._read], [], [])
            for signum in self._read.recv(64):
                if signum in self.SIGNALS:
                    return signal.Signals(signum)


def check_ports(host: str, ports: dict[str, int]) -> None:
    """Exits with one line naming the flag if a port (flag name -> port; 0: none to check)
    cannot be bound on `host`: before TensorFlow's import and the model loads (a minute for a
    BERT), not after them behind gRPC's own "add_port.cc" error line. Bound and closed at once
    (SO_REUSEADDR, as gRPC and the REST server bind, so a restart's TIME_WAIT does not count);
    the servers bind again later, and still report a port lost in between."""
    for flag, port in ports.items():
        if not port:
            continue
        try:
            family, kind, proto, _, address = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(address)
        except OSError as e:
            sys.exit(
                f"error: --{flag}={port}: cannot bind {host}:{port} "
                f"({e.strerror or e}; in use by another process?)"
            )


def serve() -> None:
    """Loads the models, serves gRPC (+ REST) until SIGTERM/SIGINT, then drains and returns."""
    try:  # before the slow imports: a typo fails at once
        grpc_options = grpc_server_options(FLAGS.grpc_channel_arguments)
    except ValueError as e:
        sys.exit(f"error: {e}")
    check_ports(FLAGS.host, {"port": FLAGS.port, "rest_api_port": FLAGS.rest_api_port})
    # Before anything answers: a client may SIGTERM as soon as the gRPC port is up.
    stop_signals = StopSignals()
    try:  # before any model loads: TensorFlow fixes its pools when its runtime starts
        threads.configure(
            FLAGS.tensorflow_intra_op_parallelism,
            FLAGS.tensorflow_inter_op_parallelism,
            ("tensorflow_intra_op_parallelism", "tensorflow_inter_op_parallelism"),
        )
    except ValueError as e:
        sys.exit(f"error: {e}")
    logging.info(
        "TensorFlow threads: intra-op %s, inter-op %s",
        FLAGS.tensorflow_intra_op_parallelism or "default",
        FLAGS.tensorflow_inter_op_parallelism or "default",
    )

    from concurrent import futures

    import grpc

    from serving import config_protos
    from serving.grpc_service import add_servicers
    from serving.inference import make_service
    from serving.rest import RestApi, RestServer

    batching = None
    if FLAGS.enable_batching:
        batching = config_protos.BatchingParameters()
        if FLAGS.batching_parameters_file:
            batching = config_protos.read_text_proto(
                FLAGS.batching_parameters_file, config_protos.BatchingParameters
            )
    metrics_path = None
    if FLAGS.monitoring_config_file:
        monitoring = config_protos.read_text_proto(
            FLAGS.monitoring_config_file, config_protos.MonitoringConfig
        )
        if monitoring.prometheus_config.enable:
            metrics_path = monitoring.prometheus_config.path or "/monitoring/prometheus/metrics"

    max_receive = grpc_options["grpc.max_receive_message_length"]
    service = make_service(
        FLAGS.file_system_poll_wait_seconds,
        batching,
        FLAGS.enable_model_warmup,
        max_request_batch_size=FLAGS.max_request_batch_size,
        # A request may not decode to more than it could have sent (no fill-value expansion).
        max_tensor_bytes=max_receive if isinstance(max_receive, int) and max_receive > 0 else 0,
    )
    try:
        service.manager.set_config(_model_configs())
    except ValueError as e:
        sys.exit(f"error: {e}")
    service.manager.start()

    grpc_server = grpc.server(
        futures.ThreadPoolExecutor(FLAGS.grpc_max_threads), options=list(grpc_options.items())
    )
    add_servicers(grpc_server, service)
    try:  # grpcio raises on a taken port (older versions returned 0)
        bound = grpc_server.add_insecure_port(f"{FLAGS.host}:{FLAGS.port}")
    except RuntimeError:
        bound = 0
    if bound == 0:
        sys.exit(
            f"error: --port={FLAGS.port}: cannot bind {FLAGS.host}:{FLAGS.port} "
            "(in use by another process?)"
        )
    grpc_server.start()
    logging.info("Running gRPC ModelServer at %s:%d ...", FLAGS.host, FLAGS.port)
    rest = None
    if FLAGS.rest_api_port:
        api = RestApi(service, FLAGS.rest_api_timeout_in_ms, metrics_path)
        try:
            rest = RestServer(
                api, FLAGS.host, FLAGS.rest_api_port, FLAGS.rest_api_max_request_bytes
            )
        except OSError as e:
            sys.exit(f"error: --rest_api_port={FLAGS.rest_api_port}: {e}")
        rest.start()
        logging.info("Exporting HTTP/REST API at:%s:%d ...", FLAGS.host, FLAGS.rest_api_port)

    stop = threading.Event()
    if FLAGS.model_config_file and FLAGS.model_config_file_poll_wait_seconds > 0:
        threading.Thread(target=_watch_config_file, args=(service, stop), daemon=True).start()
    signum = stop_signals.wait()
    stop.set()

    logging.info(
        "%s: shutting down: no new requests; draining %d in-flight request(s)",
        signum.name,
        service.metrics.requests_in_flight(),
    )
    grpc_done = grpc_server.stop(grace=_DRAIN_SECONDS)
    if rest is not None:
        rest.stop()
    grpc_done.wait()
    service.manager.stop()
    logging.info("Server stopped")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}")
    binary = None if FLAGS.embedded else shutil.which(MODEL_SERVER_BINARY)
    if binary:
        logging.info("Found %s on PATH; running it with the same flags", binary)
        os.execv(binary, [binary, *delegated_argv(sys.argv[1:])])
    serve()


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
