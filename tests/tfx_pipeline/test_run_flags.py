"""`python -m tfx_pipeline.run`'s flags: checked before TensorFlow/TFX are imported, defaults a new
user needs none of (ML Metadata path, training length), a help line for every option; the run's
log file and console progress (`tfx_pipeline.summary.RunLog`); the Trainer's epochs -> steps.

No pipeline runs here (the pipeline tests check the summary of a real run).
"""

import dataclasses
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from absl import flags

from tfx_pipeline import configs
from tfx_pipeline.runners import build, checks, local, run_flags

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def classify_args(tmp_path) -> list[str]:
    """The README's classify command on folders that exist (a text_classification task)."""
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "dev"):
        (data / f"{split}.tsv").write_text("text\tlabel\na fine film\tpos\ndull\tneg\n")
    checkpoint = tmp_path / "minilm"
    checkpoint.mkdir()
    return [
        "--pipeline=classify",
        "--task_name=text_classification",
        f"--data_root={data}",
        f"--init_checkpoint={checkpoint}",
        f"--pipeline_root={tmp_path / 'runs/tfx_cls'}",
        f"--serving_model_dir={tmp_path / 'runs/serving'}",
        "--model_name=cls",
    ]


def _parsed(*args: str) -> flags.FlagValues:
    flag_values = flags.FlagValues()
    run_flags.define_flags(flag_values)
    flag_values(["run", *args])
    return flag_values


def _check(*args: str) -> str | None:
    """checks.check_flags() on `args`: the one-line error it exits with, or None."""
    try:
        checks.check_flags(_parsed(*args))
    except SystemExit as e:
        message = str(e.code)
        assert message.startswith("error: ") and "\n" not in message, message
        return message
    return None


# --- A: defaults and checks before the heavy imports --------------------------------------------


def test_readme_classify_command_needs_no_metadata_path(classify_args, tmp_path):
    assert _check(*classify_args) is None
    flag_values = _parsed(*classify_args)
    assert run_flags.metadata_path(flag_values) == str(
        tmp_path / "runs/tfx_cls" / "metadata.sqlite"
    )
    log = local.log_path(flag_values, 0.0)
    assert Path(log).parent == tmp_path / "runs/tfx_cls" / "logs"
    assert Path(log).name.startswith("run-") and log.endswith(".log")
    # An explicit one still wins.
    flag_values = _parsed(*classify_args, "--metadata_path=/tmp/m.sqlite")
    assert run_flags.metadata_path(flag_values) == "/tmp/m.sqlite"


