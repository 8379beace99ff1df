"""bench/fuzz.py runs briefly under libFuzzer (atheris) and finds no crash (longer runs: by hand)."""

import json

import pytest

from bench import fuzz


@pytest.mark.parametrize("target", fuzz.TARGETS)
def test_brief_fuzz_run(run_main, tmp_path, target):
    output = tmp_path / "fuzz.json"
    run_main(
        fuzz,
        f"--target={target}",
        "--max_total_time=5",
        f"--crash_dir={tmp_path / 'crashes'}",
        f"--output_json={output}",
    )
    report = json.loads(output.read_text())
    assert report["crashes"] == [] and report["exit_code"] == 0
    assert report["inputs_tried"] >= report["seed_inputs"] > 0
    assert report["coverage_edges"] > 0
