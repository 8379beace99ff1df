"""A process's resident-memory high-water mark, per call, without TensorFlow or torch.

`resource.getrusage` only ever grows (and Linux carries it across exec), so the peak of one call
comes from the kernel's VmHWM after resetting it through `/proc/self/clear_refs`; `malloc_trim`
first hands freed heap pages back. `bench.timing.PeakMemory` uses this on CPU, and so does the HF
worker (`bench.hf_worker`), which runs in the reference environment without TensorFlow.

Example:

    from bench import rss

    before = rss.reset_peak()
    run_one_step()
    rss.peak_mb() - before  # MB the step needed above what was resident before it
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re

_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def _proc_status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        match = re.search(rf"^{key}:\s+(\d+) kB", f.read(), re.MULTILINE)
    if not match:
        raise OSError(f"/proc/self/status has no {key} line")
    return int(match.group(1))


def reset_peak() -> float:
    """Resets the high-water mark to the current RSS; returns that RSS in MB."""
    _LIBC.malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # 5 = reset the peak RSS to the current RSS
    return _proc_status_kb("VmRSS") / 1024


def peak_mb() -> float:
    """The RSS high-water mark since the last `reset_peak` (or the process start), in MB."""
    return _proc_status_kb("VmHWM") / 1024
