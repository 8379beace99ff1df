"""The pipeline `python -m tfx_pipeline.run`'s flags describe, for every runner: the flag values
given to `pipeline.create_*_pipeline` (the vocab and ML Metadata defaults filled in). Imports
TensorFlow and TFX when called (~30 s), never on import.

    checks.check_flags(flag_values)  # exits on a bad flag first
    tfx_pipeline = build.build_pipeline(flag_values)
"""

from __future__ import annotations

import dataclasses
import sys

from absl import flags

from tfx_pipeline import configs
from tfx_pipeline.runners import run_flags


def build_pipeline(flag_values: flags.FlagValues, trainer_cluster: dict | None = None):
    """The pipeline the flags describe (checks.check_flags() first; `trainer_cluster`:
    kubeflow.trainer_cluster(), a Trainer spanning hosts); exits with a one-line error on a
    problem only building it finds (the model source against the options, or a ValueError of
    the pipeline's)."""
    from tfx.orchestration import metadata as tfx_metadata

    from bert_tf import checkpoints, model_source
    from bert_tf.data import fetch
    from tfx_pipeline import pipeline, trainer_lib

    cluster = flag_values.runner in run_flags.CLUSTER_RUNNERS
    beside_checkpoint = (
        flag_values.init_checkpoint
        and not cluster
        and model_source.checkpoint_file(flag_values.init_checkpoint, checkpoints.VOCAB_NAME)
    )
    if flag_values.vocab_file:
        vocab_file = flag_values.vocab_file
    elif beside_checkpoint:
        vocab_file = beside_checkpoint
    elif cluster:
        vocab_file = configs.IMAGE_VOCAB_FILE  # never the compiling machine's cache
    else:
        vocab_file = str(fetch.path("minilm", "vocab.txt"))
    metadata = None
    if not cluster:
        metadata = tfx_metadata.sqlite_metadata_connection_config(
            run_flags.metadata_path(flag_values)
        )
    common = {
        "pipeline_root": flag_values.pipeline_root,
        "data_root": flag_values.data_root,
        "vocab_file": vocab_file,
        "serving_model_dir": flag_values.serving_model_dir,
        "model_name": flag_values.model_name,
        "metadata_connection_config": metadata,
        "beam_pipeline_args": run_flags.beam_pipeline_args(flag_values)[0],
    }
    if trainer_cluster:
        common["trainer_cluster"] = trainer_cluster
    if flag_values.pipeline_name:
        common["pipeline_name"] = flag_values.pipeline_name
    if flag_values.schema_dir:
        common["schema_dir"] = flag_values.schema_dir
    # Open-source KFP runs no preCacheCheck: ExampleGen's cache key must carry the data's
    # fingerprint (components/input_fingerprint.py). Vertex's driver also fingerprints the
    # files; the task is there too, so both runners compile the same spec.
    common["input_fingerprint"] = cluster
    if flag_values.pipeline == "pretrain":
        create = pipeline.create_pretraining_pipeline
    else:
        common["init_checkpoint"] = flag_values.init_checkpoint
        if flag_values.pipeline == "classify":
            create = pipeline.create_classification_pipeline
        else:
            create = pipeline.create_squad_pipeline
    options = run_flags.pipeline_options(
        flag_values, configs.PIPELINE_OPTIONS[flag_values.pipeline]
    )
    if not cluster and flag_values.init_checkpoint:
        # The Trainer's model-source checks, before ExampleGen and Transform spend their time.
        try:
            trainer_lib.encoder_config(
                flag_values.init_checkpoint,
                {**dataclasses.asdict(options), "vocab_file": vocab_file},
            )
        except ValueError as e:
            sys.exit(f"error: {e}")
    try:
        return create(options=options, **common)
    except ValueError as e:
        sys.exit(f"error: {e}")
