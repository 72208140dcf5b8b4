"""The measured cost model: how long the target's forward takes at 1..K_max+1 new tokens and
the draft's at one token, on this machine, and what speculation is worth given an acceptance.

Contract:
- `measure_forward_costs(target, draft, k_max=...)` times real forwards through the decoder's
  own caches (`engine.torch_engine.kv_cache.cache_for`: transformers or llama.cpp): after a `context`-token prefill, each n-token forward (n = 1..
  K_max+1, `num_logits=n` as in verify) is run `repeats` times, interleaved over n and with
  the draft's forwards (so load bursts hit both alike), after one warm-up of each, and cropped back; the median is kept, and the curve is made non-decreasing
  in n (pool-adjacent-violators: a forward of more tokens never costs less; on a busy machine
  a noisy 1-token median could otherwise make verify look cheaper than decode). The draft is
  timed the same way at n = 1; its prefills of `context` and 4 x `context` tokens give its
  prefill cost as a line, intercept + slope x tokens (`draft_prefill_cost_s`: the catch-up a
  draft pays on its first drafting step; a single per-token price from the short prefill
  overpriced a 256-token prompt by ~24%). Nothing is assumed: a machine where multi-token
  forwards cost n plain steps gets that curve, and speculation then does not pay.
- `load_or_measure(...)` caches the result as JSON under the models cache
  (`<models root>/.costs/<key>.json`), keyed by backend, device, dtype, torch version and
  kernel path (ATen CPU capability, oneDNN on/off), thread count, CPU fingerprint (model +
  flags) and both models' identities; a cached entry is reused only when it covers K_max,
  and not when it was measured on a busy machine (`load_per_core`, the 1-minute load average
  per core at measurement, above `BUSY_LOAD`) that is now at most half as busy: a measurement
  taken while other jobs ran would otherwise price every later start (seen: a 648 ms plain
  step cached where the quiet machine takes 210 ms, which made adaptive K pick short K).
- `ForwardCosts` is pure arithmetic over the measured seconds. One step with K drafts costs
  `K * draft_s + target_s[K]` (K draft forwards, one (K+1)-token verify); a plain step costs
  `target_s[0]`. With per-draft acceptance alpha (Leviathan et al.) the expected speedup of
  K drafts over plain decoding is `sampler.expected_speedup(alpha, K, c, v_K)` with
  `c = draft_s / target_s[0]` and `v_K = target_s[K] / target_s[0]`. `best_k(alpha)` is
  the K in 0..K_max with the highest expected speedup (0 when none exceeds 1); both also take
  depth-wise hazards instead of one alpha (`engine.pacing.acceptance_model`);
  `pays_at_all` is False where even perfect acceptance cannot make any K pay.
Pure apart from the timing and the cache file; logs nothing (the gateway logs `describe()`).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sampler import expected_speedup_from_hazards

CACHE_VERSION = 5  # 4: draft prefill priced as a line; 5: load per core recorded
BUSY_LOAD = 0.75  # load average per core above which a cached measurement is retaken once the load halves
PERFECT_ALPHA = 0.999  # "even perfect acceptance": just below 1 (alpha=1 never occurs at T>0)


@dataclass(frozen=True)
class ForwardCosts:
    target_s: tuple[float, ...]        # [n-1]: seconds of one target forward of n new tokens
    draft_s: float | None = None       # seconds of one 1-token draft forward (None: no draft model)
    draft_prefill_s: float | None = None  # seconds per prompt token of a draft prefill (the slope)
    draft_prefill_fixed_s: float = 0.0    # seconds per draft prefill beyond its tokens (the intercept)
    context: int = 64                  # cached tokens before the timed forwards
    repeats: int = 3
    backend: str = "torch"
    device: str = "cpu"
    dtype: str = "bfloat16"
    target: str = ""
    draft: str | None = None
    cpu: str = ""
    flags: tuple[str, ...] = ()
    kernel_path: str = ""
    threads: int = 0
    measure_wall_s: float = 0.0
    load_per_core: float = 0.0  # 1-minute load average per core when measured (0: unknown)
    cached: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        if not self.target_s or min(self.target_s) <= 0:
            raise ValueError(f"target_s needs positive times for n = 1.., got {self.target_s}")
        if self.draft_s is not None and self.draft_s < 0:
            raise ValueError(f"draft_s must be >= 0, got {self.draft_s}")

    @property
    def k_max(self) -> int:
        return len(self.target_s) - 1

    @property
    def plain_s(self) -> float:
        return self.target_s[0]

    @property
    def draft_ratio(self) -> float:
        """c: one draft forward in plain target steps (0 for model-free drafters)."""
        return (self.draft_s or 0.0) / self.plain_s

    def verify_ratio(self, k: int) -> float:
        """v_K: a (K+1)-token target forward in plain steps (linear past the measured range)."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        if k <= self.k_max:
            return self.target_s[k] / self.plain_s
        last = self.target_s[-1]
        slope = (last - self.target_s[-2]) if self.k_max >= 1 else last
        return (last + slope * (k - self.k_max)) / self.plain_s

    def step_s(self, k: int, *, draft_forwards: int | None = None, draft_catch_up: int = 0) -> float:
        """Predicted seconds of one step with k drafts, `draft_forwards` (default k) 1-token
        draft forwards and `draft_catch_up` further tokens the draft had to prefill first."""
        forwards = k if draft_forwards is None else draft_forwards
        return forwards * (self.draft_s or 0.0) + self.draft_prefill_cost_s(draft_catch_up) \
            + self.verify_ratio(k) * self.plain_s

    def draft_prefill_cost_s(self, tokens: int) -> float:
        """Predicted seconds of one draft prefill of `tokens` tokens (0 for none)."""
        if tokens <= 0 or self.draft_prefill_s is None:
            return 0.0
        return self.draft_prefill_fixed_s + tokens * self.draft_prefill_s

    def speedup(self, alpha: float | Sequence[float], k: int, *, free_drafts: bool = False) -> float:
        """Expected speedup of K drafts over plain steps; `alpha`: one per-draft acceptance
        (i.i.d.) or depth-wise hazards (`sampler.expected_tokens_from_hazards`);
        `free_drafts`: model-free drafts (c = 0)."""
        if k == 0:
            return 1.0
        hazards = (alpha,) if isinstance(alpha, float | int) else alpha
        return expected_speedup_from_hazards(hazards, k, 0.0 if free_drafts else self.draft_ratio,
                                             self.verify_ratio(k))

    def best_k(self, alpha: float | Sequence[float], *, k_max: int | None = None,
               free_drafts: bool = False) -> tuple[int, float]:
        """(K, expected speedup) maximising the speedup for K in 0..k_max; (0, 1.0) if none pays.
        `alpha` as in `speedup`."""
        best_k, best = 0, 1.0
        for k in range(1, (self.k_max if k_max is None else k_max) + 1):
            speed = self.speedup(alpha, k, free_drafts=free_drafts)
            if speed > best:
                best_k, best = k, speed
        return best_k, best

    @property
    def pays_at_all(self) -> bool:
        """Whether a draft-model step can beat a plain step at all (near-perfect acceptance)."""
        return self.best_k(PERFECT_ALPHA)[0] > 0

    def free_drafts_pay(self) -> bool:
        """Whether model-free drafts (c = 0) can beat a plain step at near-perfect acceptance."""
        return self.best_k(PERFECT_ALPHA, free_drafts=True)[0] > 0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["target_s"] = list(self.target_s)
        data["flags"] = list(self.flags)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ForwardCosts:
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values["target_s"] = tuple(float(t) for t in values["target_s"])
        values["flags"] = tuple(values.get("flags", ()))
        return cls(**values)

    def describe(self) -> list[str]:
        """Human-readable lines: the machine, the curve, and what it implies."""
        curve = ", ".join(f"{n}: {t * 1e3:.0f}" for n, t in enumerate(self.target_s, start=1))
        lines = [
            f"forward costs ({'cached' if self.cached else 'measured'}; {self.backend} {self.device} {self.dtype}, "
            f"{self.threads} threads, kernels {self.kernel_path}) on {self.cpu} [{' '.join(self.flags)}]",
            f"target {self.target} ms per forward of n tokens: {curve}",
        ]
        if self.draft_s is not None:
            prefill = (f"; prefill {self.draft_prefill_fixed_s * 1e3:.0f} ms + {self.draft_prefill_s * 1e3:.2f} ms/token"
                       if self.draft_prefill_s is not None else "")
            lines.append(f"draft {self.draft} {self.draft_s * 1e3:.0f} ms per token (c = {self.draft_ratio:.2f}){prefill}")
        verdict = ", ".join(
            f"alpha {a}: K={k} x{s:.2f}" for a in (0.5, 0.7, 0.9) for k, s in [self.best_k(a)]
        )
        lines.append(f"speculation {'can pay' if self.pays_at_all else 'never pays here (off)'}: best {verdict}")
        return lines


