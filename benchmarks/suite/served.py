"""A `specgate serve` process on loopback for benchmarks that measure the server over HTTP.

`serve(flags, api_key=...)` is a context manager: it starts `specgate serve
--host 127.0.0.1 --port <free> --api-key <key> <flags>` from this checkout (offline: the
`HF_HUB_OFFLINE` / `TRANSFORMERS_OFFLINE` variables set), waits until `/health` answers 200
(raising RuntimeError with the tail of the server's log if it exits first or stays down past
`timeout_s`), yields a `Served(base_url, log_path)`, and on exit sends SIGTERM (then SIGKILL
after 30 s) to the process it started, and to nothing else. `cpus` (a `taskset -c` list, e.g.
"0") pins the server to those cores; the engine then sizes its threads to them (its CPU count
is the process's affinity). The server's stdout and stderr go
to a temporary log file, readable while it runs (`Served.log_lines()`) and removed after.

Knows nothing of what is measured; talks to the server only through `/health`.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

ROOT = pathlib.Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Served:
    base_url: str
    log_path: pathlib.Path

    @property
    def v1(self) -> str:
        return self.base_url + "/v1"

    def log_lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(flags: list[str], *, api_key: str, timeout_s: float = 900.0, cpus: str | None = None) -> Iterator[Served]:
    port = _free_port()
    log = pathlib.Path(tempfile.mkstemp(prefix="specgate-serve-", suffix=".log")[1])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", "import sys; from cli import main; sys.exit(main())", "serve",
           "--host", "127.0.0.1", "--port", str(port), "--api-key", api_key, *flags]
    if cpus is not None:
        cmd = ["taskset", "-c", cpus, *cmd]
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
    served = Served(f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"specgate serve exited ({proc.returncode}): "
                                   + "\n".join(served.log_lines()[-30:]))
            try:
                if httpx.get(served.base_url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"specgate serve did not become healthy in {timeout_s:g} s")
            time.sleep(1.0)
        yield served
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.unlink(missing_ok=True)
