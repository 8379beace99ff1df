"""The README's Scripts block, run as shown: one bash script, line by line, in a scratch folder.

What the test changes, and only this (the README says so under the block):
- the folder holds tiny inputs under the names the commands use (`corpus/*.txt`, `glue/SST-2/`,
  `train-v1.1.json`/`dev-v1.1.json`, `input.txt`) and a `.venv` link to this interpreter's venv;
- `M=...` points at the fetch cache's MiniLM folder (wherever $BERT_TFX_CACHE puts it);
- ports 8500/8501 become free ports (tests run in parallel);
- after the line that starts the server in the background, a wait until its model is
  AVAILABLE (a person would wait for its "Running ... ModelServer" line);
- `TINY_FLAGS` appended to some programs' command lines (absl: the last value of a flag wins),
  so the block runs in minutes on 2 CPU cores.
Every other character of every line runs as written, `source .venv/bin/activate` included.
"""

import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from bert_tf import net
from bert_tf.data import corpora

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
TINY_FLAGS = {
    "bert_tf.create_pretraining_data": ["--dupe_factor=1"],
    "bert_tf.run_pretraining": [
        "--preset=tiny",
        "--train_batch_size=4",
        "--eval_batch_size=4",
        "--num_train_steps=4",
        "--num_warmup_steps=1",
        "--max_eval_steps=2",
    ],
    "bert_tf.run_classifier": ["--max_seq_length=32", "--train_batch_size=8"],
    "bert_tf.run_squad": [
        "--max_seq_length=64",
        "--doc_stride=24",
        "--max_query_length=24",
        "--train_batch_size=16",
        "--num_train_epochs=1",
    ],
    "bert_tf.extract_features": ["--max_seq_length=32"],
}
SQUAD_FILE = REPO / "tests" / "testdata" / "squad_v1.1.json"


def scripts_block() -> str:
    """The README's Scripts section's bash block."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Scripts\n", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S)[1]


def as_test_script(block: str, minilm: Path, grpc_port: int, rest_port: int) -> str:
    """The block with the module docstring's substitutions, continuation lines joined."""
    lines = []
    for line in block.replace("\\\n", " ").splitlines():
        if line.startswith("M="):
            line = f"M={shlex.quote(str(minilm))}" + re.sub(r"^M=\S+", "", line)
        line = line.replace("8500", str(grpc_port)).replace("8501", str(rest_port))
        words = line.split()
        if words[:2] == ["python", "-m"] and words[2] in TINY_FLAGS:
            # Before a trailing `&` or comment.
            command, tail = re.match(r"(.*?)(\s+(?:&|#).*)?$", line).groups()
            line = " ".join([command, *TINY_FLAGS[words[2]]]) + (tail or "")
        lines.append(line)
        if re.match(r"python -m serving\.server .*&", line):
            model = re.search(r"--model_name=(\S+)", line)[1]
            status = f"curl -sf localhost:{rest_port}/v1/models/{model} | grep -q AVAILABLE"
            lines.append(f"for i in $(seq 300); do {status} && break; sleep 1; done; {status}")
    return "set -euo pipefail\n" + "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory, minilm_dir, gensim_dir, lee_corpus, run_shell_script):
    work = tmp_path_factory.mktemp("readme")
    (work / ".venv").symlink_to(sys.prefix)
    lee_corpus(work / "corpus", a=6, b=4)
    sst2 = work / "glue" / "SST-2"
    sst2.mkdir(parents=True)
    examples = corpora.polarity_examples(gensim_dir / "pang_lee_polarity.cor")
    for name, rows in (("train", examples[:24]), ("dev", examples[24:32])):
        text = "".join(f"{sentence}\t{label}\n" for sentence, label in rows)
        (sst2 / f"{name}.tsv").write_text("sentence\tlabel\n" + text, encoding="utf-8")
    for name in ("train-v1.1.json", "dev-v1.1.json"):
        (work / name).write_bytes(SQUAD_FILE.read_bytes())
    (work / "input.txt").write_text(
        "The cat sat on the mat.\nWho wrote it? ||| Nobody knows.\n", encoding="utf-8"
    )
    grpc_port, rest_port = net.free_port(), net.free_port()
    script = as_test_script(scripts_block(), minilm_dir, grpc_port, rest_port)
    (work / "readme.sh").write_text(script, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    # What a fresh shell has: no venv on PATH (`source .venv/bin/activate` puts it there).
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix)
    )
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    returncode, output = run_shell_script(work / "readme.sh", env, timeout=1200)
    assert returncode == 0, output[-5000:]
    return work, output


