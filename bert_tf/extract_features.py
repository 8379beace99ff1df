r"""Extracts per-token BERT activations, in google-research/bert's `extract_features.py` format.

Input: one example per line; a sentence pair is written `text_a ||| text_b`.
Output: JSON lines, one per input line:

    {"linex_index": 0, "features": [{"token": "[CLS]",
      "layers": [{"index": -1, "values": [0.123, ...]}, ...]}, ...]}

`--init_checkpoint` takes a google-research checkpoint (ours are the same format), or an HF BERT
folder (config.json + model.safetensors + vocab.txt), in which case `--bert_config_file` and
`--vocab_file` default to the files in that folder. google-research's TPU flags (`--use_tpu`,
`--master`, `--num_tpu_cores`) and `--use_one_hot_embeddings` are accepted and change nothing:
extraction runs on this machine's CPU/GPU.

Example:

    python -m bert_tf.extract_features --input_file=input.txt --output_file=output.jsonl \
      --init_checkpoint=$HOME/.cache/bert_tfx/minilm --layers=-1,-2 --max_seq_length=128
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator

from absl import flags, logging

from bert_tf import fileio, flags_util, options
from bert_tf.flags_util import check_positive, decode_utf8

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default).

    Called when the module runs as a program, never on import, so tests and other scripts can
    import it; tests run `main` in-process on a fresh FlagValues (see tests/conftest.py).
    """
    flags.DEFINE_string(
        "input_file",
        None,
        "Text file, one example per line ('a ||| b' for pairs).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "output_file", None, "Where to write the JSON lines.", flag_values=flag_values
    )
    # --init_checkpoint --bert_config_file --vocab_file --do_lower_case --max_seq_length
    options.define_flags(options.ModelSourceOptions, flag_values)
    flags.DEFINE_string(
        "layers",
        "-1,-2,-3,-4",
        "Comma-separated layer indexes (-1 = last).",
        flag_values=flag_values,
    )
    flags.DEFINE_integer("batch_size", 32, "Examples per inference batch.", flag_values=flag_values)
    # google-research's flags, accepted so its command lines run unchanged (see main).
    options.define_flags(options.TpuOptions, flag_values)
    flags.DEFINE_bool(
        "use_one_hot_embeddings",
        False,
        "Accepted for google-research compatibility; no effect (a one-hot matmul and a gather "
        "give the same embeddings).",
        flag_values=flag_values,
    )


# google-research's rule: a line is a pair only if it matches this, with spaces around "|||";
# the greedy first group makes the LAST separator split ("x ||| y ||| z" -> "x ||| y", "z"),
# and neither side is stripped again.
_PAIR_LINE = re.compile(r"^(.*) \|\|\| (.*)$")


def read_examples(input_file: str) -> list[tuple[str, str | None]]:
    """(text_a, text_b or None) per line, exactly as google-research's `read_examples`."""
    text = decode_utf8(fileio.read_bytes(input_file), input_file)
    lines = text.split("\n")  # "\n" only, like google's readline (not str.splitlines)
    if lines[-1] == "":
        lines.pop()
    examples = []
    for line in lines:
        line = line.strip()
        match = _PAIR_LINE.match(line)
        examples.append((line, None) if match is None else (match.group(1), match.group(2)))
    return examples


