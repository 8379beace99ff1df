"""`make check` selects the files marked `fast` (`pytestmark = pytest.mark.fast`); CI's Bazel
pass runs tests/BUILD's fast list. The two must name the same files, and the modelling core
(encoder, heads, tokenization, training) is among them (#38)."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

TESTS = Path(__file__).resolve().parent
MARK = re.compile(r"^pytestmark = pytest\.mark\.fast\b", re.M)


def _build_fast_list() -> set[str]:
    block = re.search(r"^    fast = \[(.*?)^    \],", (TESTS / "BUILD").read_text(), re.S | re.M)
    assert block, "tests/BUILD has no fast list"
    return set(re.findall(r'"([^"]+\.py)"', block.group(1)))


def _marked() -> set[str]:
    return {
        path.relative_to(TESTS).as_posix()
        for path in TESTS.rglob("test_*.py")
        if MARK.search(path.read_text())
    }


def test_build_fast_list_is_the_marked_files():
    listed, marked = _build_fast_list(), _marked()
    assert listed == marked, (
        f"only in tests/BUILD: {sorted(listed - marked)}; only marked: {sorted(marked - listed)}"
    )


def test_make_check_covers_the_modelling_core():
    core = {
        "modeling/test_encoder.py",
        "modeling/test_heads.py",
        "text/test_tokenization.py",
        "training/test_training.py",
    }
    assert core <= _marked()
    makefile = (TESTS.parent / "Makefile").read_text()
    check = re.search(r"^check:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "-m fast" in check and "BUILD" not in check