# ---- measurement -------------------------------------------------------------------------------


def kernel_path(model: Any = None) -> str:
    """The kernel path `model` runs on: llama.cpp for a GGUF model (`engine.torch_engine.llama_cpp_model`),
    else torch's CPU path in force (ATen capability, oneDNN on/off)."""
    import torch

    if getattr(model, "kernels", None) == "llama.cpp":
        return f"llama.cpp-{model.n_threads}t"

    capability = torch.backends.cpu.get_cpu_capability()
    return f"aten-{capability.lower()}+{'onednn' if torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled else 'no-onednn'}"


def model_identity(model: Any) -> str:
    """Name or path, parameter count and dtype of a loaded model (its cache identity)."""
    if hasattr(model, "identity"):  # a GGUF run by llama.cpp: file, size, build
        return str(model.identity())
    config = getattr(model, "config", None)
    name = str(getattr(config, "_name_or_path", "") or type(model).__name__)
    params = sum(p.numel() for p in model.parameters())
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    digest = hashlib.sha256(config.to_json_string().encode()).hexdigest()[:8] if config is not None else "-"
    return f"{name}|{params}|{dtype}|{digest}"


def model_dtype(model: Any) -> str:
    """The weights' dtype name ("gguf" for a llama.cpp model: its quantization is in its identity)."""
    if getattr(model, "kernels", None) == "llama.cpp":
        return "gguf"
    return str(next(model.parameters()).dtype).replace("torch.", "")


