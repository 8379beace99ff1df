r"""Linear probe: how much of a text-classification task a frozen encoder's features carry.

Encodes a `text_classification` folder's train.tsv and dev.tsv with the encoder of
`--init_checkpoint` (or, without it, a randomly initialised encoder of `--bert_config_file` with
`--seed`), fits scikit-learn logistic regression on the mean-pooled last layer and on the pooled
([CLS]) output of the training texts, and reports dev accuracy. Comparing a pretrained encoder
with a random one tells whether pretraining put task-relevant information into the features
before any fine-tuning.

    python -m experiments.feature_probe --data_dir=zh_sentiment --vocab_file=vocab.txt \
        --init_checkpoint=runs/experiments/zh/pretrain_reviews --output_file=probe.json
"""

from __future__ import annotations

import numpy as np
from absl import flags

from bert_tf import flags_util
from experiments import report

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`); called only when run as a program."""

    def define(kind, name, default, help_):
        getattr(flags, f"DEFINE_{kind}")(name, default, help=help_, flag_values=flag_values)

    define("string", "data_dir", None, "text_classification folder (train.tsv, dev.tsv).")
    define("string", "vocab_file", None, "WordPiece vocab of the encoder.")
    define("bool", "do_lower_case", True, "Lower-case and strip accents.")
    define("string", "init_checkpoint", None, "Encoder weights; none: random initialisation.")
    define("string", "bert_config_file", None, "Config (default: the checkpoint's).")
    define("integer", "max_seq_length", 64, "Sequence length.")
    define("integer", "seed", 1, "Seed of the random initialisation.")
    define("string", "output_file", None, "Where the JSON result goes (optional).")
    flags.mark_flags_as_required(["data_dir", "vocab_file"], flag_values=flag_values)


def encode(encoder, preprocessor, texts: list[str], batch_size: int = 256) -> dict:
    """Mean-pooled last-layer features (padding excluded) and pooled outputs, as arrays."""
    import tensorflow as tf

    from bert_tf.tasks.sentence_embedding import mean_pool

    means, pooled = [], []
    for start in range(0, len(texts), batch_size):
        inputs = preprocessor(tf.constant(texts[start : start + batch_size]))
        outputs = encoder(inputs, training=False)
        mean = mean_pool(outputs["sequence_output"], inputs["input_mask"], normalize=False)
        means.append(mean.numpy())
        pooled.append(outputs["pooled_output"].numpy())
    return {"mean_pooled": np.concatenate(means), "pooled_output": np.concatenate(pooled)}


def main(argv: list[str]) -> None:
    del argv
    import keras
    from sklearn.linear_model import LogisticRegression

    from bert_tf import checkpoints
    from bert_tf.model_source import resolve_config
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.tasks.glue import TextClassificationProcessor
    from bert_tf.text.tokenization import BertPreprocessor, load_vocab

    config = resolve_config(FLAGS.init_checkpoint, FLAGS.bert_config_file)
    keras.utils.set_random_seed(FLAGS.seed)
    encoder = build_encoder(config)
    if FLAGS.init_checkpoint:
        checkpoints.load_pretrained(encoder, FLAGS.init_checkpoint, allow_unexpected=True)
    preprocessor = BertPreprocessor(
        load_vocab(FLAGS.vocab_file),
        seq_length=FLAGS.max_seq_length,
        lower_case=FLAGS.do_lower_case,
    )
    processor = TextClassificationProcessor()
    splits = {split: processor.get_examples(FLAGS.data_dir, split) for split in ("train", "dev")}
    features, labels = {}, {}
    for split, examples in splits.items():
        features[split] = encode(encoder, preprocessor, [e.text_a for e in examples])
        labels[split] = [e.label for e in examples]
    result = {
        "init_checkpoint": FLAGS.init_checkpoint or f"random (seed {FLAGS.seed})",
        "train_examples": len(labels["train"]),
        "dev_examples": len(labels["dev"]),
    }
    for name in ("mean_pooled", "pooled_output"):
        probe = LogisticRegression(max_iter=3000).fit(features["train"][name], labels["train"])
        result[f"{name}_dev_accuracy"] = float(probe.score(features["dev"][name], labels["dev"]))
    report(result, FLAGS.output_file)


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
