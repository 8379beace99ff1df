r"""Runs or compiles a BERT TFX pipeline.

    python -m tfx_pipeline.run --pipeline=pretrain --data_root=corpus/ \
        --pipeline_root=/tmp/tfx/root --serving_model_dir=/tmp/serving --preset=tiny
    python -m tfx_pipeline.run --pipeline=classify --task_name=sst-2 --data_root=glue/SST-2 \
        --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt ...
    python -m tfx_pipeline.run --pipeline=squad --data_root=squad/ --init_checkpoint=$M \
        --max_seq_length=384 --doc_stride=128 ...  # squad/: train*.json, dev*.json
    python -m tfx_pipeline.run --pipeline=pretrain --runner=kubeflow --image=gcr.io/p/bert-tfx \
        --data_root=gs://bucket/corpus --pipeline_root=gs://bucket/root \
        --serving_model_dir=gs://bucket/serving --output_spec_file=pretrain.yaml \
        --gpu_image=gcr.io/p/bert-tfx-gpu --trainer_accelerator=nvidia.com/gpu:1 ...

Runners: `local` (LocalDagRunner, the default) and `beam` (BeamDagRunner) run the pipeline with
SQLite ML Metadata at --metadata_path (default: <pipeline_root>/metadata.sqlite); two others
compile and run nothing, with KubeflowV2DagRunner in the pipeline spec 2.1 form: `kubeflow`
writes the KFP v2 PipelineSpec YAML that open-source Kubeflow Pipelines uploads, `vertex` the
PipelineJob JSON that Vertex AI Pipelines submits. Their
components run in --image (the Trainer in --gpu_image if set), and they need no credentials or
network: Transform and Trainer name their functions by import path, which the image has. Without
--vocab_file the vocab.txt beside a local --init_checkpoint is used, else the MiniLM (uncased
BERT) vocab: the fetch cache's locally, the image's (`configs.IMAGE_VOCAB_FILE`) on
kubeflow/vertex. --beam_pipeline_args (comma-separated) replace the default DirectRunner args,
e.g. with Dataflow's: local/beam with a local --data_root under 64 MiB run Beam in this process
(starting a worker process per core costs more than it saves there), otherwise a worker process
per core.

Every flag is checked before TensorFlow or TFX is imported (that import alone takes ~30 s): a
missing, misspelt or out-of-range flag, a flag of another pipeline or runner, or a local file or
folder that is not there fails at once with a one-line `error: ...`. Option flags (`--preset`,
`--learning_rate`, ...) are the fields of `configs.PretrainingOptions` / `ClassificationOptions`
/ `SquadOptions`, with their help and per-pipeline defaults (`--help` shows them).

local/beam: the run's full log (TFX, Beam, TensorFlow) goes to --log_file (default
<pipeline_root>/logs/run-<time>.log, named at the start and the end); the console shows progress
(components started and finished, with seconds; training steps), Python warnings and errors,
then a summary from ML Metadata: each component's state, the evaluator's metrics against its
thresholds, blessed or not, and where the model was pushed or why not (`tfx_pipeline.summary`).
--verbose keeps the full log on the console too.
"""

from __future__ import annotations

from absl import flags

from bert_tf import flags_util
from tfx_pipeline.runners import checks, kubeflow, local, run_flags
from tfx_pipeline.runners.run_flags import define_flags

FLAGS = flags.FLAGS


def main(argv):
    del argv
    resources = checks.check_flags(FLAGS)
    if FLAGS.runner in run_flags.CLUSTER_RUNNERS:
        output = kubeflow.compile_pipeline(FLAGS, resources)
        print(f"wrote {output}")
    else:
        local.run_locally(FLAGS)


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
