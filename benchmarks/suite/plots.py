"""PNG plots of the sweeps (matplotlib, Agg backend): K = 1..8 and temperature.

`plot_sweeps(document, out_dir, stem)` writes `<stem>_k.png` (decode tokens/s, tokens per
target step and acceptance against K, one line per configuration) and
`<stem>_temperature.png` (acceptance, tokens per target step and speedup against temperature) when the sweeps hold rows; returns the written paths. Knows nothing
about models.
"""

from __future__ import annotations

import pathlib
from typing import Any


def _lines(rows: list[dict[str, Any]], x: str, y: str) -> dict[str, tuple[list[float], list[float]]]:
    out: dict[str, tuple[list[float], list[float]]] = {}
    for row in sorted(rows, key=lambda r: (r["config"], r[x])):
        if row.get(y) is None:
            continue
        xs, ys = out.setdefault(row["config"], ([], []))
        xs.append(float(row[x]))
        ys.append(float(row[y]))
    return out


def _plot(rows: list[dict[str, Any]], x: str, panels: list[tuple[str, str]], title: str, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6))
    for axis, (y, label) in zip(axes, panels, strict=True):
        for config, (xs, ys) in _lines(rows, x, y).items():
            axis.plot(xs, ys, marker="o", label=config)
        axis.set_xlabel(x)
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sweeps(document: dict[str, Any], out_dir: pathlib.Path, stem: str) -> list[str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    sweeps = document.get("sweeps", {})
    k_rows = [r for r in sweeps.get("k", []) if r.get("k")]
    if k_rows:
        path = out_dir / f"{stem}_k.png"
        _plot(k_rows, "k", [("tokens_per_second", "decode tokens/s"),
                            ("mean_accepted_length", "tokens per target step"), ("acceptance_rate", "acceptance")],
              f"K sweep ({k_rows[0]['workload']}, T={k_rows[0]['temperature']})", path)
        written.append(str(path))
    t_rows = [r for r in sweeps.get("temperature", []) if r["config"] != "no-spec"]
    if t_rows:
        path = out_dir / f"{stem}_temperature.png"
        _plot(t_rows, "temperature", [("acceptance_rate", "acceptance"),
                                      ("mean_accepted_length", "tokens per target step"),
                                      ("speedup", "speedup over no-spec")],
              f"temperature sweep ({t_rows[0]['workload']}, K={t_rows[0]['k']})", path)
        written.append(str(path))
    return written
