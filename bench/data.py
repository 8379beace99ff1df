"""The real inputs every suite uses: Wikipedia sentences and BERT's uncased vocab (cached data)."""

from __future__ import annotations

import functools
from pathlib import Path

from bert_tf.data import corpora, fetch


def vocab_file() -> Path:
    """BERT's 30,522-token uncased vocab (all-MiniLM-L6-v2's `vocab.txt`)."""
    return fetch.path("minilm", "vocab.txt")


@functools.cache
def wiki_sentences() -> tuple[str, ...]:
    """Every sentence of the 106-article Wikipedia sample (~18k, ~140 characters on average)."""
    path = fetch.path("gensim", "enwiki-shortened.xml.bz2")
    return tuple(s for document in corpora.wikipedia_documents(path) for s in document)


def sentences(count: int) -> list[str]:
    """The first `count` sentences, cycling through the corpus when it has fewer."""
    corpus = wiki_sentences()
    return [corpus[i % len(corpus)] for i in range(count)]
