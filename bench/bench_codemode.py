"""Code mode and privacy, measured.

    python bench/bench_codemode.py [--mb 10]

1. Bytes an agent reads to call one tool: the full direct-mode `tools/list` (every tool's
   definition, as the wire carries it) against codegen's README.md plus the one tool file, for an
   agent allowed everything in the five built-in bundles. Goal: <= 5%.
2. Tokenization throughput on a text result of --mb MB (log-like lines, one email, phone and
   card number in ten lines): MB/s. Goal: >= 50 MB/s. Also shown, not hidden: a customer
   table where every row's email, phone and card are new (phonenumbers' validation of each new
   phone number, ~40 us, then dominates).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bytes_ratio() -> None:
    from bundlectl.config.settings import NamedPattern  # noqa: F401  (warm the import

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "bundlectl.yaml").write_text(
            "version: 1\nbundles: [basic, github, code-review, devops, docs-writer]\n"
            "agents:\n  all: {allow: ['*']}\npolicy: {default: deny}\n"
        )
        env = {**os.environ, "BUNDLECTL_HOME": str(folder / "home")}
        subprocess.run(
            [sys.executable, "-m", "bundlectl", "codegen", "--agent", "all", "--out", "gen"],
            cwd=folder,
            env=env,
            check=True,
            capture_output=True,
        )
        listing = subprocess.run(
            [
                sys.executable,
                "-m",
                "bundlectl",
                "tools",
                "--agent",
                "all",
                "--format",
                "json",
                "--detail",
                "full",
            ],
            cwd=folder,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        tools = json.loads(listing)["tools"]
        wire = json.dumps(
            {
                "tools": [
                    {
                        "name": t["gateway_name"],
                        "description": t.get("description", ""),
                        "inputSchema": t.get("input_schema", {"type": "object"}),
                    }
                    for t in tools
                ]
            },
            separators=(",", ":"),
        )
        readme = (folder / "gen" / "README.md").read_bytes()
        one = (folder / "gen" / "servers" / "github" / "create_issue.py").read_bytes()
        index = (folder / "gen" / "servers" / "github" / "__init__.py").read_bytes()
        direct = len(wire.encode())
        code = len(readme) + len(one)
        print(
            f"one call: direct tools/list {direct:,} bytes ({len(tools)} tools) vs README + one "
            f"tool file {code:,} bytes = {code / direct:.1%} (goal <= 5%); with the server's "
            f"index too: {(code + len(index)) / direct:.1%}"
        )


def throughput(mb: int) -> None:
    line = (
        "2026-11-23T10:00:00Z INFO request handled in 12 ms for tenant acme, path /api/v1/items\n"
    )
    special = (
        "2026-11-23T10:00:01Z INFO user ann@example.com called +1 650-253-0000, "
        "card 4111 1111 1111 1111\n"
    )
    block = line * 9 + special
    out, took, size = _tokenized(block * (mb * 1024 * 1024 // len(block)))
    print(
        f"tokenize {size:.1f} MB: {took:.2f} s = {size / took:.0f} MB/s (goal >= 50 MB/s); "
        f"{out.count('[EMAIL_2]')} emails replaced"
    )


def _tokenized(text: str) -> tuple[str, float, float]:
    """`text` tokenized with every built-in detector: the result, seconds taken, and MB."""
    from bundlectl.privacy.tokenize import Tokenizer, detectors

    tokens = Tokenizer(detectors(["email", "phone", "credit_card", "iban", "ip_address"]))
    # Once per process, not per result: phonenumbers' import and its regions' metadata.
    tokens.text("warm-up: bob@example.org +1 415 555 2671, +44 20 7946 0958")
    began = time.perf_counter()
    out = tokens.text(text)
    return out, time.perf_counter() - began, len(text.encode()) / 1024 / 1024


def _card(number: int) -> str:
    """A Visa-like number that passes Luhn (a distinct one per `number`)."""
    from bundlectl.privacy.checks import luhn

    body = f"4{number:014d}"
    return next(body + digit for digit in "0123456789" if luhn(body + digit))


def distinct(mb: int) -> None:
    rows = []
    size = number = 0
    while size < mb * 1024 * 1024:
        row = (
            f"{number},2026-11-{number % 28 + 1:02d},Customer {number},user{number}@example.com,"
            f"+1 650-{200 + number % 800:03d}-{number % 10000:04d},{_card(number)},"
            f"{number % 997}.50\n"
        )
        rows.append(row)
        size += len(row)
        number += 1
    out, took, size_mb = _tokenized("".join(rows))
    print(
        f"tokenize a {size_mb:.1f} MB table of {number:,} rows, every value new: {took:.2f} s = "
        f"{size_mb / took:.1f} MB/s; {out.count('[PHONE_')} phones, {out.count('[CREDIT_CARD_')}"
        " cards replaced"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=10)
    args = parser.parse_args()
    bytes_ratio()
    throughput(args.mb)
    distinct(args.mb)


if __name__ == "__main__":
    main()
