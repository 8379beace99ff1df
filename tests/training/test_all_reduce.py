"""The Trainer's gradient all-reduce with several replicas: one per step, counted in the compiled
step's graph, and the same update as one replica with the same global batch.

Each case runs in a fresh process: two replicas on a CPU need two logical devices, which
TensorFlow configures only before its runtime starts. `bench.gpu_check` (the device check a
session runs on GPUs) does the training and the counting; on CPU it mirrors over logical
devices with tf.distribute's collective all-reduce (MultiWorkerMirroredStrategy's), so every
all-reduce is CollectiveReduceV2 ops in the graph, one per replica and bucket.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_gpu_check_on_two_cpu_replicas_one_all_reduce_and_one_replicas_update(tmp_path):
    out = tmp_path / "check.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.gpu_check",
            "--preset=tiny",
            "--seq_length=16",
            "--batch_size=2",
            "--steps_per_call=1",
            "--rounds=1",
            "--cpu_replicas=2",
            f"--out={out}",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=600,
    )
    result = json.loads(out.read_text())
    step = result["step"]
    assert (step["replicas"], step["global_batch"], step["device"]) == (2, 4, "cpu")
    assert step["median_step_s"] > 0 and 0 < step["mfu_vs_measured_matmul"] < 1
    equality = result["equality"]
    # The same global batch of 8, 4 per replica: one replica's losses and weights, up to
    # float32 round-off (the sum of two halves vs one mean).
    assert equality["equal"], equality
    # The bfloat16 run's gradient collectives: one all-reduce, one op on each replica.
    assert (equality["gradient_all_reduce_ops"], equality["all_reduces_per_step"]) == (2, 1)


def test_another_keras_optimizer_gets_keras_own_all_reduce_too(tmp_path):
    """A Keras optimizer without the Trainer's hook reduces again after the Trainer's clip:
    one bfloat16 all-reduce (the Trainer's) and more float32 collectives than ours has."""
    script = textwrap.dedent(
        """
        import json, sys
        from bench import gpu_check
        names = gpu_check.devices(2)
        strategy = gpu_check.collective_strategy(names[:2])
        print(json.dumps({kind: gpu_check.train_micro(strategy, kind, "bfloat16",
                                                      f"{sys.argv[1]}/{kind}")["collectives"]
                          for kind in ("ours", "keras")}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    collectives = json.loads(result.stdout.strip().splitlines()[-1])
    assert collectives["ours"].count("bfloat16") == collectives["keras"].count("bfloat16") == 2
    assert collectives["keras"].count("float32") > collectives["ours"].count("float32")