def test_block_substitutions_touch_only_documented_parts(minilm_dir):
    block = scripts_block()
    script = as_test_script(block, minilm_dir, 18500, 18501)
    assert "source .venv/bin/activate" in script
    assert f"M={minilm_dir}" in script
    assert "8500" not in script.replace("18500", "") and "8501" not in script.replace("18501", "")
    assert "--port=18500 --rest_api_port=18501" in script
    for program, extra in TINY_FLAGS.items():
        (line,) = [x for x in script.splitlines() if x.startswith(f"python -m {program} ")]
        assert line.split("#")[0].rstrip().endswith(" ".join(extra))
    shown = [x for x in block.replace("\\\n", " ").splitlines() if x.startswith("python -m ")]
    programs = {x.split()[2] for x in shown}
    assert {"serving.export", "serving.server", "serving.client"} <= programs
    assert any("--rest" in x for x in shown) and "curl " in block


@pytest.mark.timeout(1500)
def test_every_script_wrote_its_outputs(readme_run):
    work, _ = readme_run
    assert len((work / "vocab.txt").read_text(encoding="utf-8").splitlines()) > 100
    assert (work / "out/train.tfrecord").stat().st_size > 0
    assert list((work / "out/pretrain").glob("ckpt-4.index"))
    assert (work / "out/pretrain/eval_results.txt").exists()
    assert "eval_accuracy" in (work / "out/sst2/eval_results.txt").read_text()
    predictions = json.loads((work / "out/squad/predictions.json").read_text())
    assert len(predictions) == 29
    features = (work / "features.jsonl").read_text().splitlines()
    assert len(features) == 2
    assert (work / "out/google_ckpt/bert_model.ckpt.index").exists()
    for model in ("minilm", "sst2"):
        assert list((work / "models" / model).glob("*/saved_model.pb")), model


@pytest.mark.timeout(1500)
def test_clients_answered(readme_run):
    _, output = readme_run
    # gRPC, one --text with a comma: one row of two class probabilities.
    grpc_line = re.search(r"^probabilities \[(\d+), (\d+)\]", output, re.M)
    assert grpc_line and grpc_line.groups() == ("1", "2"), output[-3000:]
    # REST, two --text flags: two rows.
    rows = re.findall(r"^probabilities \[(\d+), 2\]", output, re.M)
    assert rows == ["1", "2"], output[-3000:]
    # curl: TF Serving's row format, one prediction.
    key = output.index('"predictions"')
    body, _ = json.JSONDecoder().raw_decode(output[output.rindex("{", 0, key) :])
    (prediction,) = body["predictions"]
    assert len(prediction["probabilities"]) == 2


@pytest.mark.timeout(1500)
def test_no_error_level_or_library_info_lines(readme_run):
    """Nothing is wrong, so nothing prints as an error: no absl "E1205 ..." or TensorFlow C++
    "...: E file.cc:1]" line (oneDNN's "supports DT_INT64 only on platforms with AVX-512" was
    one, in every process), and none of TensorFlow's INFO lines among the scripts' own."""
    _, output = readme_run
    lines = output.splitlines()
    assert [line for line in lines if re.match(r"E\d{4} |\S+ \S+: E \S+\]", line)] == []
    for noise in ("Sharding callback duration", "Assets written to", "Writing fingerprint"):
        assert noise not in output
    assert any("step 4/4" in line for line in lines)  # the scripts' progress lines stay
