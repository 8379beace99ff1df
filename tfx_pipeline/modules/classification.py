"""Module file of the fine-tuning pipeline: Transform's `preprocessing_fn`, Trainer's `run_fn`,
Tuner's `tuner_fn`.

Transform tokenizes and packs `text_a` (and `text_b` when not "") with
`bert_tf.text.tokenization.pair_features` on a `BertPreprocessor`: the very function the exported
model's signatures run, so training and serving ids agree by construction.

The Trainer fine-tunes `BertClassifier` (regression: one output) with `bert_tf.training.Trainer`
and `run_classifier`'s loss, warm-started from the Trainer's `base_model` (an imported checkpoint
in any format `load_pretrained` reads; its config beside it sets the architecture, else
`preset`), and exports `serving.export_lib.export_classifier`'s raw-text SavedModel, whose
`classify` (regression: `regress`) signature TFMA's Evaluator scores; a single-sentence task's
`serving_default` takes `text_a` alone. With `--tune`, the Tuner first fine-tunes once per
combination of the BERT paper's grid (`tfx_pipeline.tuning`) and the Trainer trains with the
best one's values.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from bert_tf import training
from bert_tf.modeling.encoder import INPUT_NAMES, build_encoder
from bert_tf.modeling.models import BertClassifier
from bert_tf.tasks import glue
from bert_tf.tasks.classification import classification_loss_fn
from bert_tf.text.tokenization import pair_features
from serving.export_lib import export_classifier
from tfx_pipeline import trainer_lib, tuning


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


def _fine_tune(fn_args, options: dict, output_dir: str):
    """Fine-tunes `BertClassifier` on the Transform'd train split with `options` for
    `trainer_lib.num_train_steps` steps (the options' num_train_epochs unless the component's
    train_args set a step count), checkpoints in `output_dir`: (model, preprocessor, labels)."""
    processor = glue.get_processor(options["task_name"])
    label_names = processor.get_labels(options["data_root"])
    num_classes = 1 if processor.is_regression else len(label_names)
    preprocessor = trainer_lib.preprocessor(options)
    dataset = trainer_lib.transformed_dataset(
        fn_args.train_files,
        _feature_spec(fn_args),
        options["train_batch_size"],
        training=True,
        seed=options["seed"],
    ).map(lambda batch: ({k: batch[k] for k in INPUT_NAMES}, batch["label"]))

    init_checkpoint, config = trainer_lib.warm_start(
        fn_args.base_model, options, preprocessor.tokenizer.vocabulary_size
    )
    model = trainer_lib.train(
        lambda: BertClassifier(build_encoder(config), num_classes),
        classification_loss_fn(num_classes),
        dataset,
        options,
        trainer_lib.num_train_steps(fn_args, options),
        output_dir,
        init_checkpoint=init_checkpoint,
    )
    return model, preprocessor, label_names


def _feature_spec(fn_args) -> dict:
    import tensorflow_transform as tft  # here: only the Tuner and Trainer need it

    return tft.TFTransformOutput(fn_args.transform_graph_path).transformed_feature_spec()


def run_fn(fn_args):
    """Fine-tunes with the custom_config's options (the Tuner's best hyperparameters over them
    when the pipeline tunes) and exports the raw-text classifier."""
    options = tuning.apply_hyperparameters(
        trainer_lib.training_options(fn_args.custom_config), fn_args.hyperparameters
    )
    model, preprocessor, label_names = _fine_tune(fn_args, options, fn_args.model_run_dir)
    processor = glue.get_processor(options["task_name"])
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


def tuner_fn(fn_args):
    """The BERT paper's search (`tfx_pipeline.tuning`): each trial fine-tunes as `run_fn` does
    and scores the Transform'd dev split with the task's main official metric."""
    options = trainer_lib.training_options(fn_args.custom_config)
    task_name = options["task_name"]
    processor = glue.get_processor(task_name)
    metric = processor.metrics[0]
    # The dev split and its labels, read once for all trials.
    dev = trainer_lib.transformed_dataset(
        fn_args.eval_files, _feature_spec(fn_args), options["eval_batch_size"], training=False
    )
    labels = np.concatenate([batch["label"].numpy() for batch in dev])
    dev_inputs = dev.map(lambda batch: {k: batch[k] for k in INPUT_NAMES})

    def train_and_score(values: dict, trial_dir: str) -> float:
        model, _, _ = _fine_tune(fn_args, {**options, **values}, trial_dir)
        logits = training.predict(model, dev_inputs)
        predictions = logits[:, 0] if processor.is_regression else np.argmax(logits, axis=-1)
        return glue.compute_metrics(task_name, predictions, labels)[metric]

    return tuning.tuner_fn_result(train_and_score, f"dev_{metric}", options, fn_args.working_dir)
