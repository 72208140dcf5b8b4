"""The bench run: settings, the configuration × workload matrix, the sweeps, the outputs.

`run_bench(settings, *, log=print) -> dict` loads the target/draft pair once, warms every
configuration up with one short unrecorded request, runs every
(workload, configuration) cell of the main matrix at (K, T) = (settings.k,
settings.temperature), then the K sweep and the temperature sweep on `sweep_workload`,
aggregates (benchmarks.suite.metrics), writes the JSON to `settings.out`, the PNG plots and
the markdown table next to it (`<stem>.md`, or `bench.md` when `md_out` says so), and
returns the document. Configurations run side by side in the same process on the same
models, interleaved per case, so machine noise spreads over all of them. The same seed per
case gives every configuration the same sampling stream start. A cell the sweeps repeat
exactly (same workload, case, configuration, effective K, temperature and seed: `no-spec` at
any K, the sweep points at the main (K, T)) is measured once and its record reused; the
JSON's `requests` then lists it once per place it is used (main matrix, K sweep,
temperature sweep, in that order).

Main matrix: every configuration on `workloads`; the mask-sensitivity variants
(`json-noschema`, `json-ws1`) only with `variant_configs`. The vLLM configurations start one
engine each (40-65 s on CPU) and run the first `vllm_cases` cases of the main workloads
named in `vllm_workloads` (all when None) `vllm_repeats` times in one go; `vllm-no-spec` is
their baseline. Knows nothing about argv.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from benchmarks.suite.configs import CONFIGS, HF_CONFIGS, TORCH_CONFIGS, VLLM_CONFIGS, check_configs
from benchmarks.suite.records import RequestRecord
from benchmarks.suite.workloads import WORKLOADS, Workload, load_workload

VARIANT_WORKLOADS = ("json-noschema", "json-ws1")


@dataclass(frozen=True)
class BenchSettings:
    quick: bool = True
    target: str = "qwen2.5-coder-1.5b"
    draft: str = "qwen2.5-coder-0.5b"
    dtype: str = "auto"  # as `specgate serve`: engine.pacing.hardware.choose_dtype
    kernels: str = "auto"  # as `specgate serve`: engine.torch_engine.kernels.choose_kernels
    draft_kernels: str = "auto"  # as `specgate serve`: engine.torch_engine.kernels.choose_draft_kernels
    onednn: bool = True  # False: torch's oneDNN off (with the AVX2 caps in the env: an AVX2-only CPU's torch path)
    draft_window: int | None = None  # the draft's prompt window (engine.drafters.window; None: the engine's default)
    workloads: tuple[str, ...] = ("json", "tools", "sql", "chat")
    configs: tuple[str, ...] = tuple(c for c in CONFIGS if c not in ("forced-only", "specgate-fixed-k"))
    variant_workloads: tuple[str, ...] = VARIANT_WORKLOADS
    variant_configs: tuple[str, ...] = ("no-spec", "spec-unmasked-draft", "specgate")
    num_cases: int = 1
    max_tokens: int = 32
    k: int = 4
    temperature: float = 0.0
    sweep_workload: str = "json"
    k_sweep: tuple[int, ...] = (1, 4, 8)
    k_sweep_configs: tuple[str, ...] = ("spec-unmasked-draft", "specgate-fixed-k")
    temperature_sweep: tuple[float, ...] = (0.0, 0.7, 1.0)
    temperature_sweep_configs: tuple[str, ...] = ("no-spec", "spec-raw-q", "specgate")
    sweep_cases: int = 1
    vllm_cases: int | None = 1  # cases per workload for the vLLM configurations (None: num_cases)
    vllm_workloads: tuple[str, ...] | None = ("json", "tools")  # main workloads run on vLLM (None: all)
    vllm_repeats: int = 2  # passes over the vLLM cases in each engine (the spread across passes)
    seed: int = 0
    data_dir: str | None = None
    num_threads: int | None = None
    out: str = "benchmarks/results/bench_quick.json"
    md_out: str | None = None

    def __post_init__(self) -> None:
        check_configs(self.configs)
        check_configs(self.variant_configs)
        check_configs(self.k_sweep_configs)
        check_configs(self.temperature_sweep_configs)
        for name in (*self.workloads, *self.variant_workloads, self.sweep_workload, *(self.vllm_workloads or ())):
            if name not in WORKLOADS:
                raise ValueError(f"unknown workload {name!r}; expected one of {', '.join(WORKLOADS)}")
        if self.vllm_repeats < 1:
            raise ValueError("vllm_repeats must be >= 1")
        if self.num_cases < 1 or self.sweep_cases < 0 or self.max_tokens < 1 or self.k < 1:
            raise ValueError("num_cases, max_tokens and k must be >= 1 and sweep_cases >= 0")
        if any(k < 1 for k in self.k_sweep) or any(t < 0 for t in self.temperature_sweep):
            raise ValueError("K sweep values must be >= 1 and temperatures >= 0")


def quick_settings(**overrides: Any) -> BenchSettings:
    """Every required configuration (not the extra `forced-only`), 1 prompt per workload,
    max_tokens 32, the vLLM configurations on json and tools only, reduced sweeps: K 1/4/8 and
    T 0/0.7/1.0 on one prompt (~8.5 min on 2 quiet cores, 3 of them the vLLM engine starts)."""
    return replace(BenchSettings(), **overrides)


def full_settings(**overrides: Any) -> BenchSettings:
    """Every configuration incl. `forced-only`, 4 prompts per workload (all of them on vLLM too),
    max_tokens 96, the mask-sensitivity variants on the torch + HF configurations, K = 1..8 and
    T 0/0.7/1.0 on 2 prompts (~50 min on 2 cores). Larger runs: raise `--cases`/`--max-tokens`."""
    base = BenchSettings(
        quick=False, workloads=("json", "tools", "sql", "chat"), configs=CONFIGS,
        temperature_sweep_configs=("no-spec", "spec-unmasked-draft", "spec-raw-q", "specgate"),
        variant_configs=("no-spec", "spec-unmasked-draft", "spec-raw-q", "specgate", "hf-assisted"),
        num_cases=4, max_tokens=96, k_sweep=tuple(range(1, 9)), sweep_cases=2, vllm_cases=None,
        vllm_workloads=None, vllm_repeats=3,
        k_sweep_configs=("spec-unmasked-draft", "specgate-fixed-k", "ngram"),
        out="benchmarks/results/bench.json",
    )
    return replace(base, **overrides)


Log = Callable[[str], None]


class Bench:
    """Loaded models + runners; `cell(...)` measures one (workload, config, K, T) cell."""

    def __init__(self, settings: BenchSettings, *, log: Log) -> None:
        import torch

        from benchmarks.suite.torch_runner import TorchRunner
        from engine import loader
        from engine.pacing import cost_model
        from engine.pacing.hardware import choose_dtype, cpu_info
        from engine.torch_engine.kernels import (
            choose_draft_kernels,
            choose_kernels,
            why_not_llama_cpp,
        )

        if settings.num_threads:
            torch.set_num_threads(settings.num_threads)
        if not settings.onednn:
            torch.backends.mkldnn.enabled = False  # type: ignore[assignment]  # a ContextProp that takes a bool
        self.settings = settings
        self.log = log
        start = time.perf_counter()
        needs_draft = any(TORCH_CONFIGS[c].drafter == "model" for c in self._all_torch_configs()) or any(
            c in HF_CONFIGS for c in settings.configs)
        models = [settings.target] + ([settings.draft] if needs_draft else [])
        self.kernels, kernels_why = choose_kernels(settings.kernels, device="cpu", models=models)
        torch_dtype, torch_why = choose_dtype(settings.dtype)
        self.dtype, why = ("gguf", "the GGUF's own quantization") if self.kernels == "llama-cpp" else (torch_dtype, torch_why)
        threads = settings.num_threads or cpu_info().cores

        def load(name: str, on: str) -> tuple[Any, Any]:
            if on == "llama-cpp":
                return loader.load_gguf(name, n_threads=threads, n_ctx=4096)  # type: ignore[no-any-return]
            return loader.load(name, dtype=torch_dtype, device="cpu")

        self.draft_kernels, draft_why = (choose_draft_kernels(settings.draft_kernels, device="cpu", draft=settings.draft)
                                         if needs_draft else ("-", "no draft"))
        log(f"machine: {cpu_info().describe()}; kernels {self.kernels} ({kernels_why}); dtype {self.dtype} ({why}); "
            f"draft kernels {self.draft_kernels} ({draft_why})")
        target, tokenizer = load(settings.target, self.kernels)
        draft = load(settings.draft, self.draft_kernels)[0] if needs_draft else None
        log(f"loaded {settings.target} + {settings.draft if draft is not None else 'no draft'} "
            f"in {time.perf_counter() - start:.1f}s")
        self.runner = TorchRunner(target_model=target, draft_model=draft, tokenizer=tokenizer,
                                  draft_window=settings.draft_window)
        k_max = max(settings.k, *settings.k_sweep)
        self.costs = cost_model.load_or_measure(target, draft, k_max=k_max, target_name=settings.target,
                                                draft_name=settings.draft if draft is not None else None)
        self.runner.costs = self.costs  # the same costs `specgate serve` measures and caches
        llama_draft_why_not = why_not_llama_cpp(device="cpu", models=[settings.draft])
        if any(TORCH_CONFIGS[c].llama_draft for c in self._all_torch_configs()) and llama_draft_why_not:
            self.runner.llama_draft_why_not = llama_draft_why_not
            log(f"specgate-llama-draft unavailable: {llama_draft_why_not}")
        elif any(TORCH_CONFIGS[c].llama_draft for c in self._all_torch_configs()):
            threads = settings.num_threads or cpu_info().cores
            self.runner.llama_draft = loader.load_gguf(settings.draft, n_threads=threads, n_ctx=4096)[0]
            self.runner.llama_draft_costs = cost_model.load_or_measure(
                target, self.runner.llama_draft, k_max=k_max, target_name=settings.target, draft_name=settings.draft)
            log("draft on llama.cpp kernels (specgate-llama-draft): " + "; ".join(self.runner.llama_draft_costs.describe()[1:3]))
        for line in self.costs.describe():
            log(line)
        self._bf16_runner: TorchRunner | None = None
        self._workloads: dict[tuple[str, int], Workload] = {}
        self._measured: dict[tuple[Any, ...], RequestRecord] = {}

    def _all_torch_configs(self) -> set[str]:
        s = self.settings
        names = {*s.configs, *s.variant_configs, *s.k_sweep_configs, *s.temperature_sweep_configs}
        return {n for n in names if n in TORCH_CONFIGS}

    def workload(self, name: str, n: int) -> Workload:
        if (name, n) not in self._workloads:
            data_dir = pathlib.Path(self.settings.data_dir) if self.settings.data_dir else None
            self._workloads[(name, n)] = load_workload(name, n, data_dir=data_dir)
        return self._workloads[(name, n)]

    def measure(self, workload: Workload, case: Any, config: str, *, k: int, temperature: float,
                max_tokens: int, seed: int) -> RequestRecord:
        """One request of a torch or HF configuration (vLLM configurations run in `run_vllm`)."""
        from benchmarks.suite.hf_runner import run_hf_assisted

        if config in HF_CONFIGS:
            transformers_pair = self.kernels == "torch" and self.draft_kernels == "torch"
            return run_hf_assisted(self.runner if transformers_pair else self.bf16_runner(with_draft=True),
                                   workload, case, k=k, temperature=temperature,
                                   max_tokens=max_tokens, seed=seed)
        if TORCH_CONFIGS[config].bf16_reference:
            return self.bf16_runner().run(workload, case, config, k=k, temperature=temperature,
                                          max_tokens=max_tokens, seed=seed)
        return self.runner.run(workload, case, config, k=k, temperature=temperature, max_tokens=max_tokens,
                               seed=seed)

    def bf16_runner(self, *, with_draft: bool = False) -> Any:
        """The runner of the transformers bf16 rows (`hf-plain`; `hf-assisted` when the bench
        runs on llama.cpp kernels): the main one when the bench runs transformers in bf16."""
        from benchmarks.suite.torch_runner import TorchRunner
        from engine import loader

        if self.kernels == "torch" and self.dtype == "bfloat16" and (not with_draft or self.draft_kernels == "torch"):
            return self.runner
        if self._bf16_runner is None or (with_draft and self._bf16_runner.draft_model is None):
            target, tokenizer = loader.load(self.settings.target, dtype="bfloat16", device="cpu")
            draft = loader.load(self.settings.draft, dtype="bfloat16", device="cpu")[0] if with_draft else None
            self._bf16_runner = TorchRunner(target_model=target, draft_model=draft, tokenizer=tokenizer)
        return self._bf16_runner

    def warm_up(self, workload: Workload) -> None:
        """One short unrecorded request per torch / HF configuration in the run: the first
        forwards of a process pay one-off kernel and allocator set-up (measured: the first
        request of a run decoded ~25% slower than the same request later)."""
        start = time.perf_counter()
        for config in sorted(self._all_torch_configs() | ({*HF_CONFIGS} & set(self.settings.configs))):
            self.measure(workload, workload.cases[0], config, k=self.settings.k, temperature=0.0, max_tokens=4,
                         seed=0)
        self.log(f"warm-up {time.perf_counter() - start:.1f}s")

    def run_cells(self, workload: Workload, configs: tuple[str, ...], *, k: int, temperature: float) -> list[RequestRecord]:
        """All configs on all cases of one workload, interleaved per case (history drafts
        start empty: a case drafts only from the cases before it in this call)."""
        s = self.settings
        records: list[RequestRecord] = []
        for runner in (self.runner, self._bf16_runner):
            if runner is not None:
                runner.clear_history()
        for index, case in enumerate(workload.cases):
            for config in configs:
                if config not in TORCH_CONFIGS and config not in HF_CONFIGS:
                    continue
                effective_k = k if config not in TORCH_CONFIGS or TORCH_CONFIGS[config].speculates else 0
                key = (workload.name, case.case_id, config, effective_k, temperature, s.seed + index)
                if key in self._measured:
                    records.append(self._measured[key])
                    continue
                record = self.measure(workload, case, config, k=k, temperature=temperature,
                                      max_tokens=s.max_tokens, seed=s.seed + index)
                self._measured[key] = record
                records.append(record)
                self.log(f"  {workload.name:13} {config:20} K={record.k} T={temperature} {case.case_id[:40]:40} "
                         f"tokens={record.completion_tokens} steps={record.steps} "
                         f"{record.latency_s:.1f}s valid={record.valid}"
                         + (f" ERROR {record.error[:120]}" if record.error else ""))
        return records

    def run_vllm(self, workloads: list[Workload], *, k: int, temperature: float) -> list[RequestRecord]:
        """The vLLM configurations, one engine start each, over the first `vllm_cases` cases."""
        from benchmarks.suite.vllm_rows import vllm_records

        s = self.settings
        n = s.vllm_cases if s.vllm_cases is not None else s.num_cases
        subset = [replace(w, cases=w.cases[:n]) for w in workloads]
        records: list[RequestRecord] = []
        for config in s.configs:
            if config in VLLM_CONFIGS:
                self.log(f"vLLM configuration {config} on {', '.join(w.name for w in subset)} ({n} per workload)")
                records += vllm_records(subset, config, k=k, temperature=temperature, max_tokens=s.max_tokens,
                                        repeats=s.vllm_repeats)
                for record in records[-sum(len(w.cases) for w in subset) * s.vllm_repeats:]:
                    self.log(f"  {record.workload:13} {config:20} {record.case_id[:40]:40} pass {record.repeat} "
                             f"tokens={record.completion_tokens} {record.latency_s:.1f}s valid={record.valid}"
                             + (f" ERROR {record.error[:120]}" if record.error else ""))
        return records


def run_bench(settings: BenchSettings, *, log: Log = print) -> dict[str, Any]:
    from benchmarks.suite import metrics, plots, report
    from benchmarks.suite.vllm_rows import vllm_unavailable_reason

    started = time.perf_counter()
    bench = Bench(settings, log=log)
    s = settings
    bench.warm_up(bench.workload(s.workloads[0], 1))
    main_records: list[RequestRecord] = []
    for name in s.workloads:
        log(f"workload {name}")
        main_records += bench.run_cells(bench.workload(name, s.num_cases), s.configs, k=s.k, temperature=s.temperature)
    on_vllm = [name for name in s.workloads if s.vllm_workloads is None or name in s.vllm_workloads]
    main_records += bench.run_vllm([bench.workload(name, s.num_cases) for name in on_vllm], k=s.k,
                                   temperature=s.temperature)
    for name in s.variant_workloads:
        log(f"workload {name}")
        main_records += bench.run_cells(bench.workload(name, s.num_cases), s.variant_configs, k=s.k,
                                        temperature=s.temperature)
    k_records: list[RequestRecord] = []
    t_records: list[RequestRecord] = []
    if s.sweep_cases:
        sweep = bench.workload(s.sweep_workload, s.sweep_cases)
        log(f"K sweep on {sweep.name}")
        k_records += bench.run_cells(sweep, ("no-spec",), k=1, temperature=s.temperature)
        for k in s.k_sweep:
            k_records += bench.run_cells(sweep, s.k_sweep_configs, k=k, temperature=s.temperature)
        log(f"temperature sweep on {sweep.name}")
        for temperature in s.temperature_sweep:
            t_records += bench.run_cells(sweep, s.temperature_sweep_configs, k=s.k, temperature=temperature)

    unavailable = {}
    reason = vllm_unavailable_reason()
    if reason is not None:
        unavailable = {name: reason for name in VLLM_CONFIGS if name in s.configs}
    out = pathlib.Path(s.out)
    document: dict[str, Any] = {
        "results": metrics.aggregate(main_records),
        "sweeps": {"k": metrics.aggregate(k_records), "temperature": metrics.aggregate(t_records)},
        "machine": {**report.machine_info(), "dtype": bench.dtype, "kernels": bench.kernels,
                    "draft_kernels": bench.draft_kernels, "forward_costs": bench.costs.as_dict()},
        "settings": asdict(s),
        "unavailable": unavailable,
        "requests": [r.as_dict() for r in main_records + k_records + t_records],
    }
    document["plots"] = plots.plot_sweeps(document, out.parent, out.stem)
    document["wall_s"] = time.perf_counter() - started
    report.write_json(document, out)
    md_path = pathlib.Path(s.md_out) if s.md_out else out.with_suffix(".md")
    md_path.write_text(report.markdown(document))
    log(f"wrote {out} and {md_path} in {document['wall_s']:.0f}s")
    return document
