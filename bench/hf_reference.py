"""The HF transformers side of the benchmarks: `bench.hf_worker` in the reference environment.

The worker (`python -m bench.hf_worker`, in `.venv-ref`: torch and transformers, never imported
by this project) answers one JSON request per line; `HFWorker` is this side of that pipe. The
worker times its own calls, so the pipe is not counted in HF's numbers.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE_PYTHON = REPO / ".venv-ref" / "bin" / "python"


class HFWorker:
    """`python -m bench.hf_worker` in the reference environment, one JSON request at a time."""

    def __init__(self, python: str | os.PathLike, log_path: Path):
        python = Path(python)
        if not python.is_file():
            raise ValueError(
                f"--reference_python={python}: no such interpreter; `make reference-env` "
                "creates .venv-ref (HF transformers on CPU torch)"
            )
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115  (closed in close())
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        self.process = subprocess.Popen(
            [str(python), "-m", "bench.hf_worker"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )

    def request(self, op: str, **fields) -> dict:
        """Sends one request and returns the reply; RuntimeError naming the op on failure."""
        try:
            self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except (BrokenPipeError, ValueError):  # the worker died / its pipe is closed
            line = ""
        if not line:
            self._log.flush()
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"HF worker exited during {op!r}; its log ends:\n{tail}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"HF worker, {op!r}: {reply['error']}")
        return reply

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def __enter__(self) -> HFWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
