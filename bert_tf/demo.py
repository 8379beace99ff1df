r"""`make demo`: the main job, end to end on package-shipped data.

1. Fetch the corpora and weights (verified by sha256) into the cache.
2. Write the Wikipedia sample as BERT pretraining text (one sentence per line, blank line between
   documents) and learn a WordPiece vocab from it with tensorflow-text.
3. Tokenize the same sentences with the learned vocab and with BERT's uncased vocab, in-graph.
4. Load the real all-MiniLM-L6-v2 BERT into our Keras encoder, check the reference numbers of the
   original model, embed sentences from raw text, and score the Lee document-similarity set
   against human ratings.
5. Export it as a TF Serving SavedModel (in-graph tokenization), start the model server on it
   (`tensorflow_model_server` when installed, else ours), query it over gRPC with the official
   `PredictionService` stub, check the answer equals the in-process model, and stop the server.

Usage: python -m bert_tf.demo [--output_dir=runs/demo]
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default).

    Called when the module runs as a program, never on import, so tests and other scripts can
    import it; tests run `main` in-process on a fresh FlagValues (see tests/conftest.py).
    """
    flags.DEFINE_string(
        "output_dir", "runs/demo", "Where the demo writes its files.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "wiki_vocab_size",
        8000,
        "Size of the WordPiece vocab learned from Wikipedia.",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "wiki_vocab_lines",
        4000,
        "Sentences of the Wikipedia sample to learn it from.",
        flag_values=flag_values,
    )


# Reference values of all-MiniLM-L6-v2 computed with HF transformers on PyTorch.
REFERENCE_IDS = [101, 1037, 2158, 2003, 5983, 2833, 1012, 102]
REFERENCE_CLS_FIRST5 = [-0.00255, 0.117697, 0.003738, 0.244708, -0.517231]
STEPS = 5
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome and I loved it!",
    "A woman is playing the violin.",
]


def _step(number: int, title: str) -> float:
    print(f"\n[{number}/{STEPS}] {title}", flush=True)
    return time.perf_counter()


def _done(start: float) -> None:
    print(f"      ({time.perf_counter() - start:.1f} s)", flush=True)


def _lee_similarity(encoder, gensim_dir: Path) -> tuple[float, float, int]:
    """Pearson and Spearman correlation of embedding cosines with the Lee human ratings."""
    from scipy import stats

    from bert_tf.data import corpora

    documents = [" ".join(doc) for doc in corpora.lee_documents(gensim_dir / "lee.cor")]
    ratings = np.loadtxt(gensim_dir / "similarities0-1.txt")
    if ratings.shape != (len(documents), len(documents)):
        raise ValueError(f"lee.cor has {len(documents)} documents, ratings are {ratings.shape}")
    vectors = encoder.encode(documents)
    upper = np.triu_indices(len(documents), k=1)
    cosines = (vectors @ vectors.T)[upper]
    human = ratings[upper]
    return (
        float(stats.pearsonr(cosines, human)[0]),
        float(stats.spearmanr(cosines, human)[0]),
        len(documents),
    )


def _serve_and_query(export_base: Path, log_path: Path, expected: np.ndarray) -> None:
    """Serves `export_base` (TF Serving layout), sends gRPC requests, prints the answers."""
    from serving.client import ServingClient
    from serving.process import ServerProcess

    model_name = export_base.name
    server = ServerProcess(
        [f"--model_name={model_name}", f"--model_base_path={export_base}"], log_path
    )
    try:
        server.wait_available(model_name)
        print(f"      model server up: gRPC {server.target}, REST {server.rest} (log {log_path})")
        with ServingClient(server.target) as client:
            signatures = sorted(s for s in client.metadata(model_name) if not s.startswith("__"))
            print(f"      GetModelMetadata: signatures {signatures}")
            texts = np.array(SENTENCES[:2], dtype=object)
            outputs = client.predict(model_name, {"text": texts})
            pooled = outputs["pooled_output"]
            print(
                f"      Predict serving_default (text -> pooled_output {list(pooled.shape)}); "
                f"max |served - in-process| = {np.abs(pooled - expected).max():.2e}"
            )
            if "fill_mask" in signatures:
                masked = np.array(["the capital of france is [MASK] ."], dtype=object)
                answer = client.predict(
                    model_name, {"text": masked, "top_k": np.int32(5)}, signature="fill_mask"
                )
                tokens = [t.decode() for t in answer["top_k_tokens"][0, 0]]
                print(f"      Predict fill_mask: {masked[0]!r} -> {tokens}")
    finally:
        code = server.stop()
        print(f"      model server stopped (SIGTERM, exit code {code})")


