"""Provenance: library versions, git hash, device, CPU — written to env.json and into metrics.json.

`cpu_info()` records what decides how fast (and whether natively) bf16 matmuls run on this machine: the CPU
model, core counts, torch's thread count, the ISA flags that matter (avx2, fma, avx512f, avx512_bf16, amx_bf16,
amx_tile), the kernel level torch dispatches to (`torch.backends.cpu.get_cpu_capability()`) and whether bf16 is
native (avx512_bf16 or amx_bf16). This workplace's machines differ (some have AVX512-BF16 only, some AMX-BF16
too), so a benchmark or a study says which one it ran on. The /proc/cpuinfo parser is a pure function of the
text (`parse_cpuinfo`) so it can be tested with a fake file.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

LIBRARIES = ("leakaudit", "torch", "transformers", "trl", "peft", "accelerate", "datasets", "safetensors", "numpy",
             "scipy", "scikit-learn", "pandas", "pyarrow", "seaborn", "matplotlib")


def library_versions() -> dict[str, str | None]:
    """Python and every library that shapes training, scoring or metrics; None when not installed."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_hash(cwd: str | Path | None = None) -> str | None:
    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd or Path(__file__).parent, capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None


def device_description() -> str:
    import torch

    if torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    return f"cpu: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


BF16_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""The /proc/cpuinfo flags recorded: the ones that decide the speed of fp32 and bf16 matmuls."""


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """Parse the text of /proc/cpuinfo (x86 Linux layout): model name, logical processors, physical cores,
    sockets and the flags of BF16_FLAGS (each True/False), plus bf16_native = avx512_bf16 or amx_bf16.

    The first processor's model name and flags are taken (they are the same on every processor of one machine);
    physical cores are the distinct (physical id, core id) pairs, None when the text has no core ids (VMs and
    non-x86 kernels often omit them). A text without any 'flags' line (e.g. Arm's 'Features') gives every flag
    False."""
    model = None
    flags: set[str] | None = None
    processors = 0
    cores: set[tuple[str, str]] = set()
    sockets: set[str] = set()
    physical = core = None
    for line in text.splitlines() + [""]:
        if not line.strip():  # a blank line ends one processor's block
            if core is not None:
                cores.add((physical or "0", core))
            physical = core = None
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if key == "processor":
            processors += 1
        elif key == "model name" and model is None:
            model = value
        elif key in ("flags", "features") and flags is None:
            flags = set(value.split())
        elif key == "physical id":
            physical = value
            sockets.add(value)
        elif key == "core id":
            core = value
    flags = flags or set()
    out: dict[str, Any] = {"model_name": model, "logical_processors": processors or None,
                           "physical_cores": len(cores) or None, "sockets": len(sockets) or None}
    out["flags"] = {f: f in flags for f in BF16_FLAGS}
    out["bf16_native"] = bool(out["flags"]["avx512_bf16"] or out["flags"]["amx_bf16"])
    return out


def isa_level(flags: dict[str, bool]) -> str:
    """The best bf16-relevant ISA of a flags record: 'amx', 'avx512bf16', 'avx512', 'avx2' or 'baseline'."""
    if flags.get("amx_bf16"):
        return "amx"
    if flags.get("avx512_bf16"):
        return "avx512bf16"
    if flags.get("avx512f"):
        return "avx512"
    if flags.get("avx2"):
        return "avx2"
    return "baseline"


def cpu_tag(info: dict[str, Any]) -> str:
    """A file-name-safe tag for a CPU record: model slug, ISA level and usable cores, e.g.
    'intel-xeon-processor-amx-2c' (this workplace's VMs show generic model names, so the ISA and core count are
    what tell its machines apart)."""
    model = (info.get("model_name") or platform.machine() or "cpu").lower()
    model = re.sub(r"\((r|tm)\)|\bcpu\b|@.*$", " ", model)
    slug = re.sub(r"[^a-z0-9]+", "-", model).strip("-") or "cpu"
    cores = info.get("usable_cpus") or info.get("logical_processors") or 0
    return f"{slug}-{isa_level(info.get('flags', {}))}-{cores}c"


def usable_cpus() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def cpu_info(cpuinfo_path: str | Path = "/proc/cpuinfo") -> dict[str, Any]:
    """The CPU record of this machine: parse_cpuinfo's fields (flags from `cpuinfo_path`; all False when it is
    unreadable), os.cpu_count(), the CPUs this process may use, torch's intra-op thread count, the kernel level
    torch dispatches to (torch.backends.cpu.get_cpu_capability(), e.g. 'AVX512'), and torch/oneDNN's own bf16
    probe (None where this torch has no such probe)."""
    try:
        text = Path(cpuinfo_path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    info = parse_cpuinfo(text)
    if info["model_name"] is None:
        info["model_name"] = platform.processor() or platform.machine() or None
    info["cpu_count"] = os.cpu_count()
    info["usable_cpus"] = usable_cpus()
    info["torch_threads"] = info["torch_capability"] = info["torch_mkldnn_bf16"] = None
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        get_cap = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
        info["torch_capability"] = get_cap() if get_cap is not None else None
        probe = getattr(getattr(torch.ops, "mkldnn", None), "_is_mkldnn_bf16_supported", None)
        info["torch_mkldnn_bf16"] = bool(probe()) if probe is not None else None
    except Exception:  # noqa: BLE001 - provenance must never break a run
        pass
    info["tag"] = cpu_tag(info)
    return info


def environment(seed: int | None = None) -> dict:
    return {"python": platform.python_version(), "platform": platform.platform(), "libraries": library_versions(),
            "git": git_hash(), "device": device_description(), "cpu": cpu_info(), "seed": seed}
