r"""Runs or compiles a BERT TFX pipeline.

    python -m tfx_pipeline.run --pipeline=pretrain --data_root=corpus/ \
        --pipeline_root=/tmp/tfx/root --serving_model_dir=/tmp/serving --preset=tiny
    python -m tfx_pipeline.run --pipeline=classify --task_name=sst-2 --data_root=glue/SST-2 \
        --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt ...
    python -m tfx_pipeline.run --pipeline=squad --data_root=squad/ --init_checkpoint=$M \
        --max_seq_length=384 --doc_stride=128 ...  # squad/: train*.json, dev*.json
    python -m tfx_pipeline.run --pipeline=pretrain --runner=kubeflow --image=gcr.io/p/bert-tfx \
        --pipeline_root=gs://bucket/root --output_spec_file=pretrain.json ...

Runners: `local` (LocalDagRunner with SQLite ML Metadata at --metadata_path, the default),
`beam` (BeamDagRunner) and `kubeflow` (KubeflowV2DagRunner: writes a KFP v2 pipeline spec JSON
whose components run in --image; nothing is run). Without --vocab_file the uncased BERT vocab
is used. --beam_pipeline_args (comma-separated) replace the default DirectRunner
multi-processing args, e.g. with Dataflow's.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from absl import app, flags

from tfx_pipeline import configs

FLAGS = flags.FLAGS
# Every field of the options dataclasses is a flag of the same name (default: the dataclass's).
_OPTION_FIELDS = {
    f.name: f
    for cls in (configs.PretrainingOptions, configs.ClassificationOptions, configs.SquadOptions)
    for f in dataclasses.fields(cls)
    if f.name not in ("train_steps", "eval_steps", "init_checkpoint")
}


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default).

    Called when the module runs as a program, never on import, so tests and other scripts can
    import it; tests run `main` in-process on a fresh FlagValues.
    """
    flags.DEFINE_enum(
        "pipeline",
        "pretrain",
        ["pretrain", "classify", "squad"],
        "Which pipeline.",
        flag_values=flag_values,
    )
    flags.DEFINE_enum(
        "runner", "local", ["local", "beam", "kubeflow"], "Orchestrator.", flag_values=flag_values
    )
    flags.DEFINE_string(
        "data_root",
        None,
        "Corpus folder (pretrain), task data folder (classify) or SQuAD JSON folder (squad).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "vocab_file",
        None,
        "WordPiece vocab; default: the uncased BERT vocab.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "pipeline_root",
        None,
        "Folder (or gs:// path) for the pipeline's artifacts.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "metadata_path",
        None,
        "SQLite ML Metadata file (local/beam runners).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "serving_model_dir",
        None,
        "Pusher's base folder: <it>/<model_name>/<ver>/.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "model_name",
        "bert",
        "Served model name (a folder under serving_model_dir).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "init_checkpoint",
        None,
        "Checkpoint to start from (required for classify and squad).",
        flag_values=flag_values,
    )
    flags.DEFINE_integer("train_steps", None, "Training steps.", flag_values=flag_values)
    flags.DEFINE_integer(
        "eval_steps", None, "Evaluation batches (0: the whole eval split).", flag_values=flag_values
    )
    flags.DEFINE_list(
        "beam_pipeline_args", None, "Beam args, comma-separated.", flag_values=flag_values
    )
    flags.DEFINE_string(
        "output_spec_file",
        None,
        "Kubeflow runner: the pipeline spec JSON to write.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "image",
        None,
        "Kubeflow runner: container image of the components.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "pipeline_name", None, "Pipeline name (default per pipeline).", flag_values=flag_values
    )
    for field in _OPTION_FIELDS.values():
        define = {
            "int": flags.DEFINE_integer,
            "float": flags.DEFINE_float,
            "bool": flags.DEFINE_boolean,
            "str": flags.DEFINE_string,
        }[field.type]
        define(
            field.name,
            None,
            f"Option {field.name} (see tfx_pipeline.configs).",
            flag_values=flag_values,
        )


