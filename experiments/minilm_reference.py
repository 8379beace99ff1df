r"""The all-MiniLM-L6-v2 reference values the tests compare our model against, made by HF
transformers on PyTorch from the same folder (config.json, model.safetensors, tokenizer.json).

For each sentence: HF's token ids and tokens, the last layer at [CLS] (`sequence_output[0]`) and
the sentence-transformers embedding (attention-mask mean pooling, then L2 normalisation), whole
384-vectors; and the embeddings' cosine similarities. With `--lee_corpus` (gensim's `lee.cor`,
one news document per line) also the cosines of the 50 Lee documents' embeddings (each
truncated to 256 tokens, sentence-transformers' limit for this model), pair by pair: what the
demo correlates with the human ratings. It writes them, with the date, the
transformers / torch versions, the folder's config and its weights' sha256, as sorted-key JSON
(tests/testdata/minilm_reference.json, the tests' `minilm_reference` fixture).

It runs in the reference environment, never in .venv: it imports no project package and no
TensorFlow, only transformers, torch and absl.

    make reference-env && \
        .venv-ref/bin/python -m experiments.minilm_reference --minilm_dir=$HOME/.cache/bert_tfx/minilm \
        --lee_corpus=$HOME/.cache/bert_tfx/gensim/lee.cor
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
from pathlib import Path

from absl import app, flags

FLAGS = flags.FLAGS
DEFAULT_OUTPUT = (
    Path(__file__).resolve().parents[1] / "tests" / "testdata" / "minilm_reference.json"
)
REGENERATE = (
    "make reference-env && .venv-ref/bin/python -m experiments.minilm_reference "
    "--minilm_dir=<MiniLM folder> --lee_corpus=<gensim test data>/lee.cor"
)
LEE_MAX_LENGTH = 256  # all-MiniLM-L6-v2's max_seq_length in sentence-transformers
SENTENCES = (
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome and I loved it!",
)
# float32 carries ~7 significant digits; 7 decimals keep the file small and lose < 1e-7.
DECIMALS = 7


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`); called only when run as a program."""
    flags.DEFINE_string(
        "minilm_dir",
        None,
        "all-MiniLM-L6-v2 in HF layout (`make data` puts it in ~/.cache/bert_tfx/minilm).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "output",
        str(DEFAULT_OUTPUT),
        "Where the JSON goes (replaced atomically).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "lee_corpus",
        None,
        "gensim's lee.cor (`make data` puts it in ~/.cache/bert_tfx/gensim): adds the Lee "
        "documents' pairwise cosines.",
        flag_values=flag_values,
    )
    flags.mark_flag_as_required("minilm_dir", flag_values=flag_values)


def _vector(tensor) -> list[float]:
    return [round(float(x), DECIMALS) for x in tensor]


def _embed(model, tokenizer, text: str, max_length: int | None = None):
    """The sentence-transformers embedding of one text (one a batch: no padding)."""
    import torch

    inputs = tokenizer(
        [text], return_tensors="pt", truncation=bool(max_length), max_length=max_length
    )
    sequence = model(**inputs).last_hidden_state[0]
    mask = inputs["attention_mask"][0, :, None].to(sequence.dtype)
    embedding = torch.nn.functional.normalize((sequence * mask).sum(0) / mask.sum(), dim=0)
    return inputs, sequence, embedding


def reference(minilm_dir: Path, lee_corpus: Path | None = None) -> dict:
    """The reference values of `SENTENCES` (and of the Lee documents in `lee_corpus`, when
    given) for the HF BERT folder `minilm_dir`."""
    # Never the hub: everything comes from the folder.
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    # One thread: the same sums in the same order whatever the machine's core count.
    torch.set_num_threads(1)
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    model = transformers.BertModel.from_pretrained(minilm_dir).eval()
    outputs, embeddings = {}, []
    with torch.inference_mode():
        for sentence in SENTENCES:
            inputs, sequence, embedding = _embed(model, tokenizer, sentence)
            embeddings.append(embedding)
            ids = inputs["input_ids"][0].tolist()
            outputs[sentence] = {
                "input_ids": ids,
                "tokens": tokenizer.convert_ids_to_tokens(ids),
                "cls_sequence_output": _vector(sequence[0]),
                "embedding": _vector(embedding),
            }
        lee = None
        if lee_corpus is not None:
            lines = lee_corpus.read_text(encoding="utf-8", errors="replace").splitlines()
            documents = [" ".join(line.split()) for line in lines if line.strip()]
            vectors = torch.stack(
                [_embed(model, tokenizer, d, LEE_MAX_LENGTH)[2] for d in documents]
            )
            upper = torch.triu_indices(len(documents), len(documents), offset=1)
            lee = {
                "documents": len(documents),
                "max_length": LEE_MAX_LENGTH,
                "upper_triangle_cosines": _vector((vectors @ vectors.T)[upper[0], upper[1]]),
            }
    stacked = torch.stack(embeddings)
    result = {
        "made": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "regenerate": REGENERATE,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "config": json.loads((minilm_dir / "config.json").read_text(encoding="utf-8")),
        "model_safetensors_sha256": hashlib.sha256(
            (minilm_dir / "model.safetensors").read_bytes()
        ).hexdigest(),
        "sentences": list(SENTENCES),
        "outputs": outputs,
        "cosine_similarities": [_vector(row) for row in stacked @ stacked.T],
    }
    if lee is not None:
        result["lee"] = lee
    return result


def write_json(result: dict, output: Path) -> None:
    """Writes `result` as sorted-key JSON to `output` through a temp file and a rename."""
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)


def main(argv: list[str]) -> None:
    del argv
    output = Path(FLAGS.output).expanduser()
    lee_corpus = Path(FLAGS.lee_corpus).expanduser() if FLAGS.lee_corpus else None
    write_json(reference(Path(FLAGS.minilm_dir).expanduser(), lee_corpus), output)
    print(output)


if __name__ == "__main__":
    define_flags()
    app.run(main)
