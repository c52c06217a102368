"""Our figures beside the peer's: an archived run's device medians against nvbench's cold GPU time
for the same kernels, card and shapes (the JSON `tools/nvbench_peer.py` writes), as a Markdown table.

Usage: python tools/nvbench_table.py RESULTS_JSON NVBENCH_JSON

Both time a call's kernels with the L2 flushed before each call, but not the same span: ours is the
kernels' own time by CUPTI (gaps between a call's kernels left out), nvbench's an event pair around
each launch (a launch's gaps and, for cuDNN, its small set-up kernel inside). The table says so.
"""

import json
import sys

from nvbench_peer import NATIVE_SHAPE, SHAPES as PEER_SHAPES  # the peer's states (this folder)

# The peer's SDPA backends as our backends' names
PEER_BACKENDS = {"cudnn": "sdpa_cudnn", "flash": "sdpa_flash"}


def nvbench_states(doc: dict) -> dict[tuple[str, tuple], float]:
    """nvbench's cold GPU median (ms) per (our backend, shape)."""
    out = {}
    for bench in doc["benchmarks"]:
        for state in bench["states"]:
            axes = {a["name"]: a["value"] for a in state.get("axis_values") or []}
            summaries = {s["tag"]: s for s in state["summaries"]}
            median = summaries.get("nv/cold/time/gpu/median")
            if median is None:
                continue
            seconds = float({d["name"]: d["value"] for d in median["data"]}["value"])
            if bench["name"] == "native_state":
                out[("native", NATIVE_SHAPE)] = seconds * 1e3
            else:
                out[(PEER_BACKENDS[axes["backend"]], PEER_SHAPES[int(axes["shape"])])] = seconds * 1e3
    return out


def ours(doc: dict) -> dict[tuple[str, tuple], dict]:
    """Our device figure (ms, with its 95% CI) per (backend, shape), from the default variant."""
    out = {}
    for result in doc["results"]:
        if result["variant"] != "default":
            continue
        s = result["shape"]
        shape = (s["batch"], s["seq"], s["heads"], s["head_dim"])
        for name, entry in result["backends"].items():
            stats = (entry.get("stats") or {}).get("device_ms")
            if entry.get("status") == "ok" and stats:
                out[(name, shape)] = stats
    return out


def table(results: dict, peer: dict) -> str:
    mine = ours(results)
    rows = ["| cell | ours (us) [95% CI] | nvbench (us) | ours / nvbench |", "|---|---|---|---|"]
    for (backend, shape), theirs in sorted(peer.items(), key=lambda kv: (kv[0][0], kv[0][1][1], kv[0][1][3])):
        stats = mine.get((backend, shape))
        if stats is None:
            rows.append(f"| {backend} {shape} | not measured | {theirs * 1e3:.2f} | - |")
            continue
        lo, hi = stats["ci95"]
        rows.append(f"| {backend} {shape} | {stats['median'] * 1e3:.2f} [{lo * 1e3:.2f}, {hi * 1e3:.2f}] | "
                    f"{theirs * 1e3:.2f} | {stats['median'] / theirs:.3f} |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with open(argv[0]) as f:
            results = json.load(f)
        with open(argv[1]) as f:
            peer = nvbench_states(json.load(f))
        text = table(results, peer)
    except (OSError, ValueError, KeyError, IndexError, TypeError) as err:
        # One line: which input could not be read as a run's results.json and nvbench's JSON.
        print(f"tools/nvbench_table.py: {argv[0]} and {argv[1]} are not a run's results.json and "
              f"nvbench's JSON: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