def _options(cls):
    values = {
        name: getattr(FLAGS, name)
        for name in (f.name for f in dataclasses.fields(cls))
        if name in FLAGS and getattr(FLAGS, name) is not None
    }
    if FLAGS.init_checkpoint and cls is configs.PretrainingOptions:
        values["init_checkpoint"] = FLAGS.init_checkpoint
    return cls(**values)


def _required(*names):
    missing = [f"--{n}" for n in names if not getattr(FLAGS, n)]
    if missing:
        sys.exit(
            f"error: {', '.join(missing)} required for --pipeline={FLAGS.pipeline} "
            f"--runner={FLAGS.runner}"
        )


def build_pipeline():
    """The pipeline the flags describe."""
    from tfx import v1 as tfx

    from bert_tf.data import fetch
    from tfx_pipeline import pipeline

    _required("data_root", "pipeline_root", "serving_model_dir")
    if not os.path.isdir(FLAGS.data_root) and "://" not in FLAGS.data_root:
        sys.exit(f"error: --data_root: {FLAGS.data_root} is not a folder")
    vocab_file = FLAGS.vocab_file or str(fetch.path("minilm", "vocab.txt"))
    metadata = None
    if FLAGS.runner != "kubeflow":
        _required("metadata_path")
        metadata = tfx.orchestration.metadata.sqlite_metadata_connection_config(FLAGS.metadata_path)
    common = {
        "pipeline_root": FLAGS.pipeline_root,
        "data_root": FLAGS.data_root,
        "vocab_file": vocab_file,
        "serving_model_dir": FLAGS.serving_model_dir,
        "model_name": FLAGS.model_name,
        "metadata_connection_config": metadata,
        "beam_pipeline_args": FLAGS.beam_pipeline_args or configs.DEFAULT_BEAM_PIPELINE_ARGS,
    }
    if FLAGS.pipeline_name:
        common["pipeline_name"] = FLAGS.pipeline_name
    if FLAGS.pipeline == "pretrain":
        options = _options(configs.PretrainingOptions)
        create = pipeline.create_pretraining_pipeline
    else:
        _required("init_checkpoint")
        common["init_checkpoint"] = FLAGS.init_checkpoint
        if FLAGS.pipeline == "classify":
            options = _options(configs.ClassificationOptions)
            create = pipeline.create_classification_pipeline
        else:
            options = _options(configs.SquadOptions)
            create = pipeline.create_squad_pipeline
    if FLAGS.train_steps is not None:
        options.train_steps = FLAGS.train_steps
    if FLAGS.eval_steps is not None:
        options.eval_steps = FLAGS.eval_steps
    try:
        return create(options=options, **common)
    except ValueError as e:
        sys.exit(f"error: {e}")


def main(argv):
    del argv
    if FLAGS.runner == "kubeflow":
        _required("image", "output_spec_file")
    tfx_pipeline = build_pipeline()
    if FLAGS.runner == "kubeflow":
        # Imported directly: tfx.v1's export of it is hidden when the full kfp SDK is absent;
        # compiling needs only kfp-pipeline-spec.
        from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner as kubeflow_v2

        output_dir, output_file = os.path.split(os.path.abspath(FLAGS.output_spec_file))
        runner = kubeflow_v2.KubeflowV2DagRunner(
            config=kubeflow_v2.KubeflowV2DagRunnerConfig(default_image=FLAGS.image),
            output_dir=output_dir,
            output_filename=output_file,
        )
        runner.run(tfx_pipeline, write_out=True)
    elif FLAGS.runner == "beam":
        from tfx.orchestration.beam.beam_dag_runner import BeamDagRunner

        BeamDagRunner().run(tfx_pipeline)
    else:
        from tfx import v1 as tfx

        tfx.orchestration.LocalDagRunner().run(tfx_pipeline)


if __name__ == "__main__":
    define_flags()
    app.run(main)
