"""Throwaway microbenchmark: redis-server CPU per publication of the journal's APPEND script
and of variants, EVALSHA of 256-entry envelopes shaped as a relay's against a private
redis-server (notes/relay-bound.md, loop31). Variants: ``return`` only, ``cjson.decode``
only, APPEND without its XADD calls, APPEND with ids written ``N`` instead of ``N-0``."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import redis

from seqrepair.journal.scripts import APPEND

VARIANTS = {
    "append": APPEND,
    "return only": "return {'ok', '1'}",
    "decode only": "local batch = cjson.decode(ARGV[3])\nreturn {'ok', batch[#batch][1]}",
    "append, no XADD": re.sub(r"call\('XADD'", "nop('XADD'", APPEND).replace(
        "local call = redis.call", "local call = redis.call\nlocal function nop() end"),
    "append, id N": APPEND.replace("local id = e[1] .. '-0'", "local id = e[1]"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def envelope(first: int, n: int = 256) -> bytes:
    rows = [[str(s), "/bench/topic", "update", json.dumps({"n": s, "price": 1.5}), None,
             repr(time.time()), str(s)] for s in range(first, first + n)]
    return json.dumps(rows).encode()


def main() -> None:
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--save", "",
                             "--appendonly", "no", "--dir", str(Path("/tmp"))],
                            stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)

    def cpu() -> float:
        info: dict[str, Any] = client.info("cpu")  # type: ignore[assignment]
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    try:
        for _ in range(3):
            for name, script in VARIANTS.items():
                sha = client.script_load(script)
                client.flushall()
                batches, n = 400, 256
                envs = [envelope(1 + b * n, n) for b in range(batches)]
                before = cpu()
                for env in envs:
                    client.evalsha(sha, 2, "s:stream", "s:meta", "src", "32", env)
                used = (cpu() - before) / (batches * n) * 1e6
                print(f"{name:18s} redis cpu {used:.2f} us/pub")
    finally:
        proc.terminate()


if __name__ == "__main__":
    main()
