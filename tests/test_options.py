"""Flag groups defined once (bert_tf.options) and the model source resolved once
(bert_tf.model_source): every script has the same flags with the same help, and fails the same
way on the same mistake."""

from __future__ import annotations

import dataclasses
import json

import pytest
from absl import flags

from bert_tf import (
    extract_features,
    model_source,
    options,
    run_classifier,
    run_pretraining,
    run_squad,
    testing,
)
from serving import export

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

# Each script with the flag groups it defines.
SCRIPTS = {
    run_classifier: (
        options.ModelSourceOptions,
        options.FineTuningLoopOptions,
        options.PrecisionOptions,
    ),
    run_squad: (
        options.ModelSourceOptions,
        options.FineTuningLoopOptions,
        options.PrecisionOptions,
    ),
    run_pretraining: (options.TrainingLoopOptions, options.PrecisionOptions),
    extract_features: (options.ModelSourceOptions,),
    export: (options.ModelSourceOptions,),
}


def _flag_values(module) -> flags.FlagValues:
    flag_values = flags.FlagValues()
    module.define_flags(flag_values)
    return flag_values


def test_every_script_defines_each_group_flag_from_the_one_field():
    for module, groups in SCRIPTS.items():
        flag_values = _flag_values(module)
        for group in groups:
            for field in dataclasses.fields(group):
                flag = flag_values[field.name]
                # The field's help (a script may append a note), its choices as an enum.
                text = flag.help.split(">: ", 1)[-1]  # absl starts an enum's with <a|b>:
                assert text.startswith(options.help_text(field)[:-1]), (module, field.name)
                if field.metadata["choices"]:
                    assert flag.parser.enum_values == list(field.metadata["choices"])


def test_script_defaults_override_the_field_default_only_for_that_script():
    assert _flag_values(run_squad)["max_seq_length"].default == 384  # google's run_squad
    assert _flag_values(run_squad)["seed"].default == 12345
    assert _flag_values(run_classifier)["max_seq_length"].default == 128
    assert _flag_values(run_classifier)["seed"].default is None
    assert "task_info.json" in _flag_values(export)["max_seq_length"].help
    with pytest.raises(TypeError, match="no options"):
        options.define_flags(options.PrecisionOptions, flags.FlagValues(), learning_rate=1.0)


@pytest.mark.parametrize(
    "value, expected",
    [
        ({"learning_rate": 0.0}, "--learning_rate: expected a positive number, got 0.0"),
        ({"learning_rate": float("nan")}, "--learning_rate: expected a positive number, got nan"),
        ({"warmup_proportion": 1.5}, "--warmup_proportion: expected 0..1, got 1.5"),
        ({"warmup_proportion": float("nan")}, "--warmup_proportion: expected 0..1, got nan"),
        ({"optimizer": "sgd"}, "--optimizer: expected one of adamw, lamb, got sgd"),
        ({"gradient_accumulation_steps": 0}, "--gradient_accumulation_steps: expected a positive"),
    ],
)
def test_bad_values_are_one_line_errors_naming_the_flag(value, expected):
    loop = options.FineTuningLoopOptions(**value)
    with pytest.raises(ValueError) as error:
        options.check(loop)
    assert str(error.value).startswith(expected)
    options.check(options.FineTuningLoopOptions())  # the defaults are fine


def test_from_flags_reads_the_parsed_values_and_the_policy():
    flag_values = _flag_values(run_classifier)
    flag_values(["prog", "--use_mixed_precision", "--mixed_precision_dtype=bfloat16"])
    precision = options.from_flags(options.PrecisionOptions, flag_values)
    assert precision.policy == "mixed_bfloat16"
    assert options.PrecisionOptions().policy == "float32"


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, vocab_file):
    """A folder with a bert_config.json (vocab_size 30522, 64 positions) and the real vocab."""
    folder = tmp_path_factory.mktemp("model")
    config = testing.micro_config(vocab_size=30522, max_position_embeddings=64)
    config.to_json_file(folder / "bert_config.json")
    (folder / "vocab.txt").write_bytes(vocab_file.read_bytes())
    return folder


def test_resolve_defaults_to_the_files_beside_the_checkpoint(model_folder):
    source = model_source.resolve(str(model_folder / "ckpt-1"), max_seq_length=64)
    assert source.config_file == str(model_folder / "bert_config.json")
    assert source.vocab_file == str(model_folder / "vocab.txt")
    assert len(source.vocab) == source.config.vocab_size == 30522


def test_resolve_reads_an_hf_config_json(tmp_path, model_folder):
    config = testing.micro_config(vocab_size=30522, max_position_embeddings=64)
    (tmp_path / "config.json").write_text(json.dumps(config.to_hf_config()))
    (tmp_path / "vocab.txt").write_bytes((model_folder / "vocab.txt").read_bytes())
    assert model_source.resolve(str(tmp_path)).config == config


def _wrong_vocab(folder):
    path = folder / "short_vocab.txt"
    path.write_text("".join(line + "\n" for line in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    return path


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"max_seq_length": 65},
            r"--max_seq_length: expected 3\.\.64 \(max_position_embeddings in ",
        ),
        ({"max_seq_length": 2}, r"--max_seq_length: expected 3\.\.64"),
        ({"vocab_file": "short"}, r"--vocab_file=.*short_vocab.txt has 5 tokens but .* 30522"),
        ({"vocab_file": "missing"}, r"--vocab_file=.*missing.txt: no such file"),
        ({"bert_config_file": None, "init_checkpoint": "/nowhere/ckpt"}, "--bert_config_file: not"),
    ],
)
def test_resolve_errors(model_folder, tmp_path, kwargs, message):
    args = {"init_checkpoint": str(model_folder), "max_seq_length": 32, **kwargs}
    if args.get("vocab_file") == "short":
        args["vocab_file"] = str(_wrong_vocab(tmp_path))
    elif args.get("vocab_file") == "missing":
        args["vocab_file"] = str(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match=message) as error:
        model_source.resolve(**args)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("module", [run_classifier, run_squad, extract_features])
def test_every_script_rejects_the_vocab_of_another_model_the_same_way(
    run_main, model_folder, tmp_path, module
):
    """Each script once checked the vocab size its own way (or not at all): now one check."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.tsv").write_text("sentence\tlabel\na fine film\t1\n")
    (data / "dev.tsv").write_text("sentence\tlabel\na fine film\t1\n")
    squad_file = data / "train.json"
    squad_file.write_text(json.dumps({"version": "1.1", "data": []}))
    common = [
        f"--init_checkpoint={model_folder}",
        f"--vocab_file={_wrong_vocab(tmp_path)}",
        f"--max_seq_length={32}",
    ]
    argv = {
        run_classifier: ["--task_name=sst-2", f"--data_dir={data}", "--do_train"],
        run_squad: ["--do_train", f"--train_file={squad_file}", "--max_query_length=8"],
        extract_features: [f"--input_file={data / 'train.tsv'}", "--layers=-1"],
    }[module]
    out = tmp_path / "out"
    extra = [f"--output_file={out / 'f.jsonl'}"] if module is extract_features else []
    extra += [] if module is extract_features else [f"--output_dir={out}"]
    with pytest.raises((SystemExit, ValueError)) as error:
        run_main(module, *common, *argv, *extra)
    text = str(error.value.code if isinstance(error.value, SystemExit) else error.value)
    assert "has 5 tokens but" in text and "vocab_size 30522" in text, text
    assert not out.exists()
