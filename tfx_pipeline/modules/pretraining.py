"""Module file of the pretraining pipeline: Transform's `preprocessing_fn`, Trainer's `run_fn`.

Transform turns PretrainingExampleGen's text pairs into google-research's pretraining features:
WordPiece tokenization and packing with `bert_tf.text.tokenization.BertPreprocessor`
(tensorflow-text, vocab baked into the transform graph) and masked-LM masking with
`bert_tf.text.masking.MaskedLmMasker` (15%, 80/10/10), seeded per example by the ExampleGen's
`masking_seed`, so reruns and distributed workers produce the same examples.

The Trainer pretrains `BertPretrainer` with `bert_tf.training.Trainer` and exports:
- `serving_model_dir`: `serving.export_lib.export_encoder`'s raw-text SavedModel, embedding
  `BertPreprocessor` (the same layer and vocab as Transform, so ids cannot drift apart);
- `eval_model_dir/model.keras`: the Keras pretrainer, which PretrainingEvaluator scores on the
  transformed eval split.

Both read their options from `custom_config` (see `tfx_pipeline.configs`).
"""

from __future__ import annotations

import os

import tensorflow as tf

from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertPretrainer
from bert_tf.tasks.pretraining import pretraining_loss
from bert_tf.text.masking import MaskedLmMasker
from serving.export_lib import export_encoder
from tfx_pipeline import configs, trainer_lib

KERAS_MODEL_FILE = "model.keras"


def preprocessing_fn(inputs, custom_config):
    """Text pairs -> packed, masked pretraining features (int64, float32 weights)."""
    preprocessor = trainer_lib.preprocessor(custom_config)
    masker = MaskedLmMasker.from_vocab(
        preprocessor.tokenizer.vocabulary,
        whole_word_mask=bool(custom_config["do_whole_word_mask"]),
        max_predictions_per_seq=custom_config["max_predictions_per_seq"],
        masked_lm_prob=custom_config["masked_lm_prob"],
    )
    # SchemaGen(infer_feature_shape=True) makes each text a [batch, 1] column.
    packed = preprocessor((tf.reshape(inputs["text_a"], [-1]), tf.reshape(inputs["text_b"], [-1])))
    masked = masker(packed["input_word_ids"], inputs["masking_seed"])
    seq, pred = custom_config["max_seq_length"], custom_config["max_predictions_per_seq"]
    outputs = {
        "input_word_ids": (masked["input_ids"], seq),
        "input_mask": (packed["input_mask"], seq),
        "input_type_ids": (packed["input_type_ids"], seq),
        "masked_lm_positions": (masked["masked_lm_positions"], pred),
        "masked_lm_ids": (masked["masked_lm_ids"], pred),
        "masked_lm_weights": (masked["masked_lm_weights"], pred),
    }
    # Static shapes let TFT write fixed-length features; TFT stores ints as int64.
    features = {
        name: tf.ensure_shape(
            tf.cast(value, tf.float32 if value.dtype.is_floating else tf.int64), [None, width]
        )
        for name, (value, width) in outputs.items()
    }
    features["next_sentence_labels"] = tf.reshape(inputs["next_sentence_labels"], [-1])
    return features


def run_fn(fn_args):
    """Pretrains for `fn_args.train_steps` steps, then exports (see the module docstring)."""
    import tensorflow_transform as tft  # here: only the Trainer needs it

    options = trainer_lib.training_options(fn_args.custom_config)
    options["learning_rate"] = configs.pretraining_learning_rate(options)
    preprocessor = trainer_lib.preprocessor(options)
    feature_spec = tft.TFTransformOutput(fn_args.transform_graph_path).transformed_feature_spec()
    dataset = trainer_lib.transformed_dataset(
        fn_args.train_files,
        feature_spec,
        options["train_batch_size"],
        training=True,
        seed=options["seed"],
    )
    init_checkpoint = options.get("init_checkpoint") or None
    # The checkpoint's own config when it has one (continued pretraining), else the preset.
    config = trainer_lib.encoder_config(
        init_checkpoint, options, preprocessor.tokenizer.vocabulary_size
    )
    model = trainer_lib.train(
        lambda: BertPretrainer(build_encoder(config)),
        pretraining_loss,
        dataset,
        options,
        fn_args.train_steps,
        fn_args.model_run_dir,
        init_checkpoint=init_checkpoint,
    )
    tf.io.gfile.makedirs(fn_args.eval_model_dir)
    model.save(os.path.join(fn_args.eval_model_dir, KERAS_MODEL_FILE))
    trainer_lib.export_serving_model(export_encoder, fn_args.serving_model_dir, model, preprocessor)
