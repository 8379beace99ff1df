"""WordPiece tokenization speed and parity: `bert_tf.text.tokenization` against HF `tokenizers`
(Rust).

Both tokenize the same Wikipedia sentences with the same uncased vocab, no special tokens:
- batched: ours as the training input pipeline runs it, a `tf.data` map of `BertTokenizer` over
  batches of `batch_size` sentences (parallel calls, AUTOTUNE); HF `BertWordPieceTokenizer.
  encode_batch` on the same batches (its own thread pool);
- one by one: ours one `tf.function` call per sentence (as a serving signature gets it), HF
  `encode` per sentence.
Ids are compared sentence by sentence (the first mismatches are reported).
"""

from __future__ import annotations

import tensorflow as tf

from bench import data, timing
from bert_tf.text.tokenization import BertTokenizer

OURS, REFERENCE = "ours", "hf_tokenizers"


def hf_tokenizer():
    from tokenizers import BertWordPieceTokenizer

    return BertWordPieceTokenizer(str(data.vocab_file()), lowercase=True)


def run(num_sentences: int | None, one_by_one_sentences: int, batch_size: int, rounds: int) -> dict:
    """The tokenize suite (see the module docstring and bench.run's flags); `num_sentences`
    None: the whole corpus."""
    sentences = data.sentences(num_sentences or len(data.wiki_sentences()))
    ours = BertTokenizer(data.vocab_file(), lower_case=True)
    hf = hf_tokenizer()

    # Parity, and the token counts for tokens/s.
    our_ids = ours(tf.constant(sentences)).to_list()
    hf_ids = [e.ids for e in hf.encode_batch(sentences, add_special_tokens=False)]
    mismatches = [i for i, (a, b) in enumerate(zip(our_ids, hf_ids, strict=True)) if a != b]
    num_tokens = {OURS: sum(map(len, our_ids)), REFERENCE: sum(map(len, hf_ids))}

    dataset = (
        tf.data.Dataset.from_tensor_slices(sentences)
        .batch(batch_size)
        .map(ours, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
    )
    batches = [sentences[i : i + batch_size] for i in range(0, len(sentences), batch_size)]

    def ours_batched() -> None:
        for ids in dataset:
            del ids

    def hf_batched() -> None:
        for batch in batches:
            hf.encode_batch(batch, add_special_tokens=False)

    single = sentences[:one_by_one_sentences]
    single_tensors = [tf.constant([s]) for s in single]
    tokenize_one = tf.function(ours, input_signature=[tf.TensorSpec([None], tf.string)])

    def ours_single() -> None:
        for s in single_tensors:
            tokenize_one(s).flat_values.numpy()

    def hf_single() -> None:
        for s in single:
            hf.encode(s, add_special_tokens=False)

    result = {
        "num_sentences": len(sentences),
        "one_by_one_sentences": len(single),
        "batch_size": batch_size,
        "num_tokens": num_tokens,
        "ids_identical": not mismatches,
        "mismatched_sentences": len(mismatches),
        "mismatch_examples": [
            {"sentence": sentences[i], OURS: our_ids[i], REFERENCE: hf_ids[i]}
            for i in mismatches[:3]
        ],
    }
    single_tokens = {
        OURS: sum(map(len, our_ids[: len(single)])),
        REFERENCE: sum(map(len, hf_ids[: len(single)])),
    }
    for mode, candidates, count, tokens in (
        ("batched", {OURS: ours_batched, REFERENCE: hf_batched}, len(sentences), num_tokens),
        ("one_by_one", {OURS: ours_single, REFERENCE: hf_single}, len(single), single_tokens),
    ):
        samples = timing.alternate(candidates, rounds=rounds, warmup=1, label=f"tokenize {mode}")
        result[mode] = _rates(samples, count, tokens)
        result[mode]["ratio"] = (
            result[mode][OURS]["sentences_per_s"]["median"]
            / result[mode][REFERENCE]["sentences_per_s"]["median"]
        )
    return result


def _rates(
    samples: dict[str, timing.Samples], sentences: int, tokens: dict[str, int]
) -> dict[str, dict]:
    return {
        name: {
            "sentences_per_s": timing.summarize([sentences / s for s in sample.seconds]),
            "tokens_per_s": timing.summarize([tokens[name] / s for s in sample.seconds]),
        }
        for name, sample in samples.items()
    }
