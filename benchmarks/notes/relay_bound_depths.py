"""Throwaway: queue depths over a relayed round from one relaytrace json: the handover
(offered - taken) and the journaler (taken - fanned out), max and time-weighted mean."""

import sys

from relay_bound_trace import relay_rows


def main(path: str) -> None:
    # (time, handover change, journaler change) per stage event
    events: list[tuple[float, int, int]] = []
    for t, _thread, stage, n, *_ in relay_rows(path):
        if stage == "offered":
            events.append((t, n, 0))
        elif stage == "taken":
            events.append((t, -n, n))
        elif stage == "fanout1":
            events.append((t, 0, -n))
    events.sort()
    handover = journaler = handover_max = journaler_max = 0
    handover_weighted = journaler_weighted = 0.0
    last = events[0][0]
    for t, d_handover, d_journaler in events:
        handover_weighted += handover * (t - last)
        journaler_weighted += journaler * (t - last)
        last = t
        handover += d_handover
        journaler += d_journaler
        handover_max = max(handover_max, handover)
        journaler_max = max(journaler_max, journaler)
    span = events[-1][0] - events[0][0]
    print(
        f"handover max {handover_max} mean {handover_weighted / span:.0f}; "
        f"journaler (submitted, not fanned out) max {journaler_max} "
        f"mean {journaler_weighted / span:.0f}; span {span:.3f}s"
    )


if __name__ == "__main__":
    main(sys.argv[1])
