"""The two TFX pipelines, wired from components (no logic here: see components/ and modules/).

- `create_pretraining_pipeline`: PretrainingExampleGen -> StatisticsGen -> SchemaGen ->
  Transform -> Trainer -> PretrainingEvaluator (vs the latest blessed model) -> Pusher.
- `create_classification_pipeline`: TextClassificationExampleGen -> StatisticsGen -> SchemaGen
  -> Transform -> Trainer (warm-started from an imported checkpoint) -> Evaluator (TFMA, vs the
  latest blessed model) -> Pusher.

Pusher writes TF Serving's layout: `<serving_model_dir>/<model_name>/<version>/`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import tensorflow_model_analysis as tfma
from tfx import v1 as tfx

from bert_tf import glue
from tfx_pipeline import configs
from tfx_pipeline.components.pretraining_evaluator import PretrainingEvaluator
from tfx_pipeline.components.pretraining_example_gen import PretrainingExampleGen
from tfx_pipeline.components.text_classification_example_gen import TextClassificationExampleGen


def _latest_blessed_model():
    return tfx.dsl.Resolver(
        strategy_class=tfx.dsl.experimental.LatestBlessedModelStrategy,
        model=tfx.dsl.Channel(type=tfx.types.standard_artifacts.Model),
        model_blessing=tfx.dsl.Channel(type=tfx.types.standard_artifacts.ModelBlessing),
    ).with_id("latest_blessed_model_resolver")


def _pusher(trainer, blessing, serving_model_dir: str, model_name: str):
    return tfx.components.Pusher(
        model=trainer.outputs["model"],
        model_blessing=blessing,
        push_destination=tfx.proto.PushDestination(
            filesystem=tfx.proto.PushDestination.Filesystem(
                base_directory=os.path.join(serving_model_dir, model_name)
            )
        ),
    )


def _pipeline(name, root, components, metadata_connection_config, beam_pipeline_args):
    return tfx.dsl.Pipeline(
        pipeline_name=name,
        pipeline_root=root,
        components=components,
        enable_cache=True,
        metadata_connection_config=metadata_connection_config,
        beam_pipeline_args=list(beam_pipeline_args),
    )


def create_pretraining_pipeline(
    pipeline_root: str,
    data_root: str,
    vocab_file: str,
    serving_model_dir: str,
    model_name: str,
    options: configs.PretrainingOptions,
    pipeline_name: str = configs.PRETRAINING_PIPELINE_NAME,
    metadata_connection_config=None,
    beam_pipeline_args: Sequence[str] = configs.DEFAULT_BEAM_PIPELINE_ARGS,
) -> tfx.dsl.Pipeline:
    """BERT pretraining on the text corpus in `data_root` (BERT's one-sentence-per-line format)."""
    example_gen = PretrainingExampleGen(
        input_base=data_root,
        vocab_file=vocab_file,
        do_lower_case=options.do_lower_case,
        max_seq_length=options.max_seq_length,
        dupe_factor=options.dupe_factor,
        short_seq_prob=options.short_seq_prob,
        random_seed=options.random_seed,
    )
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    schema_gen = tfx.components.SchemaGen(
        statistics=statistics_gen.outputs["statistics"], infer_feature_shape=True
    )
    config = configs.custom_config(options, vocab_file=vocab_file)
    transform = tfx.components.Transform(
        examples=example_gen.outputs["examples"],
        schema=schema_gen.outputs["schema"],
        module_file=configs.PRETRAINING_MODULE_FILE,
        custom_config=config,
    )
    trainer = tfx.components.Trainer(
        module_file=configs.PRETRAINING_MODULE_FILE,
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        schema=schema_gen.outputs["schema"],
        train_args=tfx.proto.TrainArgs(num_steps=options.train_steps),
        eval_args=tfx.proto.EvalArgs(num_steps=options.eval_steps),
        custom_config=config,
    )
    resolver = _latest_blessed_model()
    evaluator = PretrainingEvaluator(
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        model=trainer.outputs["model"],
        baseline_model=resolver.outputs["model"],
        min_masked_lm_accuracy=options.min_masked_lm_accuracy,
        min_next_sentence_accuracy=options.min_next_sentence_accuracy,
        max_decrease=options.max_decrease,
        batch_size=options.eval_batch_size,
        eval_steps=options.eval_steps,
    )
    pusher = _pusher(trainer, evaluator.outputs["blessing"], serving_model_dir, model_name)
    return _pipeline(
        pipeline_name,
        pipeline_root,
        [
            example_gen,
            statistics_gen,
            schema_gen,
            transform,
            trainer,
            resolver,
            evaluator,
            pusher,
        ],
        metadata_connection_config,
        beam_pipeline_args,
    )


def classification_eval_config(options: configs.ClassificationOptions) -> tfma.EvalConfig:
    """TFMA on the exported `classify` signature: accuracy, blessed above `min_accuracy` and
    at most `max_decrease` below the latest blessed model."""
    return tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(
                signature_name="classify",
                label_key="label",
                prediction_key="scores",
                model_type="tf_generic",  # a Keras 3 export: skip TFMA's Keras 2 loading attempt
            )
        ],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[
            tfma.MetricsSpec(
                metrics=[
                    tfma.MetricConfig(class_name="ExampleCount"),
                    tfma.MetricConfig(
                        class_name="SparseCategoricalAccuracy",
                        threshold=tfma.MetricThreshold(
                            value_threshold=tfma.GenericValueThreshold(
                                lower_bound={"value": options.min_accuracy}
                            ),
                            change_threshold=tfma.GenericChangeThreshold(
                                direction=tfma.MetricDirection.HIGHER_IS_BETTER,
                                absolute={"value": -options.max_decrease},
                            ),
                        ),
                    ),
                ]
            )
        ],
    )


