r"""The reference run for the MiniLM fine-tuning result in docs/results.md: the same recipe as
`bert_tf.run_classifier`, done with keras-nlp's `BertClassifier` instead of our model.

The all-MiniLM-L6-v2 weights are read by our checkpoint code (parity-tested against HF to 1e-4)
and copied into a keras-nlp `BertBackbone` of the same shape; keras-nlp's own `BertTokenizer` /
`BertPreprocessor` tokenize; the optimizer is the same BERT AdamW schedule
(`bert_tf.training.optimization.create_optimizer`); Keras `fit` trains. It prints and writes
`{"eval_accuracy": ...}` for the task's dev split.

    python -m experiments.keras_nlp_reference --data_dir=en_polarity \
        --init_checkpoint=~/.cache/bert_tfx/minilm --max_seq_length=64 --train_batch_size=16 \
        --learning_rate=5e-5 --num_train_epochs=5 --seed=1 --output_file=ref.json
"""

from __future__ import annotations

import numpy as np
from absl import flags, logging

from bench import reference
from bert_tf import flags_util
from experiments import report

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`); called only when run as a program."""

    def define(kind, name, default, help_):
        getattr(flags, f"DEFINE_{kind}")(name, default, help=help_, flag_values=flag_values)

    define("string", "data_dir", None, "text_classification folder (train.tsv, dev.tsv).")
    define("string", "init_checkpoint", None, "HF BERT folder (config.json, weights, vocab.txt).")
    define("integer", "max_seq_length", 64, "Tokens per example.")
    define("integer", "train_batch_size", 16, "Examples per step.")
    define("float", "learning_rate", 5e-5, "Peak learning rate.")
    define("float", "num_train_epochs", 5.0, "Epochs.")
    define("float", "warmup_proportion", 0.1, "Fraction of steps with linear warmup.")
    define("integer", "seed", 1, "Seed of initialisation, dropout and shuffling.")
    define("string", "output_file", None, "Where the JSON result goes (optional).")


def keras_nlp_backbone(google_weights: dict[str, np.ndarray], config):
    """A keras-nlp `BertBackbone` of `config`'s shape holding google-named BERT weights."""
    backbone = reference.keras_nlp_backbone(config)
    names = {
        "token_embedding/embeddings": "bert/embeddings/word_embeddings",
        "position_embedding/embeddings": "bert/embeddings/position_embeddings",
        "segment_embedding/embeddings": "bert/embeddings/token_type_embeddings",
        "embeddings_layer_norm": "bert/embeddings/LayerNorm",
        "pooled_dense": "bert/pooler/dense",
    }
    for i in range(config.num_hidden_layers):
        layer = f"bert/encoder/layer_{i}"
        names |= {
            f"transformer_layer_{i}/self_attention_layer/query": f"{layer}/attention/self/query",
            f"transformer_layer_{i}/self_attention_layer/key": f"{layer}/attention/self/key",
            f"transformer_layer_{i}/self_attention_layer/value": f"{layer}/attention/self/value",
            f"transformer_layer_{i}/self_attention_layer/attention_output": (
                f"{layer}/attention/output/dense"
            ),
            f"transformer_layer_{i}/self_attention_layer_norm": f"{layer}/attention/output/LayerNorm",
            f"transformer_layer_{i}/feedforward_intermediate_dense": f"{layer}/intermediate/dense",
            f"transformer_layer_{i}/feedforward_output_dense": f"{layer}/output/dense",
            f"transformer_layer_{i}/feedforward_layer_norm": f"{layer}/output/LayerNorm",
        }
    for variable in backbone.weights:
        scope, _, leaf = variable.path.rpartition("/")
        google = names.get(variable.path) or f"{names[scope]}/{leaf}"
        # Google keeps attention kernels as [H, H]; keras-nlp splits the heads out. A plain
        # reshape is the exact conversion for both the q/k/v and the output projections.
        variable.assign(np.reshape(google_weights[google], variable.shape))
    return backbone


def main(argv: list[str]) -> None:
    del argv
    import keras
    import keras_nlp
    import tensorflow as tf

    from bert_tf import checkpoints
    from bert_tf.model_source import checkpoint_file, resolve_config
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.tasks.glue import TextClassificationProcessor
    from bert_tf.training.optimization import create_optimizer

    keras.utils.set_random_seed(FLAGS.seed)
    config = resolve_config(FLAGS.init_checkpoint, None)
    encoder = build_encoder(config)
    checkpoints.load_pretrained(encoder, FLAGS.init_checkpoint)
    backbone = keras_nlp_backbone(checkpoints.get_google_weights(encoder), config)
    probe = {
        "token_ids": tf.constant([[101, 1037, 2158, 2003, 5983, 2833, 1012, 102]]),
        "segment_ids": tf.zeros([1, 8], tf.int32),
        "padding_mask": tf.ones([1, 8], tf.int32),
    }
    ours = encoder(
        {
            "input_word_ids": probe["token_ids"],
            "input_type_ids": probe["segment_ids"],
            "input_mask": probe["padding_mask"],
        }
    )["sequence_output"]
    difference = float(np.max(np.abs(backbone(probe)["sequence_output"] - ours)))
    logging.info("keras-nlp backbone vs our encoder: max |difference| %.2e", difference)
    # keras-nlp's BERT uses the tanh approximation of GELU (ours and google's use erf), which
    # moves outputs by ~3e-3; a wrong weight mapping moves them by O(1).
    if difference > 2e-2:
        raise RuntimeError(f"weight copy is wrong: outputs differ by {difference}")
    tokenizer = keras_nlp.models.BertTokenizer(
        vocabulary=checkpoint_file(FLAGS.init_checkpoint, "vocab.txt"), lowercase=True
    )
    preprocessor = keras_nlp.models.BertPreprocessor(
        tokenizer, sequence_length=FLAGS.max_seq_length
    )

    processor = TextClassificationProcessor()
    labels = processor.get_labels(FLAGS.data_dir)
    train = processor.get_examples(FLAGS.data_dir, "train")
    dev = processor.get_examples(FLAGS.data_dir, "dev")
    steps = int(len(train) / FLAGS.train_batch_size * FLAGS.num_train_epochs)
    classifier = keras_nlp.models.BertClassifier(
        backbone, num_classes=len(labels), preprocessor=preprocessor, dropout=0.1
    )
    classifier.compile(
        optimizer=create_optimizer(
            FLAGS.learning_rate, steps, int(steps * FLAGS.warmup_proportion), "adamw"
        ),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )

    def dataset(examples, shuffle: bool) -> tf.data.Dataset:
        texts = [e.text_a for e in examples]
        ids = [labels.index(e.label) for e in examples]
        data = tf.data.Dataset.from_tensor_slices((texts, ids))
        if shuffle:
            data = data.shuffle(len(examples), seed=FLAGS.seed).repeat()
        return data.batch(FLAGS.train_batch_size)

    classifier.fit(dataset(train, True), steps_per_epoch=steps, epochs=1, verbose=2)
    _, accuracy = classifier.evaluate(dataset(dev, False), verbose=0)
    result = {
        "reference": "keras-nlp BertClassifier",
        "eval_accuracy": float(accuracy),
        "train_steps": steps,
        "seed": FLAGS.seed,
        "backbone_max_difference": difference,
    }
    report(result, FLAGS.output_file)


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
