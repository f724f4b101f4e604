"""Throwaway: the upstream thread per transfer (in _take vs between transfers) of one
relaytrace json."""

import statistics
import sys

from relay_bound_trace import relay_rows


def main(path: str) -> None:
    rows = relay_rows(path)
    received = [r for r in rows if r[2] == "received"]
    offered = [r for r in rows if r[2] == "offered"]
    print(
        "received counts",
        [r[3] for r in received[:3]],
        "first rec t",
        received[0][0] % 100,
        received[1][0] % 100,
    )
    if len(received) == len(offered) + 1:
        received = received[1:]
    busy = [o[0] - r[0] for r, o in zip(received, offered, strict=False)]
    idle = [received[i + 1][0] - offered[i][0] for i in range(len(offered) - 1)]
    print(
        "transfers",
        len(offered),
        f"upstream thread: in _take (received->offered) sum {sum(busy):.3f} "
        f"med {statistics.median(busy) * 1e3:.2f} ms; "
        f"between transfers sum {sum(idle):.3f} med {statistics.median(idle) * 1e3:.2f} ms",
    )
    print("per-transfer busy ms", [round(x * 1e3, 1) for x in busy[:40]])
    print("between ms", [round(x * 1e3, 1) for x in idle[:40]])


if __name__ == "__main__":
    main(sys.argv[1])
