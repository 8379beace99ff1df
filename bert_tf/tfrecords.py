"""TFRecord framing checks: a truncated or corrupt TFRecord file fails loudly, before it is read.

TensorFlow's TFRecord readers (`tf.data.TFRecordDataset`, TF Serving's warmup reader) take a
file that ends inside a record header for a clean end of file: a half-copied shard is read as
its first records, with exit status 0 and no warning. The same goes for a GZIP file whose
decompressed data ends there, or whose gzip trailer is cut off.

`check_tfrecord_file(path, compression_type="")` walks the file's record framing

    uint64 length (little-endian) | uint32 masked CRC32C of the length | data | uint32 masked CRC32C

checking each length's CRC (8 bytes a record: a local file's payloads are seeked over, not
read, ~0.5 s per 100 MB of 1.5 kB records; a remote or compressed file is read once, in 1 MB
chunks), and raises ValueError naming the file, the byte offset and the number of good records
when the framing does not end exactly at the end of the file, or the compressed stream is cut
short or corrupt. It returns the record count.
Payload CRCs are left to TensorFlow, which checks them while reading (DataLossError).

A file that ends exactly on a record boundary is a valid TFRecord file: only a record count
kept elsewhere could tell that records are missing.

Results are cached per (path, compression, size, modification time...), so the several readers of
one run walk each file once; not on a filesystem without modification times (`ram://`).

Example:

    import tensorflow as tf
    from bert_tf import tfrecords

    with tf.io.TFRecordWriter("/tmp/example.tfrecord") as writer:
        writer.write(b"a record")
    assert tfrecords.check_tfrecord_file("/tmp/example.tfrecord") == 1

    data = open("/tmp/example.tfrecord", "rb").read()
    open("/tmp/cut.tfrecord", "wb").write(data[:5])
    tfrecords.check_tfrecord_file("/tmp/cut.tfrecord")
    # ValueError: /tmp/cut.tfrecord: corrupt or truncated TFRecord after 0 good records, at
    # byte offset 0 (the file ends 5 bytes into a 12-byte record header)
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence

import tensorflow as tf

_HEADER = struct.Struct("<QI")  # length, masked CRC32C of the 8 length bytes
_FOOTER_SIZE = 4  # masked CRC32C of the data
_COMPRESSION_WBITS = {"GZIP": 16 + zlib.MAX_WBITS, "ZLIB": zlib.MAX_WBITS}
_READ_SIZE = 1 << 20  # compressed bytes read at a time
_MAX_OUTPUT = 4 << 20  # decompressed bytes produced at a time (bounds memory on a zip bomb)


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def _crc32c_python(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


try:  # C CRC32C, in the lock through apache-beam[gcp] (google-cloud-storage).
    from google_crc32c import value as _crc32c
except ImportError:  # Only 8 bytes per record are checksummed: pure Python costs ~2 us each.
    _crc32c = _crc32c_python


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC32C rotated right by 15 bits plus a constant (TF's crc32c::Mask)."""
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class _Damage(Exception):
    """Where the framing broke: the record's offset, the good records before it, and why."""

    def __init__(self, offset: int, count: int, reason: str):
        super().__init__(reason)
        self.offset, self.count, self.reason = offset, count, reason


def _header_length(header: bytes, offset: int, count: int) -> int:
    length, crc = _HEADER.unpack(header)
    if masked_crc32c(header[:8]) != crc:
        raise _Damage(offset, count, "the record header's length checksum does not match")
    return length


def _walk_file(f, size: int) -> int:
    """Record count of an uncompressed file of `size` bytes, seeking over the payloads."""
    offset = count = 0
    while offset < size:
        f.seek(offset)
        header = f.read(_HEADER.size)
        if len(header) < _HEADER.size:
            raise _Damage(
                offset,
                count,
                f"the file ends {len(header)} bytes into a {_HEADER.size}-byte record header",
            )
        end = offset + _HEADER.size + _header_length(header, offset, count) + _FOOTER_SIZE
        if end > size:
            raise _Damage(
                offset,
                count,
                f"a {end - offset}-byte record runs {end - size} bytes past the end of the file",
            )
        offset, count = end, count + 1
    return count