def test_beam_runs_in_this_process_only_for_small_local_data(classify_args, tmp_path, monkeypatch):
    """Without --beam_pipeline_args: local/beam runners on a local --data_root under the limit
    run Beam in this process, larger or remote data and the cluster runners a worker process
    per core; given args always win."""
    in_memory = []  # Beam's defaults: configs.IN_MEMORY_BEAM_PIPELINE_ARGS
    per_core = list(configs.DEFAULT_BEAM_PIPELINE_ARGS)
    args, why = run_flags.beam_pipeline_args(_parsed(*classify_args))
    assert args == in_memory and why.startswith("in this process: --data_root holds 0.0 MiB")
    assert run_flags.beam_pipeline_args(_parsed(*classify_args, "--runner=beam"))[0] == in_memory
    size = sum(f.stat().st_size for f in (tmp_path / "data").iterdir())
    monkeypatch.setattr(configs, "IN_MEMORY_MAX_DATA_BYTES", size)  # at the limit: still small
    assert run_flags.beam_pipeline_args(_parsed(*classify_args))[0] == in_memory
    monkeypatch.setattr(configs, "IN_MEMORY_MAX_DATA_BYTES", size - 1)
    args, why = run_flags.beam_pipeline_args(_parsed(*classify_args))
    assert args == per_core and "more than" in why
    monkeypatch.undo()
    remote = [a for a in classify_args if not a.startswith("--data_root")] + [
        "--data_root=gs://b/d"
    ]
    assert run_flags.beam_pipeline_args(_parsed(*remote))[0] == per_core
    assert run_flags.beam_pipeline_args(_parsed(*classify_args, "--runner=kubeflow"))[0] == per_core
    given = "--beam_pipeline_args=--runner=DataflowRunner,--project=p"
    assert run_flags.beam_pipeline_args(_parsed(*classify_args, given)) == (
        ["--runner=DataflowRunner", "--project=p"],
        "--beam_pipeline_args",
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"init_checkpoint": None}, "error: --init_checkpoint required for --pipeline=classify"),
        (
            {"data_root": "/nonexistent/data"},
            "error: --data_root=/nonexistent/data: no such folder",
        ),
        ({"init_checkpoint": "/nonexistent/ckpt"}, "--init_checkpoint=/nonexistent/ckpt: no such"),
        ({"vocab_file": "/nonexistent/vocab.txt"}, "--vocab_file=/nonexistent/vocab.txt: no such"),
        ({"schema_dir": "/nonexistent"}, "error: --schema_dir=/nonexistent: no schema.pbtxt in it"),
        ({"task_name": "sst-3"}, "error: --task_name: unknown task 'sst-3'"),
        ({"task_name": "mnli"}, "no dev_matched.tsv (--task_name=mnli)"),  # not MNLI data
        ({"doc_stride": "64"}, "--doc_stride: not an option of --pipeline=classify"),
        ({"dupe_factor": "2"}, "(only of --pipeline=pretrain)"),
        (
            {"mixed_precision_dtype": "fp16"},
            "--mixed_precision_dtype: expected one of float16, bfl",
        ),
        ({"preset": "huge"}, "--preset: expected one of tiny, mini"),
        ({"distribution_strategy": "multi"}, "expected one of one_device, mirrored"),
        ({"num_train_epochs": "0"}, "--num_train_epochs: expected a positive number, got 0.0"),
        ({"train_batch_size": "0"}, "--train_batch_size: expected a positive number, got 0"),
        ({"warmup_proportion": "1.5"}, "--warmup_proportion: expected 0..1, got 1.5"),
        ({"pipeline_root": "gs://b/root"}, "--metadata_path required: --pipeline_root=gs://b/root"),
        ({"trainer_cpu": "8"}, "--trainer_cpu: only for --runner=kubeflow or vertex"),
    ],
)
def test_bad_flags_fail_with_one_line(classify_args, change, expected):
    args = [a for a in classify_args if a.split("=")[0][2:] not in change]
    args += [f"--{name}={value}" for name, value in change.items() if value is not None]
    message = _check(*args)
    assert message is not None and expected in message, message


def test_earlier_option_names_are_aliases_of_the_scripts_names(classify_args):
    # One name per concept across scripts and pipelines: --seed, --use_xla, --iterations_per_loop
    # (run_classifier's); the pipelines' earlier names still work.
    old = _parsed(*classify_args, "--random_seed=7", "--jit_compile", "--steps_per_loop=9")
    new = _parsed(*classify_args, "--seed=7", "--use_xla", "--iterations_per_loop=9")
    for flag_values in (old, new):
        assert (flag_values.seed, flag_values.use_xla, flag_values.iterations_per_loop) == (
            7,
            True,
            9,
        )
    assert {f.name for f in dataclasses.fields(configs.ClassificationOptions)} >= {
        "seed",
        "use_xla",
        "iterations_per_loop",
    }