def create_classification_pipeline(
    pipeline_root: str,
    data_root: str,
    vocab_file: str,
    serving_model_dir: str,
    model_name: str,
    init_checkpoint: str,
    options: configs.ClassificationOptions,
    pipeline_name: str = configs.CLASSIFICATION_PIPELINE_NAME,
    metadata_connection_config=None,
    beam_pipeline_args: Sequence[str] = configs.DEFAULT_BEAM_PIPELINE_ARGS,
) -> tfx.dsl.Pipeline:
    """Fine-tuning on a text-classification task folder, warm-started from `init_checkpoint`."""
    if glue.get_processor(options.task_name).is_regression:
        raise ValueError(
            f"--task_name={options.task_name} is a regression task; the classification pipeline "
            "blesses on accuracy and takes classification tasks only"
        )
    example_gen = TextClassificationExampleGen(input_base=data_root, task_name=options.task_name)
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    schema_gen = tfx.components.SchemaGen(
        statistics=statistics_gen.outputs["statistics"], infer_feature_shape=True
    )
    config = configs.custom_config(options, vocab_file=vocab_file, data_root=data_root)
    transform = tfx.components.Transform(
        examples=example_gen.outputs["examples"],
        schema=schema_gen.outputs["schema"],
        module_file=configs.CLASSIFICATION_MODULE_FILE,
        custom_config=config,
    )
    pretrained = tfx.dsl.Importer(
        source_uri=init_checkpoint, artifact_type=tfx.types.standard_artifacts.Model
    ).with_id("pretrained_checkpoint_importer")
    trainer = tfx.components.Trainer(
        module_file=configs.CLASSIFICATION_MODULE_FILE,
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        schema=schema_gen.outputs["schema"],
        base_model=pretrained.outputs["result"],
        train_args=tfx.proto.TrainArgs(num_steps=options.train_steps),
        eval_args=tfx.proto.EvalArgs(num_steps=options.eval_steps),
        custom_config=config,
    )
    resolver = _latest_blessed_model()
    evaluator = tfx.components.Evaluator(
        examples=example_gen.outputs["examples"],
        model=trainer.outputs["model"],
        baseline_model=resolver.outputs["model"],
        eval_config=classification_eval_config(options),
    )
    pusher = _pusher(trainer, evaluator.outputs["blessing"], serving_model_dir, model_name)
    return _pipeline(
        pipeline_name,
        pipeline_root,
        [
            example_gen,
            statistics_gen,
            schema_gen,
            transform,
            pretrained,
            trainer,
            resolver,
            evaluator,
            pusher,
        ],
        metadata_connection_config,
        beam_pipeline_args,
    )
