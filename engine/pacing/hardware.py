"""The machine the engine runs on: CPU model and flags, and the compute dtype chosen from them.

Contract: `cpu_info()` reads `/proc/cpuinfo` (Linux; elsewhere `platform.processor()` and no
flags) once per process; `choose_dtype(requested, device, info)` resolves `"auto"` to a
concrete torch dtype name and returns the reason with it, so the gateway can log it.

The rule (measured, see docs/speculation.md "Dtype"): multi-token forwards (prefill and
speculative verify) in bfloat16 are only cheap where the CPU multiplies bf16 natively
(x86 `avx512_bf16` or `amx_bf16`, Arm `bf16`): torch then runs them through oneDNN's bf16
kernels. Without it, torch's bf16 matmul falls back to a scalar-converting kernel whose cost
grows linearly with the token count (measured on an AVX2 EPYC: a 9-token verify cost 7.3 plain steps), while
float32 goes through MKL / oneDNN sgemm. So: CUDA → bfloat16 (float16 where the GPU has no
bf16); CPU with native bf16 → bfloat16; any other CPU → float32. An explicit dtype always
wins. Pure: no torch import unless the device is CUDA.
"""

from __future__ import annotations

import functools
import hashlib
import pathlib
import platform
from dataclasses import dataclass

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 AVX-512 / AMX, Arm (`Features: bf16`)
REPORTED_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8",
                  "avx_vnni", "asimd", "bf16", "i8mm", "sve")


@dataclass(frozen=True)
class CpuInfo:
    model: str
    flags: frozenset[str]
    cores: int

    @property
    def native_bf16(self) -> bool:
        return any(flag in self.flags for flag in NATIVE_BF16_FLAGS)

    @property
    def key_flags(self) -> list[str]:
        """The flags that decide kernel speed, in a fixed order (for logs and headers)."""
        return [flag for flag in REPORTED_FLAGS if flag in self.flags]

    def describe(self) -> str:
        return f"{self.model}, {self.cores} cores, flags {' '.join(self.key_flags) or 'none'}"

    def fingerprint(self) -> str:
        """Stable id of this CPU kind (model, core count, every flag) for cost caches."""
        text = f"{self.model}|{self.cores}|{' '.join(sorted(self.flags))}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_cpuinfo(text: str, *, cores: int) -> CpuInfo:
    """CpuInfo from the text of /proc/cpuinfo (x86 `model name`/`flags`, Arm `Features`)."""
    model, flags = "", ""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name in ("model name", "hardware", "cpu model") and not model:
            model = value.strip()
        elif name in ("flags", "features") and not flags:
            flags = value.strip()
    return CpuInfo(model=model or platform.processor() or platform.machine(),
                   flags=frozenset(flags.split()), cores=cores)


@functools.cache
def cpu_info() -> CpuInfo:
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    path = pathlib.Path("/proc/cpuinfo")
    text = path.read_text() if path.exists() else ""
    return parse_cpuinfo(text, cores=cores)


def choose_dtype(requested: str, *, device: str = "cpu", info: CpuInfo | None = None) -> tuple[str, str]:
    """(dtype name, why) for `requested` ("auto" or an explicit dtype name) on `device`."""
    if requested != "auto":
        return requested, "set explicitly"
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_bf16_supported():
            return "bfloat16", "CUDA device with bf16"
        return "float16", "CUDA device without bf16"
    info = info if info is not None else cpu_info()
    if info.native_bf16:
        flag = next(f for f in NATIVE_BF16_FLAGS if f in info.flags)
        return "bfloat16", f"CPU has native bf16 ({flag}): bf16 multi-token forwards are cheap"
    return "float32", ("CPU has no native bf16 (no avx512_bf16 / amx_bf16 / bf16): torch's bf16 matmul "
                       "would fall back to a slow kernel for prefill and verify")
