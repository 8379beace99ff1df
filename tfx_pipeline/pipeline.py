"""The TFX pipelines, wired from components (no logic here: see components/, modules/ and
tfma_config.py).

- `create_pretraining_pipeline`: PretrainingExampleGen -> StatisticsGen -> SchemaGen ->
  ExampleValidator -> Transform -> Trainer -> PretrainingEvaluator (vs the model serving now)
  and ServingCheck -> Pusher.
- `create_classification_pipeline`: TextClassificationExampleGen -> StatisticsGen -> SchemaGen
  -> ExampleValidator -> Transform -> [Tuner ->] Trainer (warm-started from an imported
  checkpoint) -> Evaluator (TFMA: the task's official metrics, vs thresholds, the eval split's
  constant predictor and the model serving now) and ServingCheck -> Pusher; with `bulk_inference`, also UnlabelledExampleGen (the task's test
  file) -> BulkInferrer (the blessed model's predictions beside each input text).
- `create_squad_pipeline`: SquadExampleGen (doc-stride windows) -> StatisticsGen -> SchemaGen
  -> ExampleValidator -> [Tuner ->] Trainer (warm-started from an imported checkpoint) ->
  SquadEvaluator (official EM/F1 of the exported model, vs a threshold, a data baseline and the
  model serving now) and ServingCheck -> Pusher. No Transform: see modules/squad.py.

With `tune` (classify, squad), TFX's Tuner (`components/tuner.py`, `tuning.py`) first fine-tunes
once per combination of the BERT paper's grid (learning rate x batch size x epochs, narrowed by
the options) and scores each on the dev split with the task's official metric; the Trainer then
trains with the best combination (its `hyperparameters` input).

Every pipeline validates its data before anything trains on it: the schema is SchemaGen's
(inferred from this run's statistics) or, with `schema_dir`, a curated one (ImportSchemaGen,
e.g. a first run's SchemaGen output); ExampleValidator (`components/example_validator.py`)
stops the run on an anomaly, naming it: one against the schema, an empty text, or the label
drifting from the previous span it accepted beyond the options' L-infinity / Jensen-Shannon
thresholds.

Pusher writes TF Serving's layout: `<serving_model_dir>/<model_name>/<version>/`. Every
evaluator's baseline is `ServingBaseline`'s copy of the highest complete version there (what TF
Serving serves now), so a model worse than the serving one is never pushed; before the first
push only the thresholds apply. Every evaluator's thresholds include the eval split's own
baseline, what a constant predictor scores on it (the majority class, the mean label, the most
frequent masked token, no answer or a fixed span) plus a margin: a model that learned nothing
is not blessed, whatever the data. Nor is a model identical to the serving one (a rerun that trained
again on unchanged data): the Pusher (`serving_baseline.Pusher`) skips it, "same model as
version N". Nor is a model the model server cannot serve: ServingCheck
(`components/serving_check.py`, TFX's InfraValidator without Docker) serves the export, sends
its warmup requests over gRPC and REST and compares the answers with the export's in-process
ones; the Pusher pushes only with its InfraBlessing.

With `input_fingerprint` (open-source Kubeflow Pipelines, whose driver skips ExampleGen's
fingerprinting preCacheCheck), an `InputFingerprint` task first fingerprints `data_root` and
passes it to every ExampleGen as a parameter, so KFP's cache key changes with the data
(`components/input_fingerprint.py`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

# TFX's own modules, not `tfx.v1`: that also imports google-cloud-aiplatform for its Vertex
# extensions, ~9 s of every run's start (bench.run --suite=pipeline).
from tfx.components import SchemaGen, StatisticsGen, Trainer, Transform
from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen
from tfx.dsl.components.common.importer import Importer
from tfx.orchestration.pipeline import Pipeline
from tfx.proto import pusher_pb2, trainer_pb2
from tfx.types import standard_artifacts

from bert_tf.tasks import glue
from tfx_pipeline import configs, tfma_config
from tfx_pipeline.components import distributed_trainer
from tfx_pipeline.components.bulk_inferrer import BulkInferrer
from tfx_pipeline.components.example_validator import ExampleValidator
from tfx_pipeline.components.input_fingerprint import InputFingerprint
from tfx_pipeline.components.pretraining_evaluator import PretrainingEvaluator
from tfx_pipeline.components.pretraining_example_gen import PretrainingExampleGen
from tfx_pipeline.components.serving_baseline import Pusher, ServingBaseline
from tfx_pipeline.components.serving_check import ServingCheck
from tfx_pipeline.components.squad_evaluator import SquadEvaluator
from tfx_pipeline.components.squad_example_gen import SquadExampleGen
from tfx_pipeline.components.text_classification_example_gen import (
    UNLABELLED_SPLITS,
    TextClassificationExampleGen,
)
from tfx_pipeline.components.tfma_evaluator import Evaluator
from tfx_pipeline.components.tuner import Tuner


def _validated(
    example_gen,
    schema_dir: str,
    pipeline_root: str,
    options: configs.TrainingOptions,
    drift_features: Sequence[str] = (),
    splits_with_other_features: Sequence[str] = (),
):
    """StatisticsGen, the schema (SchemaGen's, or ImportSchemaGen's of `<schema_dir>/schema.pbtxt`)
    and the ExampleValidator gate: [statistics_gen, schema_gen, example_validator]. The gate also
    fails on empty texts (it reads the examples) and on `drift_features` (and any feature the
    schema gives a drift_comparator) drifting from the statistics of the previous span it accepted
    (kept under `<pipeline_root>/ExampleValidator/accepted_statistics`). Splits whose records have
    other features than the training split's are left out of the schema and the check (SQuAD's
    eval split)."""
    excluded = list(splits_with_other_features)
    statistics_gen = StatisticsGen(examples=example_gen.outputs["examples"])
    if schema_dir:
        schema_gen = ImportSchemaGen(schema_file=os.path.join(schema_dir, configs.SCHEMA_FILE))
    else:
        schema_gen = SchemaGen(
            statistics=statistics_gen.outputs["statistics"],
            infer_feature_shape=True,
            exclude_splits=excluded,
        )
    validator = ExampleValidator(
        statistics=statistics_gen.outputs["statistics"],
        schema=schema_gen.outputs["schema"],
        examples=example_gen.outputs["examples"],
        exclude_splits=excluded,
        baseline_dir=os.path.join(pipeline_root, "ExampleValidator", "accepted_statistics"),
        drift_features=list(drift_features),
        drift_linf_threshold=options.drift_linf_threshold,
        drift_js_threshold=options.drift_js_threshold,
    )
    return [statistics_gen, schema_gen, validator]


def _transform(example_gen, validated: list, preprocessing_fn: str, custom_config: dict):
    """Transform of the validated examples: it runs only after ExampleValidator passed."""
    _, schema_gen, validator = validated
    # No pre/post-transform statistics: StatisticsGen already describes the raw text, and
    # statistics of token ids cost as much as the transform itself while telling little.
    transform = Transform(
        examples=example_gen.outputs["examples"],
        schema=schema_gen.outputs["schema"],
        preprocessing_fn=preprocessing_fn,
        custom_config=custom_config,
        disable_statistics=True,
    )
    transform.add_upstream_node(validator)
    return transform


def _trainer(
    run_fn: str,
    options: configs.TrainingOptions,
    custom_config: dict,
    trainer_cluster: dict | None = None,
    **inputs,
):
    """TFX's Trainer on `run_fn` (by import path) with `inputs` (examples, transform_graph, ...);
    `options.train_steps` 0 means num_train_epochs epochs (trainer_lib.num_train_steps).
    With `trainer_cluster` (runners/kubeflow.trainer_cluster(): custom_config entries) a Trainer
    spanning hosts: a TFJob (open-source KFP) or TFX's Vertex training extension, keeping the
    task name "Trainer"."""
    if not trainer_cluster:
        return Trainer(run_fn=run_fn, **_training_args(options, custom_config), **inputs)
    args = _training_args(options, {**custom_config, **trainer_cluster})
    if distributed_trainer.TFJOB_KEY in trainer_cluster:
        return distributed_trainer.TFJobTrainer(run_fn=run_fn, **args, **inputs).with_id("Trainer")
    # Loads google-cloud-aiplatform (~8 s): only when compiling a Vertex Trainer.
    from tfx_pipeline.components import vertex_trainer

    return vertex_trainer.VertexTrainer(run_fn=run_fn, **args, **inputs).with_id("Trainer")


def _training_args(options: configs.TrainingOptions, custom_config: dict) -> dict:
    return {
        "train_args": trainer_pb2.TrainArgs(num_steps=options.train_steps),
        "eval_args": trainer_pb2.EvalArgs(num_steps=options.eval_steps),
        "custom_config": custom_config,
    }


def _tuned_trainer(
    run_fn: str,
    tuner_fn: str,
    options: configs.FineTuningOptions,
    custom_config: dict,
    trainer_cluster: dict | None = None,
    **inputs,
) -> list:
    """[Trainer], or with `options.tune` [Tuner, Trainer]: the Tuner (`tuner_fn`, the same
    inputs) searches the BERT paper's grid on the dev split and the Trainer trains with its
    best hyperparameters. `trainer_cluster`: the Trainer's hosts (_trainer); the Tuner's trials
    stay on one host."""
    if not options.tune:
        return [_trainer(run_fn, options, custom_config, trainer_cluster, **inputs)]
    tuner = Tuner(tuner_fn=tuner_fn, **_training_args(options, custom_config), **inputs)
    trainer = _trainer(
        run_fn,
        options,
        custom_config,
        trainer_cluster,
        hyperparameters=tuner.outputs["best_hyperparameters"],
        **inputs,
    )
    return [tuner, trainer]


def _transformed(transform, validated: list) -> dict:
    """The Trainer's inputs from Transform: its examples and graph, and the raw schema."""
    return {
        "examples": transform.outputs["transformed_examples"],
        "transform_graph": transform.outputs["transform_graph"],
        "schema": validated[1].outputs["schema"],
    }


