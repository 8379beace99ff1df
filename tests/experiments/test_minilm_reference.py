"""experiments/minilm_reference.py: the MiniLM reference values the tests read (the
`minilm_reference` fixture) are complete, dated, tied to the fetched weights and to
requirements-reference.txt's pins, and are what HF transformers makes from them now, in the
reference environment `make reference-env` creates (about a minute from nothing, then reused)."""

import datetime
import hashlib
import json
import subprocess
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "experiments" / "minilm_reference.py"
OUTPUT_KEYS = {"input_ids", "tokens", "cls_sequence_output", "embedding"}


def _today() -> datetime.date:
    """The script dates its file in UTC."""
    return datetime.datetime.now(datetime.timezone.utc).date()


def _pins() -> dict[str, str]:
    lines = (REPO / "requirements-reference.txt").read_text(encoding="utf-8").splitlines()
    return dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))


def test_reference_file_has_every_key_its_date_versions_and_weights(minilm_reference, minilm_dir):
    assert set(minilm_reference) == {
        "made",
        "regenerate",
        "transformers",
        "torch",
        "python",
        "config",
        "model_safetensors_sha256",
        "sentences",
        "outputs",
        "cosine_similarities",
        "lee",
    }
    made = datetime.date.fromisoformat(minilm_reference["made"])
    assert datetime.date(2026, 1, 1) <= made <= _today()
    assert "make reference-env" in minilm_reference["regenerate"]
    # Made by the pinned environment: a new pin needs new values.
    pins = _pins()
    assert minilm_reference["transformers"] == pins["transformers"]
    assert minilm_reference["torch"].split("+")[0] == pins["torch"]
    assert minilm_reference["python"].startswith("3.11.")
    # ... from the weights the tests load.
    assert minilm_reference["config"] == json.loads((minilm_dir / "config.json").read_text())
    weights = hashlib.sha256((minilm_dir / "model.safetensors").read_bytes()).hexdigest()
    assert minilm_reference["model_safetensors_sha256"] == weights

    sentences = minilm_reference["sentences"]
    assert "A man is eating food." in sentences
    assert list(minilm_reference["outputs"]) == sorted(sentences)
    hidden = minilm_reference["config"]["hidden_size"]
    for sentence, output in minilm_reference["outputs"].items():
        assert set(output) == OUTPUT_KEYS, sentence
        assert len(output["input_ids"]) == len(output["tokens"]) >= 3
        assert output["tokens"][0] == "[CLS]" and output["tokens"][-1] == "[SEP]"
        assert len(output["cls_sequence_output"]) == len(output["embedding"]) == hidden
        assert abs(np.linalg.norm(output["embedding"]) - 1.0) < 1e-5, sentence
    similarities = np.array(minilm_reference["cosine_similarities"])
    assert similarities.shape == (len(sentences), len(sentences))
    np.testing.assert_allclose(similarities, similarities.T)
    lee = minilm_reference["lee"]
    assert lee["max_length"] == 256
    assert len(lee["upper_triangle_cosines"]) == lee["documents"] * (lee["documents"] - 1) // 2


def test_script_imports_neither_the_project_nor_tensorflow(reference_script_imports):
    imported = reference_script_imports(SCRIPT)
    assert {"torch", "transformers", "absl"} <= imported


def _assert_same(fresh, committed, where: str = "") -> None:
    """Equal, floats to 1e-6 (another CPU may round float32 sums differently)."""
    if isinstance(committed, dict):
        assert set(fresh) == set(committed), where
        for key in committed:
            _assert_same(fresh[key], committed[key], f"{where}/{key}")
    elif isinstance(committed, list) and committed and isinstance(committed[0], float | list):
        np.testing.assert_allclose(fresh, committed, atol=1e-6, err_msg=where)
    else:
        assert fresh == committed, where


def test_reference_environment_remakes_the_committed_values(
    reference_python, clean_env, minilm_dir, gensim_dir, minilm_reference, tmp_path
):
    output = tmp_path / "fresh.json"
    run = subprocess.run(
        [
            str(reference_python),
            "-m",
            "experiments.minilm_reference",
            f"--minilm_dir={minilm_dir}",
            f"--lee_corpus={gensim_dir / 'lee.cor'}",
            f"--output={output}",
        ],
        cwd=REPO,
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == str(output)
    assert [p.name for p in tmp_path.iterdir()] == ["fresh.json"], "no temp file left behind"
    fresh = json.loads(output.read_text())
    made = datetime.date.fromisoformat(fresh.pop("made"))
    assert _today() - made <= datetime.timedelta(days=1)  # run just before midnight
    del fresh["python"]  # a 3.11 patch release may differ
    _assert_same(fresh, {k: v for k, v in minilm_reference.items() if k not in ("made", "python")})
