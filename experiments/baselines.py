r"""Non-BERT baselines of the experiments in docs/results.md; prints and writes JSON.

- `--baseline=unigram`: masked-LM accuracy of always predicting the most frequent masked token of
  the training records, on the held-out records' masked positions (the same positions
  `run_pretraining --do_eval` scores).
- `--baseline=tfidf`: TF-IDF + logistic regression (scikit-learn) on a `text_classification`
  folder's train.tsv, accuracy on dev.tsv. `--analyzer=char` uses character 1–2-grams (for Chinese,
  which has no spaces), `word` uses word 1–2-grams.

    python -m experiments.baselines --baseline=unigram --train_file=train.tfrecord \
        --eval_file=heldout.tfrecord --max_seq_length=128 --max_predictions_per_seq=20
    python -m experiments.baselines --baseline=tfidf --data_dir=zh_sentiment --analyzer=char
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from absl import flags

from bert_tf import flags_util
from experiments import report

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`); called only when run as a program."""

    def define(kind, name, default, help_, **kwargs):
        getattr(flags, f"DEFINE_{kind}")(
            name, default, help=help_, flag_values=flag_values, **kwargs
        )

    define("enum", "baseline", None, "Which baseline.", enum_values=["unigram", "tfidf"])
    define("string", "train_file", None, "unigram: training TFRecords (globs).")
    define("string", "eval_file", None, "unigram: held-out TFRecords (globs).")
    define("integer", "max_seq_length", 128, "unigram: the records' max_seq_length.")
    define("integer", "max_predictions_per_seq", 20, "unigram: the records' max predictions.")
    define("string", "data_dir", None, "tfidf: folder with train.tsv and dev.tsv.")
    define("enum", "analyzer", "word", "tfidf: n-gram unit.", enum_values=["word", "char"])
    define("string", "output_file", None, "Where the JSON result goes (optional).")
    flags.mark_flag_as_required("baseline", flag_values=flag_values)


def _masked_ids(pattern: str) -> np.ndarray:
    """The original ids at every weighted masked position of the records."""
    from bert_tf.tasks.pretraining import read_pretraining_dataset

    dataset = read_pretraining_dataset(
        pattern, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq, batch_size=1024
    )
    ids = [
        batch["masked_lm_ids"][batch["masked_lm_weights"] > 0]
        for batch in dataset.as_numpy_iterator()
    ]
    return np.concatenate(ids)


def unigram() -> dict:
    train_counts = Counter(_masked_ids(FLAGS.train_file).tolist())
    most_frequent, _ = train_counts.most_common(1)[0]
    heldout = _masked_ids(FLAGS.eval_file)
    return {
        "baseline": "unigram",
        "predicted_token_id": int(most_frequent),
        "masked_lm_accuracy": float(np.mean(heldout == most_frequent)),
        "heldout_predictions": int(heldout.size),
    }


def tfidf() -> dict:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from bert_tf.tasks.glue import TextClassificationProcessor

    processor = TextClassificationProcessor()
    train = processor.get_examples(FLAGS.data_dir, "train")
    dev = processor.get_examples(FLAGS.data_dir, "dev")
    model = make_pipeline(
        TfidfVectorizer(analyzer=FLAGS.analyzer, ngram_range=(1, 2), sublinear_tf=True),
        LogisticRegression(max_iter=2000, C=10.0),
    )
    model.fit([e.text_a for e in train], [e.label for e in train])
    predictions = model.predict([e.text_a for e in dev])
    accuracy = float(np.mean(predictions == np.array([e.label for e in dev])))
    return {
        "baseline": f"tfidf-{FLAGS.analyzer}-1-2gram+logreg",
        "eval_accuracy": accuracy,
        "train_examples": len(train),
        "dev_examples": len(dev),
    }


def main(argv: list[str]) -> None:
    del argv
    result = unigram() if FLAGS.baseline == "unigram" else tfidf()
    report(result, FLAGS.output_file)


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
