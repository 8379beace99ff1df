"""Raw text -> our tokenizer -> our encoder reproduces all-MiniLM-L6-v2's reference outputs.

Reference values (the `minilm_reference` fixture): HF transformers on PyTorch with the same weights
(sentence-transformers recipe: attention-mask mean pooling, then L2 normalisation).
"""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.tasks.sentence_embedding import SentenceEncoder, mean_pool


@pytest.fixture(scope="module")
def minilm(minilm_dir) -> SentenceEncoder:
    return SentenceEncoder.from_pretrained(minilm_dir, seq_length=128)


def test_reference_ids_and_embedding_from_raw_text(minilm, minilm_reference):
    reference = minilm_reference["outputs"]["A man is eating food."]
    features = minilm.preprocessor(tf.constant(["A man is eating food."]))
    length = int(tf.reduce_sum(features["input_mask"][0]))
    assert features["input_word_ids"][0, :length].numpy().tolist() == reference["input_ids"]
    embedding = minilm.encode(["A man is eating food."])[0]
    np.testing.assert_allclose(embedding[:5], reference["embedding"][:5], atol=1e-4)
    assert np.linalg.norm(embedding) == pytest.approx(1.0, abs=1e-5)


def test_reference_cosine_similarities(minilm, minilm_reference):
    # food, bread, movie: "A man is eating food.", "... a piece of bread.", "The new movie ...".
    food, bread, movie = minilm.encode(minilm_reference["sentences"])
    similarities = minilm_reference["cosine_similarities"][0]
    assert float(food @ bread) == pytest.approx(similarities[1], abs=1e-4)
    assert float(food @ movie) == pytest.approx(similarities[2], abs=1e-4)


def test_padding_does_not_change_embeddings(minilm):
    short = "A man is eating food."
    alone = minilm.encode([short])[0]
    batched = minilm.encode([short, "a much longer sentence " * 10])[0]
    np.testing.assert_allclose(alone, batched, atol=1e-5)


def test_mean_pool_ignores_masked_positions():
    sequence = tf.constant([[[1.0, 0.0], [3.0, 0.0], [100.0, 100.0]]])
    pooled = mean_pool(sequence, tf.constant([[1, 1, 0]]), normalize=False)
    np.testing.assert_allclose(pooled.numpy(), [[2.0, 0.0]])


def test_encode_rejects_a_bare_string(minilm):
    with pytest.raises(TypeError, match="list of strings"):
        minilm.encode("A man is eating food.")
