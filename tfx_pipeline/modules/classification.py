"""Module file of the fine-tuning pipeline: Transform's `preprocessing_fn`, Trainer's `run_fn`.

Transform tokenizes and packs `text_a` (and `text_b` when not "") with
`bert_tf.text.tokenization.pair_features` on a `BertPreprocessor`: the very function the exported
model's signatures run, so training and serving ids agree by construction.

The Trainer fine-tunes `BertClassifier` (regression: one output) with `bert_tf.training.Trainer`
and `run_classifier`'s loss, warm-started from the Trainer's `base_model` (an imported checkpoint
in any format `load_pretrained` reads; its config beside it sets the architecture, else
`preset`), and exports `serving.export.export_classifier`'s raw-text SavedModel, whose
`classify` (regression: `regress`) signature TFMA's Evaluator scores; a single-sentence task's
`serving_default` takes `text_a` alone.
"""

from __future__ import annotations

import tensorflow as tf

from bert_tf.modeling.encoder import INPUT_NAMES, build_encoder
from bert_tf.modeling.models import BertClassifier
from bert_tf.tasks import glue
from bert_tf.tasks.classification import classification_loss_fn
from bert_tf.text.tokenization import pair_features
from serving.export import export_classifier
from tfx_pipeline import trainer_lib


def preprocessing_fn(inputs, custom_config):
    """Raw `text_a`, `text_b`, `label` -> packed encoder inputs (int64) and `label`."""
    features = pair_features(
        trainer_lib.preprocessor(custom_config),
        tf.reshape(inputs["text_a"], [-1]),  # SchemaGen's [batch, 1] text columns
        tf.reshape(inputs["text_b"], [-1]),
    )
    seq = custom_config["max_seq_length"]
    outputs = {k: tf.ensure_shape(tf.cast(v, tf.int64), [None, seq]) for k, v in features.items()}
    outputs["label"] = tf.reshape(inputs["label"], [-1])
    return outputs


def run_fn(fn_args):
    """Fine-tunes for `trainer_lib.num_train_steps` steps (the custom_config's num_train_epochs
    unless the Trainer's train_args set a step count), exports the raw-text classifier."""
    import tensorflow_transform as tft  # here: only the Trainer needs it

    options = trainer_lib.training_options(fn_args.custom_config)
    processor = glue.get_processor(options["task_name"])
    label_names = processor.get_labels(options["data_root"])
    num_classes = 1 if processor.is_regression else len(label_names)
    preprocessor = trainer_lib.preprocessor(options)
    feature_spec = tft.TFTransformOutput(fn_args.transform_graph_path).transformed_feature_spec()
    dataset = trainer_lib.transformed_dataset(
        fn_args.train_files,
        feature_spec,
        options["train_batch_size"],
        training=True,
        seed=options["seed"],
    ).map(lambda batch: ({k: batch[k] for k in INPUT_NAMES}, batch["label"]))

    init_checkpoint, config = trainer_lib.warm_start(
        fn_args.base_model, options["preset"], preprocessor.tokenizer.vocabulary_size
    )
    model = trainer_lib.train(
        lambda: BertClassifier(build_encoder(config), num_classes),
        classification_loss_fn(num_classes),
        dataset,
        options,
        trainer_lib.num_train_steps(fn_args, options),
        fn_args.model_run_dir,
        init_checkpoint=init_checkpoint,
    )
    trainer_lib.export_serving_model(
        export_classifier,
        fn_args.serving_model_dir,
        model,
        preprocessor,
        label_names=label_names or None,
        regression=processor.is_regression,
        # A model trained on single sentences serves `text_a` alone (as run_classifier's export).
        single_segment=processor.single_segment(options["data_root"]),
    )