def test_pretraining_needs_steps_and_local_flags_are_not_for_compiling(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    # Enough documents for both of the ExampleGen's splits (tests/tfx_pipeline/test_corpus_split.py).
    (corpus / "wiki.txt").write_text("".join(f"Document {i}.\nAnother one.\n\n" for i in range(12)))
    args = [
        "--pipeline=pretrain",
        f"--data_root={corpus}",
        f"--pipeline_root={tmp_path / 'root'}",
        f"--serving_model_dir={tmp_path / 'serving'}",
    ]
    assert _check(*args) is None
    assert "--train_steps: expected at least 1 for --pipeline=pretrain, got 0" in _check(
        *args, "--train_steps=0"
    )
    assert "--num_train_epochs: not an option of --pipeline=pretrain" in _check(
        *args, "--num_train_epochs=2"
    )
    cluster = [
        "--pipeline=pretrain",
        "--runner=kubeflow",
        "--image=registry.example.com/b:t",
        "--data_root=gs://b/corpus",
        "--pipeline_root=gs://b/root",
        "--serving_model_dir=gs://b/serving",
    ]
    assert _check(*cluster) is None
    assert _check(*cluster, "--metadata_path=m.sqlite", "--log_file=run.log") == (
        "error: --metadata_path, --log_file: only for --runner=local or beam"
    )


def _imported(stderr: str) -> set[str]:
    """Top-level packages `python -X importtime` reported importing."""
    return {
        line.split("|")[-1].strip().split(".")[0]
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (  # the README's classify command on a machine without its data: ~31 s before
            [
                "--pipeline=classify",
                "--task_name=text_classification",
                "--data_root=data-that-is-not-here/",
                "--init_checkpoint=ckpt-that-is-not-here",
                "--pipeline_root=runs/tfx_cls",
                "--serving_model_dir=runs/serving",
                "--model_name=cls",
            ],
            "error: --data_root=data-that-is-not-here/: no such folder",
        ),
        (
            ["--pipeline=squad", "--data_root=.", "--pipeline_root=r", "--serving_model_dir=s"],
            "error: --init_checkpoint required for --pipeline=squad --runner=local",
        ),
    ],
)
def test_a_bad_command_fails_before_tensorflow_or_tfx_is_imported(args, expected, tmp_path):
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tfx_pipeline.run", *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    messages = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert messages == [expected]
    imported = _imported(result.stderr)
    assert "absl" in imported  # importtime's report is there
    assert not imported & {"tensorflow", "tfx", "keras", "apache_beam", "ml_metadata"}, imported


# --- B: fine-tuning trains epochs ----------------------------------------------------------------


def test_fine_tuning_defaults_to_epochs_and_pretraining_to_steps():
    for options in (configs.ClassificationOptions(), configs.SquadOptions()):
        assert options.train_steps == 0 and options.num_train_epochs == 3.0
        config = configs.custom_config(options)
        assert config["num_train_epochs"] == 3.0 and config["train_steps"] == 0
    assert configs.PretrainingOptions().train_steps == 10_000
    assert not hasattr(configs.PretrainingOptions(), "num_train_epochs")


