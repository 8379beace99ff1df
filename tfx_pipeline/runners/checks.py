"""Every check of `python -m tfx_pipeline.run`'s flags that needs no TensorFlow or TFX import (that
import alone takes ~30 s): a missing, malformed or misplaced flag, a flag of another pipeline or
runner, or a local file or folder that is not there fails at once with a one-line `error: ...`.

    resources = checks.check_flags(flag_values)  # exits on a bad flag
"""

from __future__ import annotations

import dataclasses
import sys

from absl import flags

from bert_tf.tasks import glue  # light (no TensorFlow): the flag checks stay fast
from tfx_pipeline import configs
from tfx_pipeline.runners import kubeflow, local, run_flags

_TRAINER_RESOURCE_FLAGS = ("trainer_cpu", "trainer_memory", "trainer_accelerator")
# Flags of the local/beam runners only.
_LOCAL_FLAGS = ("metadata_path", "log_file")


def check_flags(flag_values: flags.FlagValues) -> dict | None:
    """Every check that needs no TensorFlow or TFX import: exits with a one-line error on a
    missing, malformed or misplaced flag. Returns kubeflow.trainer_resources()."""
    resources = kubeflow.trainer_resources(flag_values)
    cluster = flag_values.runner in run_flags.CLUSTER_RUNNERS
    if cluster:
        kubeflow.check_cluster_flags(flag_values)
        given = [f"--{n}" for n in (*_LOCAL_FLAGS, "verbose") if getattr(flag_values, n)]
        if given:
            sys.exit(f"error: {', '.join(given)}: only for --runner=local or beam")
    else:
        given = [
            f"--{n}" for n in (*_TRAINER_RESOURCE_FLAGS, "gpu_image") if getattr(flag_values, n)
        ]
        if given:
            sys.exit(f"error: {', '.join(given)}: only for --runner=kubeflow or vertex")
    run_flags.required(flag_values, "data_root", "pipeline_root", "serving_model_dir")
    pipeline = flag_values.pipeline
    if pipeline != "pretrain":
        run_flags.required(flag_values, "init_checkpoint")
    cls = configs.PIPELINE_OPTIONS[pipeline]
    fields = {f.name for f in dataclasses.fields(cls)}
    foreign = [
        f"--{name}"
        for name in run_flags.OPTION_SPECS
        if name not in fields and name in flag_values and getattr(flag_values, name) is not None
    ]
    if foreign:
        others = sorted({p for n in foreign for p in run_flags.OPTION_SPECS[n[2:]].defaults})
        sys.exit(
            f"error: {', '.join(foreign)}: not an option of --pipeline={pipeline} "
            f"(only of --pipeline={'/'.join(others)})"
        )
    options = run_flags.pipeline_options(flag_values, cls)
    errors = configs.check_options(pipeline, options)
    if errors:
        sys.exit("error: " + "; ".join(errors))
    kubeflow.trainer_cluster(flag_values, options.distribution_strategy)
    if pipeline == "classify":
        try:
            glue.get_processor(flag_values.task_name or configs.ClassificationOptions.task_name)
        except ValueError as e:
            sys.exit(f"error: {e}")
    if not cluster:
        local.check_local_flags(flag_values)
    return resources
