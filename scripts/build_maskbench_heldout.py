"""Rebuild the held-out schema set `maskbench_heldout` from a guidance-ai/jsonschemabench checkout.

    python scripts/build_maskbench_heldout.py JSONSCHEMABENCH_GIT_DIR OUT_DIR

Contract: for each of the ten maskbench categories that `../shared/data/jsonschemabench` does
not hold, the files `maskbench/data/<Category>---*.json` (JME: `JME_*.json`) of the commit
HEAD of the given repository (a bare git directory or a work tree), sorted by name; every
n-th with n = count // 25, the first 25 (not chosen by content). Writes OUT_DIR/<Category>.jsonl
with one record `{id, category, source_path, schema, tests, meta}` per line, the format of
`../shared/data/jsonschemabench`. At jsonschemabench @ ba103c73 this gives the 250 schemas
`benchmarks/results/schema_coverage*.json` were measured on (per-schema test counts match).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

CATEGORIES = ("Github_hard", "Github_trivial", "Github_ultra", "Handwritten", "JME",
              "JsonSchemaStore", "MCPspec", "Snowplow", "Synthesized", "WashingtonPost")
PER_CATEGORY = 25


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                          check=True).stdout


def main(argv: list[str]) -> int:
    repo, out = argv[1], pathlib.Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    files = git(repo, "ls-tree", "-r", "--name-only", "HEAD", "maskbench/data").split()
    for category in CATEGORIES:
        mine = sorted(f for f in files
                      if f.rsplit("/", 1)[-1].startswith((category + "---", category + "_")))
        step = max(1, len(mine) // PER_CATEGORY)
        lines = []
        for path in mine[::step][:PER_CATEGORY]:
            record = json.loads(git(repo, "show", f"HEAD:{path}"))
            lines.append(json.dumps({
                "id": path.rsplit("/", 1)[-1].removesuffix(".json"), "category": category,
                "source_path": path, "schema": record["schema"],
                "tests": record.get("tests", []), "meta": record.get("meta", {})}))
        (out / f"{category}.jsonl").write_text("\n".join(lines) + "\n")
        print(f"{category}: {len(lines)} of {len(mine)} (every {step})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
