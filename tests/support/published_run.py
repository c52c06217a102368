"""The published numbers recast as a collected run (results.json) and its config, so that the golden
test renders them through the same renderer as a measured run: the rendered tables must equal the
published text. Test support only: no product stage reads the published numbers this way.
"""

from __future__ import annotations

from fabench.results.contract import backend_entry
from fabench.results.published import published_rows
from fabench.shapes import shape_id, shape_key

NOT_PRINTED = "not printed in the published report"


def _backend(published: dict, name: str, row: dict) -> dict:
    ms = row["ms"].get(name)
    measured = ms is not None
    return backend_entry(published["labels"][name], status="ok" if measured else "unavailable",
                         reason=None if measured else NOT_PRINTED, wall_mean_ms=ms, speedup=row["speedup"].get(name))


def _provenance(published: dict) -> dict:
    keys = ("started finished host device arch driver cuda hip torch triton aiter aiter_commit "
            "runtime image image_id project_commit config_sha256 command").split()
    provenance = dict.fromkeys(keys)
    hw, sw = published["source"]["hardware"], published["source"]["software"]
    provenance.update(device=hw["device"], arch=hw["arch"], torch=sw["torch"], triton=sw["triton"], aiter=sw["aiter"])
    return provenance


def _result(published: dict, run: str, row: dict) -> dict:
    method = published["method"]
    variant = published["variants"][row["variant"]]
    return {
        "schema_version": 1,
        "run": run,
        "variant": row["variant"],
        "shape": dict(row["shape"]),
        "shape_id": shape_id(row["shape"]),
        "dtype": method["dtype"],
        "causal": method["causal"],
        "platform": published["source"]["hardware"]["platform"],
        "roles": dict(published["roles"]),
        "method": {"warmup": method["warmup"], "iters": method["iters"], "reduced": False,
                   "wall": method["wall"], "device_timer": method["device_timer"]},
        "flops": None,
        "flop_convention": None,
        "tolerance": {"max_abs_err": 0.02, "min_cosine": 0.999},
        "kernel_config": {"path": published["kernel_config_path"], "sha256": None, "values": dict(variant["triton"])},
        "backends": {name: _backend(published, name, row) for name in published["labels"]},
        "provenance": _provenance(published),
    }


def _config(published: dict, run: str) -> dict:
    method = published["method"]
    shapes = sorted({shape_key(r["shape"]): r["shape"] for r in published_rows(published)}.values(), key=shape_key)
    return {
        "run": run,
        "dtype": method["dtype"],
        "causal": method["causal"],
        "warmup": method["warmup"],
        "iters": method["iters"],
        "shapes": shapes,
        "backends": list(published["labels"]),
        "roles": {published["source"]["hardware"]["platform"]: dict(published["roles"])},
        "variants": {
            name: {"title": v["title"], "label": v["label"], "triton": dict(v["triton"])}
            for name, v in published["variants"].items()
        },
    }


def as_collected(published: dict, run: str = "published") -> tuple[dict, dict]:
    """(collected results, config) equivalent to a run that measured exactly the published numbers.

    Backends carry the published speedup in `speedup`, so the renderer prints it verbatim instead
    of recomputing it from the rounded times.
    """
    results = [_result(published, run, row) for row in published_rows(published)]
    order = list(published["variants"])
    results.sort(key=lambda r: (order.index(r["variant"]), shape_key(r["shape"])))
    return {"run": run, "results": results}, _config(published, run)
