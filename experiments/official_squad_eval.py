r"""Scores SQuAD predictions with the official evaluation scripts (TF Model Garden's copies,
fetched from the `tf-models-official` wheel into the cache), independently of bert_tf.tasks.squad.

    python -m experiments.official_squad_eval --version=2.0 --dataset_file=dev-v2.0.json \
        --prediction_file=predictions.json --na_prob_file=null_odds.json --output_file=eval.json
"""

from __future__ import annotations

import importlib.util
import json

from absl import flags

from bert_tf import flags_util
from bert_tf.data import fetch
from experiments import report

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`); called only when run as a program."""

    def define(kind, name, default, help_, **kwargs):
        getattr(flags, f"DEFINE_{kind}")(
            name, default, help=help_, flag_values=flag_values, **kwargs
        )

    define("enum", "version", "1.1", "SQuAD version.", enum_values=["1.1", "2.0"])
    define("string", "dataset_file", None, "SQuAD JSON with the gold answers.")
    define("string", "prediction_file", None, "predictions.json (question id -> answer text).")
    define("string", "na_prob_file", None, "v2.0: null_odds.json (question id -> no-answer score).")
    define("string", "output_file", None, "Where the JSON result goes (optional).")


def main(argv: list[str]) -> None:
    del argv
    name = f"squad_evaluate_v{FLAGS.version.replace('.', '_')}"
    spec = importlib.util.spec_from_file_location(name, fetch.path("squad_scripts", f"{name}.py"))
    official = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(official)
    with open(FLAGS.dataset_file, encoding="utf-8") as f:
        dataset = json.load(f)["data"]
    with open(FLAGS.prediction_file, encoding="utf-8") as f:
        predictions = json.load(f)
    if FLAGS.version == "1.1":
        result = official.evaluate(dataset, predictions)
    else:
        na_probs = None
        if FLAGS.na_prob_file:
            with open(FLAGS.na_prob_file, encoding="utf-8") as f:
                na_probs = json.load(f)
        result = official.evaluate(dataset, predictions, na_probs)
    report({"official_script": name, **result}, FLAGS.output_file)


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