def _pretrained_checkpoint(init_checkpoint: str):
    return Importer(source_uri=init_checkpoint, artifact_type=standard_artifacts.Model).with_id(
        "pretrained_checkpoint_importer"
    )


def _evaluate_and_push(
    trainer, evaluator_class, serving_model_dir: str, model_name: str, **evaluator_args
) -> list:
    """ServingBaseline (the version serving now under the Pusher's base directory),
    `evaluator_class` scoring the trainer's model against it, ServingCheck (the model server
    loads the export and answers as it does in-process), and the Pusher of the model both
    bless unless that model is the serving one. No MLMD resolver: open-source KFP cannot run
    one (see ServingBaseline)."""
    base_directory = os.path.join(serving_model_dir, model_name)
    check = ServingCheck(model=trainer.outputs["model"], model_name=model_name)
    baseline = ServingBaseline(model=trainer.outputs["model"], serving_model_dir=base_directory)
    evaluator = evaluator_class(
        model=trainer.outputs["model"],
        baseline_model=baseline.outputs["baseline_model"],
        **evaluator_args,
    )
    pusher = Pusher(  # TFX's, skipping a model identical to the serving one
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        infra_blessing=check.outputs["blessing"],
        baseline_model=baseline.outputs["baseline_model"],
        push_destination=pusher_pb2.PushDestination(
            filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=base_directory)
        ),
    )
    return [baseline, evaluator, check, pusher]


