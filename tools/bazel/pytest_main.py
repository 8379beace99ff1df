"""Main of every generated py_test: runs pytest on one test file with the repository's config.

Usage (Bazel passes these as the target's args): pytest_main.py TEST_FILE PYPROJECT_TOML
Both paths are relative to the runfiles tree, Bazel's working directory for tests. pyproject.toml
brings the usual addopts (--import-mode=importlib, markers, warning filters).
"""

import os
import sys

import pytest


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.exit(f"usage: {argv[0]} TEST_FILE PYPROJECT_TOML (got {argv[1:]})")
    test_file, config = argv[1], argv[2]
    # Keep pytest's and Hypothesis's caches out of the (shared, rebuilt) runfiles tree.
    os.environ.setdefault(
        "HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(os.environ["TEST_TMPDIR"], ".hypothesis")
    )
    args = [test_file, "-c", config, "--rootdir", os.getcwd(), "-p", "no:cacheprovider"]
    # Bazel shows per-test-case results when the test writes JUnit XML here.
    if xml := os.environ.get("XML_OUTPUT_FILE"):
        args.append(f"--junitxml={xml}")
    return pytest.main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
