"""Client for TF Serving (the real one or ours): a small Python API and a command line.

    python -m serving.client --server=localhost:8500 --model_name=sst2 \\
        --text="a masterful, moving film"
    python -m serving.client --model_name=mnli --text="A dog runs." --text_b="An animal moves."
    python -m serving.client --rest --server=localhost:8501 --model_name=sst2 \\
        --text="a gem" --text="dull, flat"
    python -m serving.client --model_name=sst2 --signature_name=classify --text_file=reviews.txt
    python -m serving.client --model_name=squad --text="Who wrote it?" \\
        --text_b="The book was written by Jane Austen."

`--text` is one text (commas included); repeat it for several, or give `--text_file` (UTF-8, one
input a line: `text` or `text<TAB>text_b`). A classifier's `text_b` defaults to "" (a single
sentence); a SQuAD model's second text is the context, which is required. A signature whose
method is classify/regress (e.g. `--signature_name=classify`) gets tf.Examples with `text_a`
(+ `text_b`) and prints label/score pairs (or values). `--server` is `host:port` for both APIs
(a full `http://` URL also works with `--rest`); the default port is 8500, or 8501 with `--rest`.

The command line never imports TensorFlow (only grpc, numpy and the generated protos), so a call
takes about a second instead of TensorFlow's import time.

Python API:

>>> with ServingClient("localhost:8500") as client:
...     client.predict("bert_encoder", {"text": ["hello world"]})["pooled_output"].shape
(1, 384)
"""

# (This docstring is the command line's --help; the code is serving/client/cli.py. Importing the
# package first has loaded TF Serving's protos without TensorFlow: serving/client/protos.py.)

from bert_tf import flags_util
from serving.client import cli

if __name__ == "__main__":
    cli.define_flags()
    flags_util.run(cli.main, literal=("text", "text_b"))