def _fingerprint(data_root: str, input_fingerprint: bool) -> tuple[list, dict]:
    """([InputFingerprint] or [], the ExampleGens' extra arguments)."""
    if not input_fingerprint:
        return [], {}
    fingerprint = InputFingerprint(input_base=data_root)
    return [fingerprint], {"input_fingerprint": fingerprint.value()}


def _pipeline(name, root, components, metadata_connection_config, beam_pipeline_args):
    return Pipeline(
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
    schema_dir: str = "",
    input_fingerprint: bool = False,
    trainer_cluster: dict | None = None,
) -> Pipeline:
    """BERT pretraining on the text corpus in `data_root` (BERT's one-sentence-per-line format)."""
    fingerprint, fingerprinted = _fingerprint(data_root, input_fingerprint)
    example_gen = PretrainingExampleGen(
        input_base=data_root,
        vocab_file=vocab_file,
        do_lower_case=options.do_lower_case,
        max_seq_length=options.max_seq_length,
        dupe_factor=options.dupe_factor,
        short_seq_prob=options.short_seq_prob,
        seed=options.seed,
        **fingerprinted,
    )
    validated = _validated(
        example_gen, schema_dir, pipeline_root, options, drift_features=["next_sentence_labels"]
    )
    config = configs.custom_config(options, vocab_file=vocab_file)
    transform = _transform(example_gen, validated, configs.PRETRAINING_PREPROCESSING_FN, config)
    trainer = _trainer(
        configs.PRETRAINING_RUN_FN,
        options,
        config,
        trainer_cluster,
        **_transformed(transform, validated),
    )
    evaluate_and_push = _evaluate_and_push(
        trainer,
        PretrainingEvaluator,
        serving_model_dir,
        model_name,
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        min_masked_lm_accuracy=options.min_masked_lm_accuracy,
        min_next_sentence_accuracy=options.min_next_sentence_accuracy,
        min_masked_lm_gain=options.min_masked_lm_gain,
        min_next_sentence_gain=options.min_next_sentence_gain,
        max_decrease=options.max_decrease,
        batch_size=options.eval_batch_size,
        eval_steps=options.eval_steps,
        init_checkpoint=options.init_checkpoint,
    )
    return _pipeline(
        pipeline_name,
        pipeline_root,
        [*fingerprint, example_gen, *validated, transform, trainer, *evaluate_and_push],
        metadata_connection_config,
        beam_pipeline_args,
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
    schema_dir: str = "",
    input_fingerprint: bool = False,
    trainer_cluster: dict | None = None,
) -> Pipeline:
    """Fine-tuning on a GLUE or text-classification task folder (classification, or STS-B
    regression), warm-started from `init_checkpoint`; blessed on the task's main metric."""
    fingerprint, fingerprinted = _fingerprint(data_root, input_fingerprint)
    example_gen = TextClassificationExampleGen(
        input_base=data_root, task_name=options.task_name, **fingerprinted
    )
    validated = _validated(
        example_gen, schema_dir, pipeline_root, options, drift_features=["label"]
    )
    config = configs.custom_config(options, vocab_file=vocab_file, data_root=data_root)
    transform = _transform(example_gen, validated, configs.CLASSIFICATION_PREPROCESSING_FN, config)
    pretrained = _pretrained_checkpoint(init_checkpoint)
    training = _tuned_trainer(
        configs.CLASSIFICATION_RUN_FN,
        configs.CLASSIFICATION_TUNER_FN,
        options,
        config,
        trainer_cluster,
        base_model=pretrained.outputs["result"],
        **_transformed(transform, validated),
    )
    trainer = training[-1]
    evaluate_and_push = _evaluate_and_push(
        trainer,
        Evaluator,
        serving_model_dir,
        model_name,
        examples=example_gen.outputs["examples"],
        eval_config=tfma_config.classification_eval_config(
            options, tfma_config.task_labels(options.task_name, data_root)
        ),
        min_baseline_gain=options.min_baseline_gain,
    )
    scoring = []
    if options.bulk_inference:
        unlabelled = TextClassificationExampleGen(
            input_base=data_root,
            task_name=options.task_name,
            splits=UNLABELLED_SPLITS,
            **fingerprinted,
        ).with_id("UnlabelledExampleGen")
        _, evaluator, *_ = evaluate_and_push
        scoring = [
            unlabelled,
            BulkInferrer(
                examples=unlabelled.outputs["examples"],
                model=trainer.outputs["model"],
                model_blessing=evaluator.outputs["blessing"],
                regression=glue.get_processor(options.task_name).is_regression,
            ),
        ]
    return _pipeline(
        pipeline_name,
        pipeline_root,
        [
            *fingerprint,
            example_gen,
            *validated,
            transform,
            pretrained,
            *training,
            *evaluate_and_push,
            *scoring,
        ],
        metadata_connection_config,
        beam_pipeline_args,
    )


