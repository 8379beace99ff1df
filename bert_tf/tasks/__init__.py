"""The tasks BERT is trained on: data, loss, decoding and metrics of each.

- `pretraining/`: masked-LM + next-sentence prediction (records, reader, objective, Beam);
- `classification`: sentence(-pair) classification and regression input, loss, evaluation;
- `glue`: the GLUE tasks' files and official metrics, and generic text classification;
- `squad/`: SQuAD v1.1/v2.0 (windows, n-best decoding in Python and in TF ops, EM/F1);
- `sentence_embedding`: mean-pooled sentence vectors.
"""