def model_threads(model: Any) -> int:
    """Threads the model's forwards run on."""
    if getattr(model, "kernels", None) == "llama.cpp":
        return int(model.n_threads)
    import torch

    return torch.get_num_threads()


def _time_forwards(models: list[tuple[Any, list[int]]], *, context: int, repeats: int, device: str,
                   vocab: int) -> list[tuple[list[float], float]]:
    """Per (model, sizes): (median seconds per n in sizes, seconds per token of the context
    prefill). All models' forwards are interleaved in every repeat, so a burst of load on a
    shared machine hits target and draft alike and their ratio (what K depends on) holds."""
    import torch

    from engine.torch_engine.kv_cache import cache_for

    gen = torch.Generator().manual_seed(0)
    longest = max(max(sizes) for _, sizes in models)
    ids = torch.randint(0, vocab, (context + longest,), generator=gen).tolist()
    caches, prefill = [], []
    for model, _ in models:
        kv = cache_for(model, device=device)
        kv.extend(ids[:8])  # first-call set-up kept out of the prefill time
        kv.crop(0)
        start = time.perf_counter()
        kv.extend(ids[:context])
        prefill.append((time.perf_counter() - start) / context)
        caches.append(kv)
    samples: list[dict[int, list[float]]] = [{n: [] for n in sizes} for _, sizes in models]
    for rep in range(repeats + 1):  # rep 0 is the warm-up
        for kv, (_, sizes), times in zip(caches, models, samples, strict=True):
            for n in sizes:
                start = time.perf_counter()
                kv.extend(ids[context: context + n], num_logits=n)
                elapsed = time.perf_counter() - start
                kv.crop(context)
                if rep:
                    times[n].append(elapsed)
    return [([statistics.median(times[n]) for n in sizes], per_token)
            for (_, sizes), times, per_token in zip(models, samples, prefill, strict=True)]


def _prefill_line(model: Any, *, context: int, per_token: float, device: str, vocab: int,
                  scale: int = 4) -> tuple[float, float]:
    """(intercept s, slope s/token) of the model's prefill time: the `context`-token prefill
    already timed (`per_token` x context) and one of `scale` x context tokens. A forward pays
    for streaming the weights once plus per token, so the per-token cost of a 64-token
    prefill overprices a 256-token prompt; a line through both fits both. Falls back to the
    proportional price (intercept 0) when noise makes the slope non-positive."""
    import torch

    from engine.torch_engine.kv_cache import cache_for

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (scale * context,), generator=gen).tolist()
    kv = cache_for(model, device=device)
    start = time.perf_counter()
    kv.extend(ids)
    long_s = time.perf_counter() - start
    short_s = per_token * context
    slope = (long_s - short_s) / ((scale - 1) * context)
    if slope <= 0:
        return 0.0, per_token
    return max(short_s - slope * context, 0.0), slope