def _decompressed(f, wbits: int) -> Iterator[bytes]:
    """The decompressed data of a GZIP/ZLIB file in chunks; raises _Damage (offset and count
    filled in by the caller) on corrupt or cut-short compressed data. Concatenated streams
    (GZIP members) are read on, as TensorFlow reads them."""
    decompressor = None  # the stream in progress, if any
    while data := f.read(_READ_SIZE):
        while True:
            decompressor = decompressor or zlib.decompressobj(wbits)
            try:
                out = decompressor.decompress(data, _MAX_OUTPUT)
            except zlib.error as e:
                raise _Damage(-1, 0, f"corrupt compressed data: {e}") from None
            if out:
                yield out
            if decompressor.eof:  # the next stream, if any, starts in unused_data
                data, decompressor = decompressor.unused_data, None
            else:
                data = decompressor.unconsumed_tail
            # A full `out` may leave output pending in zlib with all the input consumed.
            if not data and (decompressor is None or len(out) < _MAX_OUTPUT):
                break
    if decompressor is not None:
        raise _Damage(-1, 0, "the compressed data ends before its end-of-stream marker")


def _walk_stream(chunks: Iterable[bytes], what: str) -> int:
    """Record count of a stream of data (`what`: "the file", "the decompressed data"), walked
    chunk by chunk."""
    offset = count = 0  # the current record's offset, the records before it
    header = b""  # the current record's header bytes read so far
    size = skip = 0  # the current record's size; its bytes still to pass over after the header
    try:
        for chunk in chunks:
            pos, n = 0, len(chunk)
            while pos < n:
                if skip:
                    step = min(skip, n - pos)
                    skip, pos = skip - step, pos + step
                    if not skip:
                        offset, count, header = offset + size, count + 1, b""
                    continue
                piece = chunk[pos : pos + _HEADER.size - len(header)]
                header, pos = header + piece, pos + len(piece)
                if len(header) == _HEADER.size:
                    skip = _header_length(header, offset, count) + _FOOTER_SIZE
                    size = _HEADER.size + skip
    except _Damage as e:
        if e.offset < 0:  # the compressed stream broke: at the record the framing had reached
            e.offset, e.count = offset, count
        raise
    if skip:
        raise _Damage(
            offset,
            count,
            f"a {size}-byte record runs {skip} bytes past the end of {what}",
        )
    if header:
        raise _Damage(
            offset,
            count,
            f"{what} ends {len(header)} bytes into a {_HEADER.size}-byte record header",
        )
    return count


_cache: dict[tuple, int] = {}
_cache_lock = threading.Lock()


def check_tfrecord_file(path: str, compression_type: str | None = "") -> int:
    """The number of records in a TFRecord file (local or any `tf.io.gfile` filesystem).

    `compression_type`: "" (or None), "GZIP" or "ZLIB", as for `tf.data.TFRecordDataset`.
    Raises ValueError "<path>: corrupt or truncated TFRecord after K good records, at byte
    offset N (why)" if a record header's checksum is wrong, the last record is cut short, or
    the compressed stream is; N is the damaged record's offset (in the decompressed data for a
    compressed file). Record payloads are not checksummed here (TensorFlow does, on reading).
    """
    compression = (compression_type or "").upper()
    if compression not in ("", *_COMPRESSION_WBITS):
        raise ValueError(
            f"compression_type: expected '', 'GZIP' or 'ZLIB', got {compression_type!r}"
        )
    local = "://" not in path
    if local:  # the inode and change time also tell a rewrite of the same size and mtime
        st = os.stat(path)
        size, key = st.st_size, (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    else:
        stat = tf.io.gfile.stat(path)
        # mtime 0: the filesystem keeps no modification time (ram://), so a rewrite of the same
        # size would look unchanged: not cached.
        size, key = stat.length, (stat.length, stat.mtime_nsec) if stat.mtime_nsec else None
    key = key and (path, compression, *key)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    try:
        if compression:
            with tf.io.gfile.GFile(path, "rb") as f:
                chunks = _decompressed(f, _COMPRESSION_WBITS[compression])
                count = _walk_stream(chunks, "the decompressed data")
        elif local:
            # Local: seek over the payloads. (GFile's seek costs ~100 us; mmap is faster still
            # but a file cut short while mapped kills the process with SIGBUS.)
            with open(path, "rb", buffering=1 << 16) as f:
                count = _walk_file(f, size)
        else:  # Remote (gs://...): one sequential read, rather than a request per record.
            with tf.io.gfile.GFile(path, "rb") as f:
                count = _walk_stream(iter(lambda: f.read(_READ_SIZE), b""), "the file")
    except _Damage as e:
        where = " of the decompressed data" if compression else ""
        raise ValueError(
            f"{path}: corrupt or truncated TFRecord after {e.count} good records, at byte "
            f"offset {e.offset}{where} ({e.reason})"
        ) from None
    if key:
        with _cache_lock:
            _cache[key] = count
    return count


def check_tfrecord_files(paths: Sequence[str], compression_type: str | None = "") -> list[int]:
    """`check_tfrecord_file` of each path: their record counts, or the first file's ValueError."""
    return [check_tfrecord_file(path, compression_type) for path in paths]
