"""serving/deploy/README.md's "Locally, without Docker" block, run line by line as shown.

What the test changes, and only this (the block's note says so): the work folder holds tiny
exports in `serving_models/<name>/1` for the three models of `serving/configs/models.config`
(and a `serving` link to this repository's, so the block's relative config paths resolve);
ports 8500/8501 become free ports; after the line that starts the server in the background, a
wait until every configured model is AVAILABLE (a person would wait for its "Running ...
ModelServer" line). Every other character of every line runs as written.
"""

import os
import re
import sys
from pathlib import Path

import keras
import pytest

from bert_tf import net, testing
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertClassifier, BertSpanLabeler
from bert_tf.text.tokenization import BertPreprocessor
from serving import export_lib

REPO = Path(__file__).resolve().parents[2]
DEPLOY_README = REPO / "serving" / "deploy" / "README.md"
MODELS = ("bert_classifier", "bert_encoder", "bert_squad")


def local_block() -> str:
    text = DEPLOY_README.read_text(encoding="utf-8")
    section = text.split("\n## Locally, without Docker\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```sh\n(.*?)```", section, re.S)[1]


def as_test_script(block: str, grpc_port: int, rest_port: int) -> str:
    lines = []
    for line in block.replace("\\\n", " ").splitlines():
        line = line.replace("8500", str(grpc_port)).replace("8501", str(rest_port))
        if line.startswith("python -m serving.server "):
            # The server's own default ports, made free ones (absl: the last value wins).
            command, tail = re.match(r"(.*?)(\s+&.*)$", line).groups()
            line = f"{command} --port={grpc_port} --rest_api_port={rest_port}{tail}"
        lines.append(line)
        if line.startswith("python -m serving.server "):
            for model in MODELS:
                status = f"curl -sf localhost:{rest_port}/v1/models/{model} | grep -q AVAILABLE"
                lines.append(f"for i in $(seq 300); do {status} && break; sleep 1; done; {status}")
    return "set -euo pipefail\n" + "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def work(tmp_path_factory, minilm_dir) -> Path:
    """The block's folder: tiny exports of the three configured models, version 1."""
    work = tmp_path_factory.mktemp("deploy")
    (work / "serving").symlink_to(REPO / "serving")
    preprocessor = BertPreprocessor(minilm_dir / "vocab.txt", seq_length=32)
    config = testing.tiny_config(
        vocab_size=preprocessor.tokenizer.vocabulary_size, max_position_embeddings=32
    )
    keras.utils.set_random_seed(1)
    models = work / "serving_models"
    export_lib.export_classifier(
        BertClassifier(build_encoder(config), 2),
        preprocessor,
        models / "bert_classifier",
        1,
        ["neg", "pos"],
        single_segment=True,
    )
    export_lib.export_encoder(build_encoder(config), preprocessor, models / "bert_encoder", 1)
    export_lib.export_squad(
        BertSpanLabeler(build_encoder(config)),
        preprocessor,
        models / "bert_squad",
        1,
        doc_stride=8,
        max_query_length=8,
    )
    return work


def test_local_block_serves_the_configured_models(work, run_shell_script):
    grpc_port, rest_port = net.free_port(), net.free_port()
    script = as_test_script(local_block(), grpc_port, rest_port)
    (work / "local.sh").write_text(script, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # `python -m serving...` from the work folder
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    returncode, output = run_shell_script(work / "local.sh", env, timeout=900)
    assert returncode == 0, output[-5000:]
    # The client's answer: one row of the classifier's two class probabilities.
    assert re.search(r"^probabilities \[1, 2\]", output, re.M), output[-3000:]
    # The monitoring config's Prometheus endpoint counted that request.
    assert re.search(r'request_count\{.*model_name="bert_classifier".*\} 1', output), output[-3000:]
    config = (work / "serving_models" / "models.config").read_text()
    assert f'base_path: "{work}/serving_models/bert_squad"' in config
