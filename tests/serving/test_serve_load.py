"""bench/serve_load.py, briefly: 32 concurrent gRPC clients, a hot swap, zero failures, flat RSS."""

import json

from bench import serve_load

# The server's RSS may grow by what version 2 and the load's buffers take (a tiny model: a few
# MB), not by anything proportional to the requests served.
MAX_RSS_GROWTH_MB = 150


def test_bounded_load_with_hot_swap(run_main, tmp_path):
    output = tmp_path / "load.json"
    run_main(
        serve_load,
        "--clients=32",
        "--requests=30",
        "--duration=600",
        f"--work_dir={tmp_path / 'work'}",
        f"--output_json={output}",
    )
    report = json.loads(output.read_text())
    assert report["requests_failed"] == 0, report["failures_by_code"]
    assert report["requests_sent"] >= 32 * 30
    assert not report["stopped_by_duration"]
    assert report["new_version_served"]
    assert set(report["versions_served"]) == {"1", "2"}
    assert sum(report["versions_served"].values()) == report["requests_sent"]
    assert report["swap_after_requests"] >= 32 * 30 // 2
    assert report["server_exit_code"] == 0
    assert report["server_rss_growth_mb"] < MAX_RSS_GROWTH_MB, report["server_rss_mb"]
    # Little's law: 32 clients always waiting on a request => mean latency = 32 / throughput
    # (less when the wall clock holds idle time). The median is at most twice the mean for any
    # non-negative latencies; a unit slip (seconds for ms) or latencies timed over the wrong
    # span breaks one of the bounds.
    mean_ms = 32 * 1000 / report["throughput_rps"]
    latency = report["latency_ms"]
    assert 0.02 * mean_ms <= latency["p50"] <= 2 * mean_ms, (latency, report["throughput_rps"])
