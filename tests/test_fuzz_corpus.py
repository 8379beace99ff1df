"""The fuzz corpus (seeds and every crash the fuzzer ever found) replayed as regression tests."""

from pathlib import Path

import pytest

from bench import fuzz

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

CASES = [
    (target, path)
    for target in fuzz.TARGETS
    for path in sorted((fuzz.CORPUS / target).glob("*"))
    if path.is_file()
]


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    made = {name: fuzz.make_target(name, tmp_path_factory.mktemp(name)) for name in fuzz.TARGETS}
    yield made
    for target in made.values():
        target.close()


def test_every_target_has_a_corpus():
    assert {target for target, _ in CASES} == set(fuzz.TARGETS)


@pytest.mark.parametrize(("target", "path"), CASES, ids=[f"{t}/{p.name}" for t, p in CASES])
def test_corpus_input_is_handled(targets, target: str, path: Path):
    targets[target](path.read_bytes())


def test_rest_oracle_flags_internal_errors(targets, monkeypatch):
    """A 5xx answer (an exception the API did not expect) is a fuzzing failure."""
    target = targets["rest_request"]

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(target.service, "get_model_status", broken)
    with pytest.raises(fuzz.FuzzFailure, match="HTTP 500"):
        target(b"GET /v1/models/affine HTTP/1.1\r\n\r\n")


def test_pretraining_oracle_flags_reader_disagreement(targets, monkeypatch):
    """A file the check passes must read back in full."""
    target = targets["pretraining_record"]
    monkeypatch.setattr(target, "_read", lambda path: 0)
    seed = (fuzz.CORPUS / "pretraining_record" / "seed-record").read_bytes()
    with pytest.raises(fuzz.FuzzFailure, match="check counted 1 records, the reader 0"):
        target(seed)
