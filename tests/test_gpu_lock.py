"""The GPU image's lock (requirements-gpu.txt) is the CPU lock plus CUDA, and Dockerfile.gpu is
Dockerfile with that lock. Reads files only: no network, no TensorFlow import."""

import re
import shlex
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

REPO = Path(__file__).resolve().parents[1]
# What `make lock-gpu` runs (without -q), as uv records it in the lock's header.
GPU_LOCK_COMMAND = (
    "uv pip compile --python-version 3.10 requirements-gpu.in -o requirements-gpu.txt"
)
# tensorflow[and-cuda]==2.16.2's CUDA wheels (tensorflow's setup.py, extra "and-cuda").
CUDA_WHEELS = {
    "nvidia-cublas-cu12",
    "nvidia-cuda-cupti-cu12",
    "nvidia-cuda-nvcc-cu12",
    "nvidia-cuda-nvrtc-cu12",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cudnn-cu12",
    "nvidia-cufft-cu12",
    "nvidia-curand-cu12",
    "nvidia-cusolver-cu12",
    "nvidia-cusparse-cu12",
    "nvidia-nccl-cu12",
    "nvidia-nvjitlink-cu12",
}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)")


def parse_lock(name):
    """{canonical name: (version, [the "# via" sources])} of a uv-compiled requirements file."""
    pins, current = {}, None
    for line in (REPO / name).read_text().splitlines():
        m = PIN.match(line)
        if m:
            current = canonicalize_name(m[1])
            pins[current] = (m[2], [])
        elif current and line.startswith("    #") and line.strip() != "# via":
            pins[current][1].append(line.strip().lstrip("#").strip().removeprefix("via ").strip())
        elif line and not line.startswith(" "):
            current = None
    return pins


def requirement_lines(name):
    """The requirement lines of a .in file (comments and -r/-c options dropped)."""
    lines = []
    for raw in (REPO / name).read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            lines.append(line)
    return lines