def monotone(values: list[float]) -> list[float]:
    """The closest non-decreasing sequence in least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [sum, count]
    for v in values:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    out: list[float] = []
    for total, count in blocks:
        out += [total / count] * int(count)
    return out


def measure_forward_costs(target: Any, draft: Any | None, *, k_max: int, context: int = 64, repeats: int = 3,
                          device: str = "cpu", dtype: str = "", backend: str = "torch",
                          target_name: str = "", draft_name: str | None = None) -> ForwardCosts:

    from engine.pacing.hardware import cpu_info

    if k_max < 0 or context < 1 or repeats < 1:
        raise ValueError("k_max >= 0, context >= 1 and repeats >= 1 required")
    load_before = load_per_core()  # taken before the timed forwards add their own load
    start = time.perf_counter()
    vocab = int(target.config.vocab_size)
    models = [(target, list(range(1, k_max + 2)))] + ([(draft, [1])] if draft is not None else [])
    timed = _time_forwards(models, context=context, repeats=repeats, device=device, vocab=vocab)
    target_s = monotone(timed[0][0])
    draft_s = draft_prefill_s = None
    draft_prefill_fixed_s = 0.0
    if draft is not None:
        draft_s = timed[1][0][0]
        draft_prefill_fixed_s, draft_prefill_s = _prefill_line(draft, context=context, per_token=timed[1][1],
                                                               device=device, vocab=vocab)
    info = cpu_info()
    return ForwardCosts(
        target_s=tuple(target_s), draft_s=draft_s, draft_prefill_s=draft_prefill_s,
        draft_prefill_fixed_s=draft_prefill_fixed_s, context=context, repeats=repeats, backend=backend,
        device=device, dtype=dtype or model_dtype(target),
        target=target_name or model_identity(target).split("|")[0], draft=draft_name if draft is not None else None,
        cpu=info.model if device == "cpu" else device, flags=tuple(info.key_flags), kernel_path=kernel_path(target),
        threads=model_threads(target), measure_wall_s=time.perf_counter() - start, load_per_core=load_before,
    )


# ---- cache ---------------------------------------------------------------------------------------


def cache_key(target: Any, draft: Any | None, *, backend: str, device: str, context: int) -> str:
    import torch

    from engine.pacing.hardware import cpu_info

    parts = [
        f"v{CACHE_VERSION}", backend, device, torch.__version__, kernel_path(target), str(model_threads(target)),
        cpu_info().fingerprint(), model_identity(target), model_identity(draft) if draft is not None else "-",
        str(context),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def cache_path(key: str, *, cache_dir: str | os.PathLike[str] | None = None) -> pathlib.Path:
    """`$SPECGATE_COSTS_DIR/<key>.json` when that is set, else `<models root>/.costs/<key>.json`."""
    from engine.models.cache import models_root

    explicit = os.environ.get("SPECGATE_COSTS_DIR")
    root = pathlib.Path(explicit).expanduser() if explicit else models_root(cache_dir) / ".costs"
    return root / f"{key}.json"


def load_per_core() -> float:
    """The 1-minute load average per CPU core (0.0 where the platform has none)."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return 0.0


def load_or_measure(target: Any, draft: Any | None, *, k_max: int, device: str = "cpu", backend: str = "torch",
                    target_name: str = "", draft_name: str | None = None, context: int = 64, repeats: int = 3,
                    cache_dir: str | os.PathLike[str] | None = None, refresh: bool = False) -> ForwardCosts:
    """Cached costs for this machine + models when they cover `k_max`; else measure and store."""
    path = cache_path(cache_key(target, draft, backend=backend, device=device, context=context),
                      cache_dir=cache_dir)
    if not refresh and path.exists():
        try:
            cached = ForwardCosts.from_dict(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError):
            cached = None
        busy_then = cached is not None and cached.load_per_core > BUSY_LOAD
        if cached is not None and cached.k_max >= k_max and not (
                busy_then and load_per_core() <= cached.load_per_core / 2):
            return ForwardCosts.from_dict({**cached.as_dict(), "cached": True})
    costs = measure_forward_costs(target, draft, k_max=k_max, context=context, repeats=repeats, device=device,
                                  backend=backend, target_name=target_name, draft_name=draft_name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(costs.as_dict(), indent=1) + "\n")
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache only costs a re-measurement next start
    return costs