def create_squad_pipeline(
    pipeline_root: str,
    data_root: str,
    vocab_file: str,
    serving_model_dir: str,
    model_name: str,
    init_checkpoint: str,
    options: configs.SquadOptions,
    pipeline_name: str = configs.SQUAD_PIPELINE_NAME,
    metadata_connection_config=None,
    beam_pipeline_args: Sequence[str] = configs.DEFAULT_BEAM_PIPELINE_ARGS,
    schema_dir: str = "",
    input_fingerprint: bool = False,
    trainer_cluster: dict | None = None,
) -> Pipeline:
    """SQuAD fine-tuning on the `train*.json` / `dev*.json` files in `data_root`, warm-started
    from `init_checkpoint`; blessed on the official F1 on the dev questions."""
    fingerprint, fingerprinted = _fingerprint(data_root, input_fingerprint)
    example_gen = SquadExampleGen(
        input_base=data_root,
        vocab_file=vocab_file,
        do_lower_case=options.do_lower_case,
        max_seq_length=options.max_seq_length,
        doc_stride=options.doc_stride,
        max_query_length=options.max_query_length,
        version_2_with_negative=options.version_2_with_negative,
        **fingerprinted,
    )
    pretrained = _pretrained_checkpoint(init_checkpoint)
    # The Trainer reads ExampleGen's windows directly: doc-stride windowing and answer-span
    # mapping are not a per-example TFT preprocessing_fn (see modules/squad.py).
    training = _tuned_trainer(
        configs.SQUAD_RUN_FN,
        configs.SQUAD_TUNER_FN,
        options,
        configs.custom_config(options, vocab_file=vocab_file),
        trainer_cluster,
        examples=example_gen.outputs["examples"],
        base_model=pretrained.outputs["result"],
    )
    trainer = training[-1]
    # The eval split keeps the raw questions, contexts and answers for the official scorer.
    # No default drift features: the windows' token ids and answer positions vary with the
    # documents; a --schema_dir schema's drift_comparator still applies.
    validated = _validated(
        example_gen, schema_dir, pipeline_root, options, splits_with_other_features=["eval"]
    )
    training[0].add_upstream_node(validated[-1])
    evaluate_and_push = _evaluate_and_push(
        trainer,
        SquadEvaluator,
        serving_model_dir,
        model_name,
        examples=example_gen.outputs["examples"],
        min_f1=options.min_f1,
        min_baseline_gain=options.min_baseline_gain,
        max_f1_decrease=options.max_f1_decrease,
        version_2_with_negative=options.version_2_with_negative,
        batch_size=options.eval_batch_size,
    )
    return _pipeline(
        pipeline_name,
        pipeline_root,
        [*fingerprint, example_gen, *validated, pretrained, *training, *evaluate_and_push],
        metadata_connection_config,
        beam_pipeline_args,
    )
