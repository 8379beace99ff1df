"""The data fetcher: manifest verification, atomic placement, clear errors (no network needed)."""

import hashlib
import zipfile
from pathlib import Path

import pytest

from bert_tf.data import fetch

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)


def _fake_source(content: bytes, size: int | None = None) -> fetch.Source:
    return fetch.Source(
        name="fake",
        requirement="fake-package==1.0",
        sdist=False,
        description="test",
        members=(
            fetch.Member(
                "pkg/data/file.txt",
                "file.txt",
                len(content) if size is None else size,
                hashlib.sha256(b"expected content").hexdigest(),
            ),
        ),
    )


def _install_fake(monkeypatch, tmp_path, archive_content: bytes, calls: list) -> None:
    monkeypatch.setenv("BERT_TFX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(fetch.SOURCES, "fake", _fake_source(b"expected content"))

    def fake_download(source, into: Path) -> Path:
        calls.append(source.requirement)
        archive = into / "fake_package-1.0-py3-none-any.whl"
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("pkg/data/file.txt", archive_content)
        return archive

    monkeypatch.setattr(fetch, "_download", fake_download)


def test_fetch_verifies_places_and_is_idempotent(monkeypatch, tmp_path):
    calls: list = []
    _install_fake(monkeypatch, tmp_path, b"expected content", calls)
    folder = fetch.fetch("fake")
    assert (folder / "file.txt").read_bytes() == b"expected content"
    assert fetch.fetch("fake") == folder
    assert calls == ["fake-package==1.0"], "a verified file must not be downloaded again"
    assert [p.name for p in folder.iterdir()] == ["file.txt"], "no temp files left behind"


def test_fetch_rejects_content_that_does_not_match_the_manifest(monkeypatch, tmp_path):
    _install_fake(monkeypatch, tmp_path, b"tampered content", [])
    with pytest.raises(fetch.FetchError, match=r"does not match the manifest.*sha256"):
        fetch.fetch("fake")
    assert not (tmp_path / "cache" / "fake" / "file.txt").exists()
    assert not list((tmp_path / "cache" / "fake").iterdir()), "nothing half-written is left"


def test_a_corrupted_cached_file_is_fetched_again(monkeypatch, tmp_path):
    calls: list = []
    _install_fake(monkeypatch, tmp_path, b"expected content", calls)
    folder = fetch.fetch("fake")
    (folder / "file.txt").write_bytes(b"expected conTent")
    fetch.fetch("fake")
    assert (folder / "file.txt").read_bytes() == b"expected content"
    assert len(calls) == 2


def test_unknown_source_and_file_errors_name_what_exists():
    with pytest.raises(ValueError, match=r"unknown data source 'nope'; known: .*minilm"):
        fetch.fetch("nope")
    with pytest.raises(ValueError, match=r"source 'minilm' has no file 'x.bin'"):
        fetch.path("minilm", "x.bin")


def test_real_sources_are_in_the_cache_and_verified(minilm_dir, gensim_dir):
    for name in ("minilm", "gensim"):
        for member in fetch.SOURCES[name].members:
            path = fetch.cache_dir() / name / member.name
            assert path.stat().st_size == member.size


def test_a_member_without_archive_path_is_the_archive_itself(monkeypatch, tmp_path):
    """Pure-Python wheels (Model Garden's, gin-config's) are kept whole: importable from
    sys.path as they are, verified like any member."""
    wheel = tmp_path / "built" / "fake_package-1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("fake_pkg/__init__.py", "VALUE = 42\n")
    data = wheel.read_bytes()
    monkeypatch.setenv("BERT_TFX_CACHE", str(tmp_path / "cache"))
    source = fetch.Source(
        name="fake_wheel",
        requirement="fake-package==1.0",
        sdist=False,
        description="test",
        members=(fetch.Member("", wheel.name, len(data), hashlib.sha256(data).hexdigest()),),
    )
    monkeypatch.setitem(fetch.SOURCES, "fake_wheel", source)

    def fake_download(source, into: Path) -> Path:
        (into / wheel.name).write_bytes(data)
        return into / wheel.name

    monkeypatch.setattr(fetch, "_download", fake_download)
    path = fetch.path("fake_wheel", wheel.name)
    assert path.read_bytes() == data
    monkeypatch.syspath_prepend(str(path))
    import fake_pkg

    assert fake_pkg.VALUE == 42