def main(argv: list[str]) -> None:
    del argv
    # Imported here so `--help` answers without loading TensorFlow.
    import tensorflow as tf

    from bert_tf import build_vocab
    from bert_tf.data import corpora, fetch
    from bert_tf.sentence_embedding import SentenceEncoder
    from bert_tf.tokenization import BertTokenizer

    output_dir = Path(FLAGS.output_dir).resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    print(f"bert-tfx demo: writing to {output_dir}")

    start = _step(1, "fetch package-shipped corpora and weights")
    for name, source in fetch.SOURCES.items():
        print(f"      {name:14s} {fetch.fetch(name)}  ({source.description})")
    _done(start)

    start = _step(2, "Wikipedia sample -> BERT pretraining text -> WordPiece vocab")
    wiki = fetch.path("gensim", "enwiki-shortened.xml.bz2")
    corpus = output_dir / "wiki.txt"
    documents = list(corpora.wikipedia_documents(wiki))
    corpora.write_documents(documents, corpus)
    sentences = sum(len(d) for d in documents)
    print(f"      {len(documents)} articles, {sentences} sentences -> {corpus}")
    # tensorflow-text's vocab learner is Python-heavy: a sample of the corpus keeps this step short.
    vocab = build_vocab.build_vocab(
        [str(corpus)], FLAGS.wiki_vocab_size, lower_case=True, max_lines=FLAGS.wiki_vocab_lines
    )
    vocab_file = output_dir / "wiki_vocab.txt"
    build_vocab.write_vocab(vocab, str(vocab_file))
    print(
        f"      learned {len(vocab)} WordPiece tokens from {FLAGS.wiki_vocab_lines} sentences -> {vocab_file}"
    )
    print(f"      first non-special tokens: {vocab[5:15]}")
    _done(start)

    start = _step(3, "in-graph tokenization: learned vocab vs BERT's uncased vocab")
    minilm = fetch.fetch("minilm")
    learned = BertTokenizer(str(vocab_file))
    bert = BertTokenizer(str(minilm / "vocab.txt"))
    examples = tf.constant(["Tokenization splits unfamiliar words into word pieces."])
    for name, tokenizer in (("learned", learned), ("BERT", bert)):
        tokens = tokenizer.id_to_token(tokenizer(examples))[0].numpy()
        print(f"      {name:8s} {[t.decode() for t in tokens]}")
    _done(start)

    start = _step(4, "all-MiniLM-L6-v2 (real BERT weights) in our Keras encoder")
    encoder = SentenceEncoder.from_pretrained(minilm)
    features = encoder.preprocessor(tf.constant(SENTENCES[:1]))
    length = int(tf.reduce_sum(features["input_mask"][0]))
    ids = features["input_word_ids"][0, :length].numpy().tolist()
    cls_vector = encoder.encoder(features)["sequence_output"][0, 0, :5].numpy()
    ok = ids == REFERENCE_IDS and np.allclose(cls_vector, REFERENCE_CLS_FIRST5, atol=1e-4)
    print(f"      ids {ids}")
    print(f"      sequence_output[0,0,:5] [{', '.join(f'{x:.6f}' for x in cls_vector)}]")
    print(f"      matches the HF/PyTorch reference (atol 1e-4): {'yes' if ok else 'NO'}")
    vectors = encoder.encode(SENTENCES)
    print("      cosine similarity:")
    for i, sentence in enumerate(SENTENCES):
        print(f"        {sentence:42s} " + " ".join(f"{vectors[i] @ v:+.3f}" for v in vectors))
    pearson, spearman, count = _lee_similarity(encoder, fetch.fetch("gensim"))
    print(
        f"      Lee et al. document similarity ({count} news documents, human ratings): "
        f"Pearson {pearson:.3f}, Spearman {spearman:.3f}"
    )
    _done(start)
    if not ok:
        raise SystemExit("error: the encoder does not reproduce the reference outputs")

    start = _step(5, "TF Serving: export, serve, query over gRPC")
    from serving import export

    export_base = output_dir / "serving" / "minilm"
    shutil.rmtree(export_base, ignore_errors=True)
    version = export.export_encoder(encoder.encoder, encoder.preprocessor, export_base, version=1)
    print(f"      exported SavedModel -> {version}")
    in_process = encoder.encoder(encoder.preprocessor(tf.constant(SENTENCES[:2])))
    _serve_and_query(
        export_base, output_dir / "model_server.log", in_process["pooled_output"].numpy()
    )
    _done(start)
    print(f"\ndemo finished; files in {output_dir}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