def parse_layers(layers: str, num_layers: int) -> list[int]:
    """'-1,-2' -> [-1, -2], each checked against the model's depth."""
    try:
        indexes = [int(x) for x in layers.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--layers: expected comma-separated integers, got {layers!r}") from None
    bad = [i for i in indexes if not -num_layers <= i < num_layers]
    if not indexes or bad:
        raise ValueError(
            f"--layers: {bad or layers!r} out of range for a {num_layers}-layer model "
            f"(use -{num_layers}..{num_layers - 1})"
        )
    return indexes


def extract(
    examples: list[tuple[str, str | None]],
    encoder,
    preprocessor,
    layers: list[int],
    batch_size: int,
) -> Iterator[dict]:
    """Yields one google-research-format record per example, in input order.

    Single sentences and pairs are packed differently, so each batch holds one kind; records are
    reordered back to the input order.
    """
    import numpy as np
    import tensorflow as tf

    @tf.function(reduce_retracing=True)
    def run(segments):
        features = preprocessor(segments)
        outputs = encoder(features, training=False)
        return features, tf.stack([outputs["encoder_outputs"][i] for i in layers], axis=0)

    groups = {
        False: [i for i, (_, b) in enumerate(examples) if b is None],
        True: [i for i, (_, b) in enumerate(examples) if b is not None],
    }
    records: dict[int, dict] = {}
    done, start = 0, time.perf_counter()
    for is_pair, indexes in groups.items():
        for offset in range(0, len(indexes), batch_size):
            batch = indexes[offset : offset + batch_size]
            segments = [tf.constant([examples[i][0] for i in batch])]
            if is_pair:
                segments.append(tf.constant([examples[i][1] for i in batch]))
            features, values = run(tuple(segments))
            tokens = preprocessor.tokenizer.id_to_token(features["input_word_ids"]).numpy()
            lengths = tf.reduce_sum(features["input_mask"], axis=1).numpy()
            values = np.round(values.numpy().astype(np.float64), 6)
            for row, index in enumerate(batch):
                records[index] = {
                    "linex_index": index,
                    "features": [
                        {
                            "token": tokens[row, t].decode("utf-8"),
                            "layers": [
                                {"index": layer, "values": values[k, row, t].tolist()}
                                for k, layer in enumerate(layers)
                            ],
                        }
                        for t in range(int(lengths[row]))
                    ],
                }
            done += len(batch)
            rate = done / (time.perf_counter() - start)
            logging.info(
                "extracted %d/%d examples (%.1f/s, ETA %.0f s)",
                done,
                len(examples),
                rate,
                (len(examples) - done) / rate,
            )
    yield from (records[i] for i in range(len(examples)))


def main(argv: list[str]) -> None:
    del argv
    from bert_tf import checkpoints, model_source
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.text.tokenization import BertPreprocessor

    for name in ("input_file", "output_file", "init_checkpoint"):
        if not FLAGS[name].value:
            sys.exit(f"error: --{name} is required")
    if not fileio.isfile(FLAGS.input_file):
        sys.exit(f"error: --input_file={FLAGS.input_file}: no such file")
    try:
        options.check(options.from_flags(options.ModelSourceOptions, FLAGS))
        check_positive(FLAGS, ["batch_size"])
    except ValueError as e:
        sys.exit(f"error: {e}")
    if FLAGS.use_tpu:
        # Extraction is inference on this machine (tokenization in-graph, on the host).
        logging.warning("--use_tpu ignored: extract_features runs on this machine's CPU/GPU")
    try:
        source = model_source.resolve(
            FLAGS.init_checkpoint, FLAGS.bert_config_file, FLAGS.vocab_file, FLAGS.max_seq_length
        )
        config = source.config
        layers = parse_layers(FLAGS.layers, config.num_hidden_layers)
        preprocessor = BertPreprocessor(
            source.vocab, seq_length=FLAGS.max_seq_length, lower_case=FLAGS.do_lower_case
        )
        encoder = build_encoder(config)
        checkpoints.load_pretrained(encoder, FLAGS.init_checkpoint)
        examples = read_examples(FLAGS.input_file)
    except (ValueError, OSError) as e:
        sys.exit(f"error: {e}")
    if not examples:
        sys.exit(f"error: --input_file={FLAGS.input_file} has no lines")

    output = FLAGS.output_file  # a string: a Path would fold gs:// into gs:/
    if os.path.dirname(output):
        fileio.makedirs(os.path.dirname(output))
    with fileio.atomic_open(output, "w") as f:
        for record in extract(examples, encoder, preprocessor, layers, FLAGS.batch_size):
            f.write(json.dumps(record) + "\n")
    logging.info("wrote %d examples to %s", len(examples), output)


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
