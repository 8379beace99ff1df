# The image the Kubeflow (KFP v2) / Vertex pipeline's components run in:
#   docker build -t gcr.io/<project>/bert-tfx:<tag> . && docker push gcr.io/<project>/bert-tfx:<tag>
#   python -m tfx_pipeline.run --runner=kubeflow --image=gcr.io/<project>/bert-tfx:<tag> ...
# Same lock as local runs (requirements.txt, Python 3.10), plus this repo's packages. TFX's
# container entrypoint (tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor) and
# the FileBasedExampleGen driver come with the tfx package; kfp-pipeline-spec is in the lock.
FROM python:3.10-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    TF_CPP_MIN_LOG_LEVEL=2 \
    TF_ENABLE_ONEDNN_OPTS=1

WORKDIR /pipeline

# Dependencies first: this layer is rebuilt only when the lock changes.
COPY requirements.txt .
RUN pip install --disable-pip-version-check uv==0.13.9 \
    && uv pip install --system --no-deps -r requirements.txt

COPY pyproject.toml README.md ./
COPY bert_tf/ bert_tf/
COPY serving/ serving/
COPY tfx_pipeline/ tfx_pipeline/
RUN uv pip install --system --no-deps .

# The default vocab (--vocab_file unset) is fetched at build time into a fixed cache folder,
# the path `tfx_pipeline.configs.IMAGE_VOCAB_FILE` names in compiled specs (components need no
# network for it; the MiniLM model is there too: --init_checkpoint=/opt/bert_tfx/minilm).
ENV BERT_TFX_CACHE=/opt/bert_tfx
RUN python -m bert_tf.data.fetch --sources=minilm

ENTRYPOINT ["python", "-m", "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"]
