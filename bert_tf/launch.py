r"""Starts a multi-worker `tf.distribute` job as N local processes (one per worker).

    python -m bert_tf.launch --num_workers=2 -- bert_tf.run_pretraining \
        --distribution_strategy=multi_worker_mirrored --input_file=train.tfrecord ...

Each worker runs `python -m <script module> <script flags>` (or `python <script.py> ...`) with a
`TF_CONFIG` naming every worker's loopback address (free ports picked here) and its own index,
the way a cluster manager (Kubeflow's TFJob, Vertex AI) sets it on real hosts; worker 0 is the
chief (it writes checkpoints and logs, see `bert_tf.training.Trainer`). Every output line of a
worker is printed with a `[worker i]` prefix.

Fail fast: when a worker exits with a non-zero status or is killed, the launcher stops the
others (SIGTERM, then SIGKILL after `--grace_period_s`) and exits non-zero (the worker's status,
or 128 + signal), instead of leaving the survivors blocked in a collective op forever. SIGINT or
SIGTERM to the launcher is passed on the same way, and workers die with the launcher even on a
kill -9 of it (Linux parent-death signal). Rerunning the same command resumes from the chief's
last checkpoint.

Ports: a port picked free here can be taken by another process before its worker binds it.
A worker that says so (TensorFlow: "Could not start gRPC server") makes the launcher start the
whole cluster again on new ports, at most `MAX_RESTARTS` times (nothing has trained yet: the
workers bind before their first step).
"""

from __future__ import annotations

import collections
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from absl import flags

from bert_tf import flags_util
from bert_tf.net import BIND_ERROR, MAX_RESTARTS, free_port, stop_processes

FLAGS = flags.FLAGS
_PR_SET_PDEATHSIG = 1  # prctl option: signal this process when its parent dies


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines the launcher's flags (in `flag_values`); called when it runs as a program."""
    flags.DEFINE_integer("num_workers", 2, "Worker processes to start.", flag_values=flag_values)
    flags.DEFINE_string(
        "host", "127.0.0.1", "Address the workers listen on (loopback).", flag_values=flag_values
    )
    flags.DEFINE_float(
        "grace_period_s",
        10.0,
        "Seconds a worker gets to exit after SIGTERM before SIGKILL.",
        flag_values=flag_values,
    )


def tf_config(addresses: Sequence[str], index: int) -> str:
    """The `TF_CONFIG` of worker `index` in a cluster of `addresses` (worker 0 is the chief)."""
    return json.dumps(
        {"cluster": {"worker": list(addresses)}, "task": {"type": "worker", "index": index}}
    )


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when the launcher dies, however it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _status(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exited with status {returncode}"


class Cluster:
    """N worker processes of one command; see the module docstring."""

    def __init__(
        self,
        command: Sequence[str],
        num_workers: int,
        host: str = "127.0.0.1",
        grace_period_s: float = 10.0,
    ):
        if num_workers < 1:
            raise ValueError(f"--num_workers: expected a positive number, got {num_workers}")
        self.command, self.num_workers, self.host = list(command), num_workers, host
        self.grace_period_s = grace_period_s
        self.restarts = 0
        self._print_lock = threading.Lock()
        self._start()

    def _start(self) -> None:
        ports: list[int] = []
        while len(ports) < self.num_workers:  # the OS may hand out a just-released port again
            if (port := free_port(self.host)) not in ports:
                ports.append(port)
        self.addresses = [f"{self.host}:{port}" for port in ports]
        self.processes: list[subprocess.Popen] = []
        # The last lines of each worker: a bind failure is recognised by what it printed.
        self._recent = [collections.deque(maxlen=200) for _ in range(self.num_workers)]
        for index in range(self.num_workers):
            env = {
                **os.environ,
                "TF_CONFIG": tf_config(self.addresses, index),
                "PYTHONUNBUFFERED": "1",  # lines reach the launcher as they are written
            }
            self.processes.append(
                subprocess.Popen(
                    self.command,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    preexec_fn=_die_with_parent if sys.platform == "linux" else None,
                )
            )
        # Readers start after every fork: preexec_fn is unsafe once threads exist.
        self._readers = [
            threading.Thread(target=self._relay, args=(i, p), daemon=True)
            for i, p in enumerate(self.processes)
        ]
        for reader in self._readers:
            reader.start()
        for index, (address, process) in enumerate(
            zip(self.addresses, self.processes, strict=True)
        ):
            self.say(f"worker {index}: pid {process.pid}, {address}")

    def say(self, message: str) -> None:
        self._write(b"[launch] " + message.encode() + b"\n")

    def _write(self, data: bytes) -> None:
        with self._print_lock:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

    def _relay(self, index: int, process: subprocess.Popen) -> None:
        prefix = f"[worker {index}] ".encode()
        for line in process.stdout:
            self._recent[index].append(line)
            self._write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")

    def wait(self, poll_s: float = 0.1) -> int:
        """Waits for all workers; on the first failure stops the rest. Returns the exit status."""
        while True:
            codes = [p.poll() for p in self.processes]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                index, code = failed[0]
                self.say(f"worker {index} {_status(code)}: stopping the other workers")
                self.stop()
                if self._lost_a_port(index) and self.restarts < MAX_RESTARTS:
                    self.restarts += 1
                    self.say(
                        f"worker {index} could not bind {self.addresses[index]} (taken by "
                        f"another process?): starting the workers again on new ports "
                        f"({self.restarts}/{MAX_RESTARTS})"
                    )
                    self._start()
                    continue
                return code if code > 0 else 128 - code
            if all(c == 0 for c in codes):
                self._drain()
                self.say("all workers finished")
                return 0
            time.sleep(poll_s)

    def _lost_a_port(self, index: int) -> bool:
        return any(BIND_ERROR.encode() in line for line in self._recent[index])

    def stop(self) -> None:
        """SIGTERM to every running worker, SIGKILL to those still running after the grace."""
        stop_processes(self.processes, self.grace_period_s)
        self._drain()

    def _drain(self) -> None:
        """Lets the readers print what the workers wrote before exiting."""
        for reader in self._readers:
            reader.join(timeout=5)


def worker_command(argv: Sequence[str]) -> list[str]:
    """`python -m module flags...` (or `python script.py flags...`) from the launcher's args."""
    if not argv:
        raise ValueError(
            "expected the script after '--': python -m bert_tf.launch --num_workers=2 -- "
            "bert_tf.run_pretraining --distribution_strategy=multi_worker_mirrored ..."
        )
    script, *script_args = argv
    if script.endswith(".py"):
        return [sys.executable, script, *script_args]
    return [sys.executable, "-m", script, *script_args]


def main(argv: list[str]) -> None:
    try:
        command = worker_command(argv[1:])
        cluster = Cluster(command, FLAGS.num_workers, FLAGS.host, FLAGS.grace_period_s)
    except ValueError as e:
        sys.exit(f"error: {e}")

    def forward(signum, _frame):
        cluster.say(f"got {signal.Signals(signum).name}: stopping the workers")
        cluster.stop()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    sys.exit(cluster.wait())


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
