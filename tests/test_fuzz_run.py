"""bench/fuzz.py runs briefly under libFuzzer (atheris) and finds no crash (longer runs: by hand)."""

import json

import numpy as np
import pytest

from bench import fuzz

# A pinned seed: the brief runs here check the harness, not hunt bugs by chance in CI (a find
# there fails an unrelated change); new finds come from long runs by hand (bench/fuzz.py).


@pytest.mark.parametrize("target", fuzz.TARGETS)
def test_brief_fuzz_run(run_main, tmp_path, target):
    output = tmp_path / "fuzz.json"
    run_main(
        fuzz,
        f"--target={target}",
        "--max_total_time=5",
        "--seed=1",
        f"--crash_dir={tmp_path / 'crashes'}",
        f"--output_json={output}",
    )
    report = json.loads(output.read_text())
    assert report["crashes"] == [] and report["exit_code"] == 0
    assert report["inputs_tried"] >= report["seed_inputs"] > 0
    assert report["coverage_edges"] > 0


def test_the_memory_limit_is_the_workers_own(run_main, tmp_path):
    """A caller bigger than the limit (a long-lived pytest worker) does not count against it."""
    limit_mb = 1536  # the worker itself peaks near 700 MB
    ballast = np.ones((limit_mb + 512) * 2**20, dtype=np.uint8)  # touched, so resident
    output = tmp_path / "fuzz.json"
    run_main(
        fuzz,
        "--target=rest_request",
        "--max_total_time=2",
        "--seed=1",
        f"--rss_limit_mb={limit_mb}",
        f"--crash_dir={tmp_path / 'crashes'}",
        f"--output_json={output}",
    )
    del ballast
    report = json.loads(output.read_text())
    assert report["crashes"] == [] and report["exit_code"] == 0
    assert 0 < report["peak_rss_mb"] < limit_mb
