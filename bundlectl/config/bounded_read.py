"""Reading an input file (a config, a manifest, `--args @FILE`, a batch) with a bound on its size.
Apart from `yamlio` so that what reads JSON loads no YAML parser.
"""

from __future__ import annotations

from pathlib import Path

MAX_INPUT = 64 * 1024 * 1024  # bytes of one input file (a config, a manifest, --args @FILE)


class TooLarge(OSError):
    """An input larger than `MAX_INPUT` (or endless, such as /dev/zero)."""


def read_bounded(path: Path | str, limit: int = MAX_INPUT) -> bytes:
    """A file's bytes, at most `limit` of them: a device or a pipe that never ends is refused
    after `limit` bytes instead of filling memory or hanging."""
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(0, f"larger than {limit // (1024 * 1024)} MiB")
    return data
