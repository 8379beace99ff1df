"""Writes the hand-made SQuAD test files `squad_v1.1.json` and `squad_v2.0.json` beside itself.

Contexts are the first sentences of articles of the gensim Wikipedia sample; the questions were
written by hand and every answer is an exact span of its context (located here with
`str.find`, so the `answer_start` offsets are right by construction). The v2.0 file adds
unanswerable questions whose `plausible_answers` are spans of the same context.

    python tests/testdata/make_squad_testdata.py
"""

from __future__ import annotations

import json
from pathlib import Path

from bert_tf.data import corpora, fetch

HERE = Path(__file__).parent

# article index in the sample -> (title, sentences used, [(question, answer)], [(question, plausible)])
QUESTIONS = {
    5: (
        "Achilles",
        3,
        [
            ("Who was the mother of Achilles?", "Thetis"),
            ("Who was the king of the Myrmidons?", "Peleus"),
            ("Which Trojan hero did Achilles slay outside the gates of Troy?", "Hector"),
            ("Whose Iliad has Achilles as its central character?", "Homer"),
        ],
        [("Who was the father of Hector?", "Peleus")],
    ),
    6: (
        "Abraham Lincoln",
        3,
        [
            ("Which President of the United States was Abraham Lincoln?", "16th"),
            ("When was Abraham Lincoln born?", "February 12, 1809"),
            ("What did Lincoln abolish?", "slavery"),
        ],
        [("What did Lincoln's successor abolish?", "slavery")],
    ),
    7: (
        "Aristotle",
        3,
        [
            ("In which city was Aristotle born?", "Stagira"),
            ("Who was Aristotle's father?", "Nicomachus"),
            ("How is Aristotle written in Greek transliteration?", "Aristotélēs"),
            ("Whose Academy did Aristotle join at eighteen?", "Plato's Academy"),
        ],
        [("Who was Aristotle's mother?", "Nicomachus")],
    ),
    8: (
        "An American in Paris",
        3,
        [
            ("Who composed An American in Paris?", "George Gershwin"),
            ("In what year was An American in Paris written?", "1928"),
            ("Which conductor commissioned An American in Paris?", "Walter Damrosch"),
        ],
        [("Who composed An American in London?", "George Gershwin")],
    ),
    12: (
        "Animalia",
        3,
        [
            ("Who wrote Animalia?", "Graeme Base"),
            ("When was Animalia originally published?", "1986"),
            ("How many copies of Animalia have been sold?", "three million"),
        ],
        [("When was the last edition of Animalia published?", "2012")],
    ),
    15: (
        "Ayn Rand",
        3,
        [
            ("What was Ayn Rand's birth name?", "Alisa Zinov'yevna Rosenbaum"),
            ("What philosophical system did Ayn Rand develop?", "Objectivism"),
            ("When did Rand move to the United States?", "1926"),
        ],
        [("When did Rand move back to Russia?", "1926")],
    ),
    16: (
        "Alain Connes",
        3,
        [
            ("At which Paris institution is Alain Connes a professor?", "Collège de France"),
            ("What does Alain Connes study?", "operator algebras"),
        ],
        [("What does Alain Connes teach at Harvard?", "operator algebras")],
    ),
    18: (
        "Algeria",
        3,
        [
            ("What is the capital of Algeria?", "Algiers"),
            ("On which sea's coast does Algeria lie?", "Mediterranean"),
        ],
        [("What is the capital of Morocco?", "Algiers")],
    ),
    34: (
        "Animal Farm",
        3,
        [
            ("Who wrote Animal Farm?", "George Orwell"),
            ("When was Animal Farm first published?", "17 August 1945"),
            ("Which revolution do the events of Animal Farm lead up to?", "Russian Revolution"),
        ],
        [],
    ),
    38: (
        "Aldous Huxley",
        3,
        [
            ("Which college did Aldous Huxley graduate from?", "Balliol College, Oxford"),
            ("Which novel of Huxley is set in a dystopian London?", "Brave New World"),
        ],
        [("Which novel of Huxley is set in Paris?", "Brave New World")],
    ),
}


def _answer(context: str, text: str) -> dict:
    start = context.find(text)
    if start < 0:
        raise ValueError(f"{text!r} is not in the context {context!r}")
    return {"text": text, "answer_start": start}


def build(version_2: bool) -> dict:
    documents = list(corpora.wikipedia_documents(fetch.path("gensim", "enwiki-shortened.xml.bz2")))
    articles = []
    for doc_index, (title, num_sentences, answerable, unanswerable) in QUESTIONS.items():
        context = " ".join(documents[doc_index][:num_sentences])
        qas = [
            {
                "id": f"q{doc_index}_{i}",
                "question": question,
                "answers": [_answer(context, answer)],
                **({"is_impossible": False} if version_2 else {}),
            }
            for i, (question, answer) in enumerate(answerable)
        ]
        if version_2:
            qas += [
                {
                    "id": f"q{doc_index}_x{i}",
                    "question": question,
                    "answers": [],
                    "plausible_answers": [_answer(context, plausible)],
                    "is_impossible": True,
                }
                for i, (question, plausible) in enumerate(unanswerable)
            ]
        articles.append({"title": title, "paragraphs": [{"context": context, "qas": qas}]})
    return {"version": "v2.0" if version_2 else "1.1", "data": articles}


def main() -> None:
    for name, version_2 in (("squad_v1.1.json", False), ("squad_v2.0.json", True)):
        text = json.dumps(build(version_2), indent=1, ensure_ascii=False) + "\n"
        (HERE / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
