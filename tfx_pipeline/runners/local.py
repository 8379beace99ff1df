"""`--runner=local` (LocalDagRunner, the default) and `beam` (BeamDagRunner): the pipeline runs
on this machine with SQLite ML Metadata at --metadata_path. Its flag checks (the paths this
machine reads are there, ML Metadata can be written) need no TensorFlow or TFX import; the run
sends its full log to --log_file and shows progress, then the summary from ML Metadata
(`tfx_pipeline.summary`).

    local.check_local_flags(flag_values)  # from checks.check_flags
    local.run_locally(flag_values)
"""

from __future__ import annotations

import glob
import os
import sys
import time

from absl import flags, logging

from bert_tf.tasks import glue  # light (no TensorFlow): the flag checks stay fast
from tfx_pipeline import configs, corpus_split
from tfx_pipeline.runners import build, run_flags
from tfx_pipeline.runners.run_flags import is_remote, local_path


def _exists_locally(path: str) -> bool:
    """A file or folder, or a TF checkpoint prefix (`bert_model.ckpt` of `.index`/`.data-*`)."""
    path = local_path(path)
    return os.path.exists(path) or os.path.exists(path + ".index")


def _check_corpus_splits(data_root: str) -> None:
    """pretrain: PretrainingExampleGen hashes whole documents train:eval = 2:1; a corpus that
    leaves a split without any document fails there, deep inside Beam: say so now."""
    files = sorted(p for p in glob.glob(os.path.join(data_root, "*")) if os.path.isfile(p))
    counts = corpus_split.split_counts(files, until_every_split=True)
    empty = [name for name, n in zip(corpus_split.TRAIN_EVAL_SPLITS, counts, strict=True) if not n]
    if empty:
        sys.exit(
            f"error: --data_root={data_root}: {sum(counts)} document(s) (blank-line separated), "
            f"none in the {'/'.join(empty)} split: the pretrain pipeline holds out whole "
            f"documents, about 1 in 3, for its evaluation; give it more documents (e.g. a blank "
            f"line between the sections of a long text)"
        )


def _check_data_root(flag_values: flags.FlagValues) -> None:
    """local/beam: --data_root is a folder holding what the pipeline's ExampleGen reads."""
    if is_remote(flag_values.data_root):
        return
    data_root = local_path(flag_values.data_root)
    if not os.path.isdir(data_root):
        sys.exit(f"error: --data_root={data_root}: no such folder")
    if flag_values.pipeline == "classify":
        processor = glue.get_processor(
            flag_values.task_name or configs.ClassificationOptions.task_name
        )
        for split in (glue.TRAIN, glue.DEV):
            try:
                path = processor.split_file(data_root, split)
            except FileNotFoundError as e:
                reason = str(e).removeprefix(f"{data_root}: ")
                sys.exit(f"error: --data_root={data_root}: {reason}")
            if not os.path.isfile(path):
                sys.exit(
                    f"error: --data_root={data_root}: no {os.path.basename(path)} "
                    f"(--task_name={processor.name})"
                )
    elif flag_values.pipeline == "squad":
        for pattern in ("train*.json", "dev*.json"):
            if not glob.glob(os.path.join(data_root, pattern)):
                sys.exit(f"error: --data_root={data_root}: no {pattern} file")
    elif not any(os.scandir(data_root)):
        sys.exit(f"error: --data_root={data_root}: empty folder")
    else:
        _check_corpus_splits(data_root)


def log_path(flag_values: flags.FlagValues, started: float) -> str:
    """local/beam: --log_file, or <pipeline_root>/logs/run-<time>.log (beside the ML Metadata
    file when the pipeline root is remote)."""
    if flag_values.log_file:
        return flag_values.log_file
    folder = (
        os.path.dirname(os.path.abspath(run_flags.metadata_path(flag_values)))
        if is_remote(flag_values.pipeline_root)
        else flag_values.pipeline_root
    )
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started))
    return os.path.join(folder, "logs", f"run-{stamp}.log")


def check_local_flags(flag_values: flags.FlagValues) -> None:
    """local/beam: the paths this machine reads are there, ML Metadata can be written."""
    _check_data_root(flag_values)
    for name in ("init_checkpoint", "vocab_file"):
        value = getattr(flag_values, name)
        if value and not is_remote(value) and not _exists_locally(value):
            sys.exit(f"error: --{name}={value}: no such file or folder")
    schema_dir = flag_values.schema_dir
    schema_file = schema_dir and os.path.join(local_path(schema_dir), configs.SCHEMA_FILE)
    if schema_dir and not is_remote(schema_dir) and not os.path.isfile(schema_file):
        sys.exit(f"error: --schema_dir={schema_dir}: no {configs.SCHEMA_FILE} in it")
    vocab_file = flag_values.vocab_file
    if vocab_file and not is_remote(vocab_file) and os.path.isdir(local_path(vocab_file)):
        sys.exit(f"error: --vocab_file={vocab_file}: a folder, expected the vocab file")
    pipeline_root = flag_values.pipeline_root
    if is_remote(pipeline_root) and not flag_values.metadata_path:
        sys.exit(
            f"error: --metadata_path required: --pipeline_root={pipeline_root} is remote "
            "and ML Metadata is a local SQLite file"
        )
    metadata = run_flags.metadata_path(flag_values)
    if is_remote(metadata):
        sys.exit(f"error: --metadata_path={metadata}: must be a local file (SQLite)")
    for name, path in (("metadata_path", metadata), ("log_file", flag_values.log_file)):
        if path and os.path.isdir(path):
            sys.exit(f"error: --{name}={path}: a folder, expected a file")
    serving = local_path(flag_values.serving_model_dir)
    if not is_remote(serving) and os.path.exists(serving) and not os.path.isdir(serving):
        sys.exit(f"error: --serving_model_dir={serving}: not a folder")


def run_locally(flag_values: flags.FlagValues) -> None:
    """local/beam: runs the pipeline, its full log to log_path(), progress and then the
    summary on the console."""
    from tfx_pipeline import summary

    started = time.time()
    log_file = log_path(flag_values, started)
    for path in (run_flags.metadata_path(flag_values), log_file):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with summary.RunLog(log_file, verbose=flag_values.verbose) as run_log:
        run_log.print(f"full log: {log_file}")
        run_log.print(f"Beam: {run_flags.beam_pipeline_args(flag_values)[1]}")
        run_log.print(f"[{run_log.clock()}] loading TensorFlow and TFX, building the pipeline")
        tfx_pipeline = failure = None
        try:
            tfx_pipeline = build.build_pipeline(flag_values)  # TensorFlow/TFX imports: ~30 s
            if flag_values.runner == "beam":
                from tfx.orchestration.beam.beam_dag_runner import BeamDagRunner

                BeamDagRunner().run(tfx_pipeline)
            else:
                from tfx.orchestration.local.local_dag_runner import LocalDagRunner

                LocalDagRunner().run(tfx_pipeline)
        except Exception as e:  # a component failed: its traceback goes to the log file
            if tfx_pipeline is None:
                raise
            failure = e
            logging.exception("the pipeline run failed")
        finally:
            if tfx_pipeline is not None:
                run_log.print(
                    summary.run_summary(
                        run_flags.metadata_path(flag_values),
                        tfx_pipeline.pipeline_info.pipeline_name,
                        [component.id for component in tfx_pipeline.components],
                        since=started,
                    )
                )
            run_log.print(f"full log: {log_file}")
    if failure is not None:
        sys.exit(f"error: {failure}")
