"""The command line (`python -m serving.client`, see the package's docstring): flags, the query
they describe, and its output or a one-line error."""

import contextlib
import functools
import sys

import grpc
from absl import flags

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
from serving.client.texts import pair_texts, read_text_file, text_examples, text_inputs

# The flags `define_flags` defines belong to the program that calls it (`__main__`: they show in
# its `--help`), not to this module.
flags.disclaim_key_flags()

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default).

    Called when the module runs as a program, never on import, so tests and other scripts can
    import it; tests run `main` in-process on a fresh FlagValues (see tests/conftest.py).
    """
    flags.DEFINE_string(
        "server",
        None,
        "host:port of the gRPC API (default localhost:8500), or with --rest of the REST API "
        "(default localhost:8501; a full http:// URL also works).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "model_name", None, "Name of the model (to query).", flag_values=flag_values
    )
    flags.DEFINE_string(
        "signature_name",
        DEFAULT_SIGNATURE,
        "Signature to run; a classify/regress one (e.g. `classify`) gets tf.Examples.",
        flag_values=flag_values,
    )
    flags.DEFINE_multi_string(
        "text",
        [],
        "An input text (commas are part of it)",
        flag_values=flag_values,
    )
    flags.DEFINE_multi_string(
        "text_b",
        [],
        "The second text of each --text, in order: a classifier's text_b (none, or one empty "
        "value: single sentences), a SQuAD model's context (required)",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "text_file",
        None,
        "UTF-8 file of inputs, one a line: `text`, or `text<TAB>text_b`; blank lines are "
        "skipped. Instead of --text/--text_b.",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "rest", False, "Use the REST API at --server instead of gRPC.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "version", None, "Model version (default: latest).", flag_values=flag_values
    )
    flags.DEFINE_float("timeout", 30.0, "Deadline per request, seconds.", flag_values=flag_values)


def _signature(signatures: dict, name: str):
    if name not in signatures:
        known = ", ".join(sorted(s for s in signatures if not s.startswith("__")))
        raise ValueError(f"model {FLAGS.model_name!r} has no signature {name!r} (it has: {known})")
    return signatures[name]


def _query(texts: list[str], texts_b: list[str | None], sources: list[str] | None) -> list[str]:
    """Runs the request the flags describe; the lines to print."""
    model, name, version, timeout = (
        FLAGS.model_name,
        FLAGS.signature_name,
        FLAGS.version,
        FLAGS.timeout,
    )
    with contextlib.ExitStack() as stack:
        if FLAGS.rest:
            base = rest_url(FLAGS.server or "localhost:8501")
            signature = _signature(rest_metadata(base, model, version, timeout), name)
            method, input_names = signature.get("method_name"), list(signature.get("inputs", {}))
            options = {"signature": name, "version": version, "timeout": timeout}
            classify = functools.partial(rest_classify, base, model, **options)
            regress = functools.partial(rest_regress, base, model, **options)
            predict = functools.partial(rest_predict, base, model, **options)
        else:
            grpc_client = stack.enter_context(
                ServingClient(FLAGS.server or "localhost:8500", timeout)
            )
            signature = _signature(grpc_client.metadata(model, version), name)
            method, input_names = signature.method_name, list(signature.inputs)
            options = {"signature": name, "version": version}
            classify = functools.partial(grpc_client.classify, model, **options)
            regress = functools.partial(grpc_client.regress, model, **options)
            predict = functools.partial(grpc_client.predict, model, **options)
        if method in (CLASSIFY_METHOD, REGRESS_METHOD):
            pairs = pair_texts("text_b", texts, texts_b, sources)
            examples = text_examples(texts, pairs)
            if method == CLASSIFY_METHOD:
                return format_classes(texts, pairs, classify(examples))
            return format_values(texts, pairs, regress(examples))
        outputs = predict(text_inputs(input_names, texts, texts_b, sources))
    return [format_output(output, outputs[output]) for output in sorted(outputs)]


def main(argv):
    del argv
    try:
        if FLAGS.text_file:
            if FLAGS.text or FLAGS.text_b:
                raise ValueError("give --text_file or --text/--text_b, not both")
            texts, texts_b, sources = read_text_file(FLAGS.text_file)
        else:
            texts, texts_b, sources = FLAGS.text, FLAGS.text_b, None
        if not FLAGS.model_name or not texts:
            raise ValueError("--model_name and --text (or --text_file) are required")
        lines = _query(texts, texts_b, sources)
    except grpc.RpcError as e:
        sys.exit(f"error: {e.code().name}: {e.details()}")
    except (ValueError, KeyError, TypeError, RuntimeError, OSError) as e:
        sys.exit(f"error: {e}")
    for line in lines:
        print(line)