def _train_files(folder: Path, count: int) -> list[str]:
    """`count` records in two gzipped TFRecord files (as ExampleGen/Transform write them)."""
    import tensorflow as tf

    folder.mkdir(parents=True)
    for shard, records in enumerate((range(count // 2), range(count // 2, count))):
        with tf.io.TFRecordWriter(str(folder / f"data-{shard}.gz"), options="GZIP") as writer:
            for i in records:
                writer.write(f"example {i}".encode())
    return [str(folder / "*")]


def test_trainer_steps_are_epochs_times_examples_over_batch(tmp_path, caplog):
    from tfx_pipeline import trainer_lib

    files = _train_files(tmp_path / "Split-train", 140)
    options = {"num_train_epochs": 3.0, "train_batch_size": 16}
    # absl's logger too: an earlier SavedModel load in this process may have left absl at WARNING.
    caplog.set_level("INFO")
    caplog.set_level("INFO", logger="absl")
    fn_args = SimpleNamespace(train_steps=None, train_files=files)
    assert trainer_lib.num_train_steps(fn_args, options) == math.ceil(3 * 140 / 16) == 27
    assert "training steps: 27 = ceil(3 epochs x 140 training examples / batch size 16)" in (
        caplog.text
    )
    assert trainer_lib.num_train_steps(fn_args, {**options, "num_train_epochs": 0.05}) == 1
    # A step count (TrainArgs.num_steps, i.e. --train_steps) wins.
    assert trainer_lib.num_train_steps(SimpleNamespace(train_steps=60, train_files=files), {}) == 60
    with pytest.raises(ValueError, match="num_train_epochs"):
        trainer_lib.num_train_steps(fn_args, {**options, "num_train_epochs": 0})


# --- C: a help line per option -------------------------------------------------------------------


def test_every_option_flag_has_help_and_its_defaults():
    flag_values = _parsed()
    for cls in configs.PIPELINE_OPTIONS.values():
        for field in dataclasses.fields(cls):
            if field.name == "init_checkpoint":
                continue  # a flag of every pipeline, defined by runners/run_flags.py itself
            flag = flag_values[field.name]
            assert "see tfx_pipeline.configs" not in flag.help, field.name
            assert "default" in flag.help, (field.name, flag.help)
    assert (
        "(default: pretrain unset, classify 2e-05, squad 5e-05)"
        in flag_values["learning_rate"].help
    )
    assert "(default: pretrain 10000, classify 0, squad 0)" in flag_values["train_steps"].help
    assert "(only --pipeline=squad; default: squad 128)" in flag_values["doc_stride"].help
    assert "one of float16, bfloat16" in flag_values["mixed_precision_dtype"].help
    assert "text_classification" in flag_values["task_name"].help  # bert_tf.tasks.glue's tasks
    assert "default: <pipeline_root>/metadata.sqlite" in flag_values["metadata_path"].help
    # Defaults are valid.
    for pipeline, cls in configs.PIPELINE_OPTIONS.items():
        assert configs.check_options(pipeline, cls()) == [], pipeline


def test_help_shows_the_options_without_importing_tensorflow(tmp_path):
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tfx_pipeline.run", "--help"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr[-2000:]  # absl's --help exit status
    assert "--num_train_epochs: Passes over the training examples" in result.stdout
    assert "(see tfx_pipeline.configs)" not in result.stdout  # the old placeholder help
    assert not _imported(result.stderr) & {"tensorflow", "tfx"}


# --- D: the run's log file and console --------------------------------------------------------------


def test_run_log_keeps_the_console_to_progress_warnings_and_errors(tmp_path):
    """As `python -m tfx_pipeline.run` uses it (a fresh process: real file descriptors)."""
    log_file = tmp_path / "logs" / "run.log"
    log_file.parent.mkdir()
    script = textwrap.dedent(
        f"""
        import logging, os, subprocess, sys, warnings
        from absl import logging as absl_logging
        from tfx_pipeline.summary import RunLog

        absl_logging.use_absl_handler()  # as app.run does
        with RunLog({str(log_file)!r}) as log:
            log.print("full log: {log_file}")
            # TensorFlow's SavedModel code (Transform, Trainer) does this, with absl's flags
            # unparsed (its verbosity then reads as WARNING) when the run is not from app.run.
            verbosity = absl_logging.get_verbosity()
            absl_logging.set_verbosity(absl_logging.FATAL)
            absl_logging.set_verbosity(verbosity)
            absl_logging.info("Component Transform is running.")
            absl_logging.info("Using deployment config: a protobuf dump")
            absl_logging.info("Component Transform is finished.")
            absl_logging.info("Component Trainer is running.")
            absl_logging.info("A cached execution 12 is used.")
            absl_logging.info("Component Trainer is finished.")
            absl_logging.info("step 20/60: loss 1.5, learning rate 1e-4, ETA 3 s")
            logging.getLogger("apache_beam").warning("a Beam warning")
            warnings.warn("a Python warning")
            print("printed by a component")
            os.write(2, b"a C++ log line\\n")
            subprocess.run([sys.executable, "-c", "print('a Beam worker')"])
            absl_logging.error("a component failed")
            log.print("the summary")
        print("after the run")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out, err = result.stdout.splitlines(), result.stderr
    assert out[0] == f"full log: {log_file}"
    assert out[1] == "[0:00] Component Transform is running."
    assert out[2].startswith("[0:00, 0.") and out[2].endswith(
        " s] Component Transform is finished."
    )
    assert out[3:] == [
        "[0:00] Component Trainer is running.",
        "[0:00, cached] Component Trainer is finished.",
        "[0:00] step 20/60: loss 1.5, learning rate 1e-4, ETA 3 s",
        "the summary",
        "after the run",
    ]
    # `make demo` (demo.run, which runs this as a subprocess) still finds its progress.
    from demo import run as demo

    shown = [demo._PROGRESS.search(line) for line in out[1:6]]
    assert [m.group(1) for m in shown if m] == [line.split("] ", 1)[1] for line in out[1:6]]
    assert "UserWarning: a Python warning" in err and "ERROR: a component failed" in err
    for noise in ("protobuf dump", "Beam warning", "printed by", "C++", "Beam worker"):
        assert noise not in result.stdout + err, noise
    text = log_file.read_text()
    for everything in (
        "Component Transform is running.",
        "Using deployment config: a protobuf dump",
        "a Beam warning",
        "a Python warning",
        "printed by a component",
        "a C++ log line",
        "a Beam worker",
        "a component failed",
        "the summary",
    ):
        assert everything in text, everything
    assert "after the run" not in text


@pytest.mark.parametrize(
    ("use_mixed_precision", "dtype", "policy"),
    [(False, "bfloat16", "float32"), (True, "bfloat16", "mixed_bfloat16")],
)
def test_trainer_builds_the_model_under_the_scripts_precision_flags(
    use_mixed_precision, dtype, policy
):
    import keras

    from tfx_pipeline import trainer_lib

    options = dataclasses.asdict(configs.ClassificationOptions())
    options.update(use_mixed_precision=use_mixed_precision, mixed_precision_dtype=dtype)
    seen = []

    class Built(Exception):
        pass

    def build_model():
        seen.append(keras.mixed_precision.global_policy().name)
        raise Built

    try:
        with pytest.raises(Built):
            trainer_lib.train(build_model, None, None, options, 1, "/nonexistent")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert seen == [policy]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"vocab_file": "cn_clip"},
            "has 21128 tokens but the config of init_checkpoint={minilm} has vocab_size 30522",
        ),
        ({"max_seq_length": "1024"}, "error: --max_seq_length: expected 3..512"),
    ],
)
def test_model_source_is_checked_before_any_component_runs(
    classify_args, minilm_dir, chinese_vocab, change, expected
):
    """The Trainer's model-source checks (vocab size vs the checkpoint's config, max_seq_length
    vs its position embeddings) run when the pipeline is built, as the scripts' do."""
    args = [a for a in classify_args if not a.startswith("--init_checkpoint=")]
    args.append(f"--init_checkpoint={minilm_dir}")
    for name, value in change.items():
        args.append(f"--{name}={chinese_vocab if value == 'cn_clip' else value}")
    flag_values = _parsed(*args)
    checks.check_flags(flag_values)  # the light checks pass (they exit otherwise)
    with pytest.raises(SystemExit) as exited:
        build.build_pipeline(flag_values)
    message = str(exited.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    assert expected.format(minilm=minilm_dir) in message


def test_readme_gate_table_states_the_option_defaults():
    """The README's table of evaluator margins shows each flag's default as the code has it."""
    options = {
        "classify": configs.ClassificationOptions(),
        "squad": configs.SquadOptions(),
        "pretrain": configs.PretrainingOptions(),
    }
    rows = [
        line.split("|")[1:-1]
        for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith(tuple(f"| {p}" for p in options))
    ]
    checked = []
    for pipeline_cell, _, margin in rows:
        pipeline = pipeline_cell.split()[0].rstrip(",")
        for match in re.finditer(r"(?:`--(\w+)` )?([−-]?\d+(?:\.\d+)?)", margin):
            name = match.group(1) or checked[-1][1]  # "0.01" alone: the row above's flag
            value = float(match.group(2).replace("−", "-"))
            assert getattr(options[pipeline], name) == value, (pipeline_cell, name, value)
            checked.append((pipeline, name))
            break
    assert {p for p, _ in checked} == set(options) and len(checked) == len(rows) >= 8, checked
