"""The floor under any gateway: a process between client and server that only copies lines
both ways (asyncio, as `serve` uses), for bench_gateway.py. What `serve` adds beyond this is
its own work (policy, validation, audit); this much is the price of being a process between.

    python bench/raw_relay.py COMMAND...
"""

from __future__ import annotations

import asyncio
import sys


async def main(command: list[str]) -> None:
    child = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    loop = asyncio.get_running_loop()
    ours = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(ours), sys.stdin)
    assert child.stdin is not None
    assert child.stdout is not None
    server_in, server_out = child.stdin, child.stdout

    async def up() -> None:
        while line := await ours.readline():
            server_in.write(line)
        server_in.close()

    async def down() -> None:
        out = sys.stdout.buffer
        while line := await server_out.readline():
            out.write(line)
            out.flush()

    await asyncio.gather(up(), down())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
