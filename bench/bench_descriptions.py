"""Reading 5,000 tools' descriptions (#60: <= 0.5 s added to `lint`).

    python bench/bench_descriptions.py [--tools 5000]

Builds a catalog of tools with descriptions and parameters drawn from the labelled corpus
(tests/examples/descriptions), and times `scan_tool` over all of them — with the names of every
other server's tools for the shadowing rule, as lint passes them — median of 5 runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from ruamel.yaml import YAML

from bundlectl.lint.checks_descriptions import _named
from bundlectl.policy.descriptions import scan_tool

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "examples" / "descriptions" / "corpus.yaml"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=5000)
    args = parser.parse_args()
    corpus = YAML(typ="safe", pure=True).load(CORPUS.read_text(encoding="utf-8"))
    texts = corpus["benign"] * 9 + corpus["hostile"]  # mostly benign, as real catalogs are
    servers = 50
    tools = [
        (
            f"srv{i % servers:02d}",
            f"tool_number_{i}",
            texts[i % len(texts)],
            {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": texts[(i + 7) % len(texts)]},
                    "limit": {"type": "integer", "description": "How many to return."},
                },
            },
        )
        for i in range(args.tools)
    ]
    names = {
        s: [n for srv, t, _, _ in tools if srv == s for n in _named(srv, t)]
        for s in {t[0] for t in tools}
    }
    others = {s: frozenset(n for o, ns in names.items() if o != s for n in ns) for s in names}
    times = []
    for _ in range(5):
        started = time.perf_counter()
        found = 0
        for server, name, description, schema in tools:
            found += len(scan_tool(name, description, schema, others[server]))
        times.append(time.perf_counter() - started)
    print(
        f"scan_tool over {args.tools} tools ({found} findings): median "
        f"{statistics.median(times):.3f} s, best {min(times):.3f} s (goal <= 0.5 s)"
    )


if __name__ == "__main__":
    main()