def dockerfile_instructions(name):
    """Instructions with continuation lines joined and comments dropped."""
    instructions, pending = [], ""
    for raw in (REPO / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending += line
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip() + " "
        else:
            instructions.append(pending)
            pending = ""
    assert not pending, f"{name}: dangling continuation"
    return instructions


@pytest.fixture(scope="module")
def cpu_lock():
    return parse_lock("requirements.txt")


@pytest.fixture(scope="module")
def gpu_lock():
    return parse_lock("requirements-gpu.txt")


def test_locks_parse(cpu_lock, gpu_lock):
    assert len(cpu_lock) > 200
    assert {"tensorflow", "tfx", "tensorflow-text", "apache-beam"} <= cpu_lock.keys()


def test_every_cpu_pin_has_the_same_version_in_the_gpu_lock(cpu_lock, gpu_lock):
    missing = sorted(cpu_lock.keys() - gpu_lock.keys())
    differ = {
        name: (version, gpu_lock[name][0])
        for name, (version, _) in cpu_lock.items()
        if name in gpu_lock and gpu_lock[name][0] != version
    }
    assert not missing, f"in requirements.txt but not requirements-gpu.txt: {missing}"
    assert not differ, f"(cpu, gpu) versions differ, run `make lock-gpu`: {differ}"


def test_gpu_lock_adds_only_tensorflows_cuda_wheels(cpu_lock, gpu_lock):
    added = gpu_lock.keys() - cpu_lock.keys()
    assert added == CUDA_WHEELS
    for name in sorted(CUDA_WHEELS):
        assert "tensorflow" in gpu_lock[name][1], f"{name} should come from tensorflow[and-cuda]"


def test_gpu_lock_pins_tensorflow_2_16_2_with_cuda_12_3_and_cudnn_8_9(gpu_lock):
    assert gpu_lock["tensorflow"][0] == "2.16.2"
    # What TF 2.16.2 was built against (tf.sysconfig.get_build_info(): cuda 12.3, cudnn 8).
    assert gpu_lock["nvidia-cuda-runtime-cu12"][0].startswith("12.3.")
    assert gpu_lock["nvidia-cudnn-cu12"][0].startswith("8.9.")


def test_gpu_inputs_are_the_cpu_inputs_plus_and_cuda():
    text = (REPO / "requirements-gpu.in").read_text()
    options = [line.strip() for line in text.splitlines() if line.strip().startswith("-")]
    assert options == ["-r requirements.in", "-c requirements.txt"]
    (extra,) = (Requirement(line) for line in requirement_lines("requirements-gpu.in"))
    (cpu_tf,) = (
        Requirement(line)
        for line in requirement_lines("requirements.in")
        if Requirement(line).name == "tensorflow"
    )
    assert extra.name == "tensorflow"
    assert extra.extras == {"and-cuda"}
    assert extra.specifier == cpu_tf.specifier == Requirement("tensorflow==2.16.2").specifier


def test_gpu_lock_satisfies_its_inputs(gpu_lock):
    """Cheap staleness check: each direct input's specifier holds for the locked version."""
    for line in requirement_lines("requirements.in") + requirement_lines("requirements-gpu.in"):
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in gpu_lock, f"{req.name} is not in requirements-gpu.txt: run `make lock-gpu`"
        version = gpu_lock[name][0]
        assert req.specifier.contains(version, prereleases=True), (
            f"requirements-gpu.txt pins {name}=={version}, inputs say {req}: run `make lock-gpu`"
        )


def test_gpu_lock_header_and_make_target_name_the_same_command():
    header = (REPO / "requirements-gpu.txt").read_text().splitlines()[:2]
    assert header[0] == "# This file was autogenerated by uv via the following command:"
    assert header[1].strip("# ") == GPU_LOCK_COMMAND
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^lock-gpu:.*\n\t(.+)$", makefile, re.MULTILINE)
    assert recipe, "Makefile has no lock-gpu target"
    argv = shlex.split(recipe[1])
    assert argv[0].endswith("/bin/uv")
    argv.remove("-q")
    assert shlex.join(["uv", *argv[1:]]) == GPU_LOCK_COMMAND


def test_dockerfile_gpu_is_dockerfile_with_the_gpu_lock():
    cpu = dockerfile_instructions("Dockerfile")
    gpu = dockerfile_instructions("Dockerfile.gpu")
    assert any("uv pip install --system --no-deps -r requirements-gpu.txt" in i for i in gpu)
    assert "COPY requirements-gpu.txt ." in gpu
    assert not any("requirements.txt" in i for i in gpu)
    entrypoint = [i for i in cpu if i.startswith("ENTRYPOINT")]
    assert len(entrypoint) == 1
    assert [i for i in gpu if i.startswith("ENTRYPOINT")] == entrypoint
    # Everything else is Dockerfile's, in the same order, plus the one ENV for the CUDA wheels.
    cuda_env = [i for i in gpu if i.startswith("ENV LD_LIBRARY_PATH=")]
    assert len(cuda_env) == 1
    rest = [i.replace("requirements-gpu.txt", "requirements.txt") for i in gpu if i not in cuda_env]
    assert rest == cpu, "Dockerfile.gpu has drifted from Dockerfile: mirror its changes"


def test_dockerfile_gpu_puts_every_cuda_wheels_libraries_on_the_loader_path(gpu_lock):
    gpu = dockerfile_instructions("Dockerfile.gpu")
    (base,) = (i.split()[1] for i in gpu if i.startswith("FROM "))
    python = re.match(r"python:(\d+\.\d+)-", base)
    assert python, base
    site = f"/usr/local/lib/python{python[1]}/site-packages"
    (env,) = (i for i in gpu if i.startswith("ENV LD_LIBRARY_PATH="))
    values = dict(item.split("=", 1) for item in env.split()[1:])
    loader_path = values["LD_LIBRARY_PATH"].split(":")
    expected = [
        f"{site}/nvidia/{name.removeprefix('nvidia-').removesuffix('-cu12').replace('-', '_')}/lib"
        for name in sorted(gpu_lock)
        # nvidia-cuda-nvcc-cu12 has no shared libraries in lib/ (ptxas is in bin/, on PATH).
        if name in CUDA_WHEELS and name != "nvidia-cuda-nvcc-cu12"
    ]
    assert sorted(loader_path) == sorted(expected)
    assert values["PATH"].split(":")[0] == f"{site}/nvidia/cuda_nvcc/bin"
    assert values["PATH"].endswith(":$PATH")
