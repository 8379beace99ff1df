"""`make demo`'s step 2 (the tests' demo run skips it with --nominilm): MiniLM's reference
numbers and the Lee document-similarity scores, against HF transformers' own
(tests/testdata/minilm_reference.json, made by experiments/minilm_reference.py)."""

import re

import numpy as np
import pytest
from scipy import stats

from bert_tf.data import corpora
from demo import run as demo


def test_the_demos_reference_numbers_are_hf_transformers(minilm_reference):
    output = minilm_reference["outputs"][demo.SENTENCES[0]]
    assert output["input_ids"] == demo.REFERENCE_IDS
    np.testing.assert_allclose(
        demo.REFERENCE_CLS_FIRST5, output["cls_sequence_output"][:5], atol=1e-5
    )


def test_minilm_step_scores_lee_like_hf_transformers(
    minilm_dir, gensim_dir, minilm_reference, capsys
):
    """The step's Pearson and Spearman are those of HF's embeddings of the same 50 documents
    against the human ratings: a document or rating out of place, another truncation or
    pooling moves them."""
    demo._minilm(minilm_dir, gensim_dir)
    printed = capsys.readouterr().out
    assert "matches the HF/PyTorch reference (atol 1e-4): yes" in printed
    found = re.search(
        r"Lee et al\. document similarity \((\d+) news documents, human ratings\): "
        r"Pearson (-?[\d.]+), Spearman (-?[\d.]+)",
        printed,
    )
    assert found, printed
    lee = minilm_reference["lee"]
    documents = list(corpora.lee_documents(gensim_dir / "lee.cor"))
    assert int(found[1]) == lee["documents"] == len(documents) == 50
    ratings = np.loadtxt(gensim_dir / "similarities0-1.txt")
    human = ratings[np.triu_indices(len(documents), k=1)]
    hf = np.array(lee["upper_triangle_cosines"])
    assert float(found[2]) == pytest.approx(stats.pearsonr(hf, human)[0], abs=1e-3)
    assert float(found[3]) == pytest.approx(stats.spearmanr(hf, human)[0], abs=1e-3)
    # and the step scores what its encoder gives: the correlation is well above none.
    assert float(found[2]) > 0.5
