"""A truncated warmup file fails the version's load with an error naming it (TF Serving fails it
on a corrupt record, but, like TFRecordDataset, reads a file cut inside a record header as a
shorter one), instead of warming up on part of the requests."""

import shutil
import struct

from tensorflow_serving.config import model_server_config_pb2

from serving.inference import WARMUP_FILE, make_service


def test_truncated_warmup_file_fails_the_load(saved_models, tmp_path):
    version = tmp_path / "strings" / "1"
    shutil.copytree(saved_models["strings"], version)
    warmup = version / WARMUP_FILE
    raw = warmup.read_bytes()
    first = 16 + struct.unpack_from("<Q", raw)[0]
    warmup.write_bytes(raw[: first + 5])  # one whole request, then 5 bytes of a record header
    service = make_service(poll_wait_seconds=0)
    try:
        service.manager.set_config(
            [
                model_server_config_pb2.ModelConfig(
                    name="strings", base_path=str(version.parent), model_platform="tensorflow"
                )
            ]
        )
        [(_, _, _, message)] = service.manager.status("strings", None)
    finally:
        service.manager.stop()
    assert message == (
        f"ValueError: {warmup}: corrupt or truncated TFRecord after 1 good records, at byte "
        f"offset {first} (the file ends 5 bytes into a 12-byte record header)"
    )
