"""What may be compared with what: the identities of the code a cell ran, of the hardware a run
ran on, and of the experiment (the settings that change what is measured). Built from facts about
code and hardware only, never from paths, times, process ids or compile-cache state, so identical
software on one card gives identical identities. The comparison policy (fabench.analysis.policy)
and the merge's kernel-difference note ask here; one definition of each.
"""

from __future__ import annotations

import json
from enum import StrEnum
from functools import lru_cache

from fabench.analysis.result_types import METHOD, method_of, provenance_of
from fabench.platforms import PlatformName
from fabench.resources import SCHEMA_DIR

# Facts that name where or when something ran, not what ran: never part of an identity.
NOT_CODE = frozenset({"configs_dir", "path", "cwd", "generated_sha256", "taken_at", "started", "finished"})
LAUNCH_FACTS = ("kernel", "num_warps", "num_stages", "block_sizes")


def _facts_only(value):
    """`value` without the keys that name paths, times or cache state (recursively)."""
    if isinstance(value, dict):
        return {k: _facts_only(v) for k, v in sorted(value.items()) if k not in NOT_CODE}
    if isinstance(value, list):
        return [_facts_only(v) for v in value]
    return value


def launched_kernels(kernels: dict | None) -> dict | None:
    """What a backend's profiled call launched: the kernels' names, the longest kernel's name,
    source digest and launch settings. Not the digest of what Inductor generated: it differs
    between a process with cold compile caches and one with warm caches for the same kernel."""
    kernels = kernels or {}
    launch = kernels.get("launch") or {}
    found = {key: launch.get(key) for key in LAUNCH_FACTS if launch.get(key) is not None}
    if kernels.get("names") is not None:
        found["names"] = list(kernels["names"])
    if kernels.get("source_sha256"):
        found["source_sha256"] = kernels["source_sha256"]
    return found or None


def code_identity(entry: dict | None) -> dict:
    """What one backend entry records of the code that ran: its implementation (kernel, packages
    and versions, compiler), the config VALUES it read, and the launched kernels (launched_kernels).
    Identical software gives an identical identity, whatever the paths, times or compile-cache
    state; a fact not recorded is None."""
    entry = entry or {}
    return {"implementation": _facts_only(entry.get("implementation")),
            "kernel_config": _facts_only(entry.get("kernel_config")),
            "launched": launched_kernels(entry.get("kernels"))}


def code_differences(a: dict | None, b: dict | None) -> list[str]:
    """The facts in which two entries' code differs (a fact one of them does not record is not
    held against them: results from before it was recorded are judged on the others)."""
    if not (_ran(a) and _ran(b)):
        return [] if _ran(a) == _ran(b) else ["ran in one only"]
    ia, ib = code_identity(a), code_identity(b)
    return [key for key in ia if ia[key] is not None and ib[key] is not None and _canon(ia[key]) != _canon(ib[key])]


def same_code(a: dict | None, b: dict | None) -> bool:
    """Whether two backend entries ran the same code (both ran, and no recorded fact differs)."""
    return _ran(a) and _ran(b) and not code_differences(a, b)


def _ran(entry: dict | None) -> bool:
    return entry is not None and entry.get("status") in ("ok", "failed")


def _canon(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def hardware_identity(results: list[dict]) -> dict:
    """What ran the results: platform, device model and architecture (the model), the cards (GPU
    UUIDs; on a CPU, the host) and the cards of their host(s) where recorded (`host_cards`:
    provenance.host_cards, every card the driver listed; [] in results from before it)."""
    if not results:
        return {"platform": None, "device": None, "arch": None, "cards": [], "host_cards": []}
    # Results made by hand (tests, tools) may carry no provenance: hardware unknown, not an error.
    provenance = [provenance_of(r) for r in results]
    first = provenance[0]
    gpu = first.get("gpu") or {}
    platform = results[0].get("platform")
    if platform == PlatformName.CPU:
        cards = sorted({f"host {p.get('host')}" for p in provenance if p.get("host")})
        host_cards = cards
    else:
        # The card of each measuring process where its exit recorded it (a job may spread its
        # processes over the cards of a host), else the run's.
        cards = sorted(({(p.get("gpu") or {}).get("uuid") for p in provenance}
                        | {e.get("gpu_uuid") for r in results for e in method_of(r).get("process_exits") or []})
                       - {None})
        host_cards = sorted({card for p in provenance for card in p.get("host_cards") or ()})
    return {"platform": platform, "device": gpu.get("name") or first.get("device"), "arch": first.get("arch"),
            "cards": cards, "host_cards": host_cards}


def hardware_key(identity: dict) -> tuple:
    return identity.get("platform"), identity.get("device"), identity.get("arch")


def hardware_text(identity: dict) -> str:
    return " ".join(str(v) for v in hardware_key(identity) if v)


def same_hardware(a: dict, b: dict) -> bool:
    """Two hardware identities of one model (platform, device, architecture)."""
    return hardware_key(a) == hardware_key(b)


def same_card(a: dict, b: dict) -> bool:
    """Two hardware identities of the very same cards (a CPU: the same host)."""
    return same_hardware(a, b) and bool(a.get("cards")) and a.get("cards") == b.get("cards")


class PairType(StrEnum):
    """What two runs of one GPU model are to each other, by the cards their processes ran on: each
    kind of pair has its own noise beyond the runs' own (fabench.analysis.components) and so its own
    smallest change a comparison can see (calibrations.yaml `pair_types`)."""

    SAME_CARD = "same card"  # one card each, the same one (a CPU: the same host)
    OTHER_CARD = "other card"  # one card each, two cards of one host
    OTHER_HOST = "other host"  # one card each, cards of two hosts (or hosts that cannot be told apart)
    SEVERAL_CARDS = "several cards"  # a run spread its processes over several cards, every card of both runs on one host
    SEVERAL_CARDS_OTHER_HOST = "several cards, other host"  # as above, the two runs' cards on two hosts (or not known)


def hosts_of(identities: list[dict]) -> dict[str, frozenset]:
    """card -> every card known to share its host: the host_cards each run recorded, and, for runs
    from before that record, the cards one run used together (a run of several cards names one
    host's cards). The links of every identity given, so a pair's host is told by its archive."""
    parent: dict[str, str] = {}

    def root(card: str) -> str:
        while parent.setdefault(card, card) != card:
            card = parent[card]
        return card

    for identity in identities:
        group = list(identity.get("host_cards") or ()) + list(identity.get("cards") or ())
        for card in group[1:]:
            parent[root(card)] = root(group[0])
    members: dict[str, set] = {}
    for card in list(parent):
        members.setdefault(root(card), set()).add(card)
    return {card: frozenset(members[root(card)]) for card in parent}


def pair_type(a: dict, b: dict, hosts: dict[str, frozenset] | None = None) -> PairType | None:
    """The kind of pair two hardware identities make (None: other models, never compared). Two
    runs on single cards of one host are told apart from runs on two hosts only where a host's
    cards are known (`hosts`: hosts_of over the runs at hand, else the two identities' own); where
    they are not, the pair counts as of two hosts, the wider noise."""
    if not same_hardware(a, b) or not a.get("cards") or not b.get("cards"):
        return None if not same_hardware(a, b) else PairType.OTHER_HOST
    hosts = hosts if hosts is not None else hosts_of([a, b])
    cards = set(a["cards"]) | set(b["cards"])
    one_host = cards <= hosts.get(a["cards"][0], frozenset())
    if len(a["cards"]) > 1 or len(b["cards"]) > 1:
        # A two-card run against a run of another host holds both hosts' card effects and the
        # hosts' own: a wider noise than one host's cards (calibrations.yaml fits each).
        return PairType.SEVERAL_CARDS if one_host else PairType.SEVERAL_CARDS_OTHER_HOST
    if a["cards"] == b["cards"]:
        return PairType.SAME_CARD
    return PairType.OTHER_CARD if one_host else PairType.OTHER_HOST


def matches_published_hardware(results: list[dict], published: dict) -> bool:
    """Whether every result ran on the hardware the published numbers were measured on: its
    platform, and its architecture or (the published report names no architecture) device name."""
    hardware = (published.get("source") or {}).get("hardware") or {}
    arch, device = hardware.get("arch"), (hardware.get("device") or "").lower()
    for result in results:
        ours = hardware_identity([result])
        if ours["platform"] != hardware.get("platform", ours["platform"]):
            return False
        if not ((arch and ours["arch"] == arch) or (device and device in (ours["device"] or "").lower())):
            return False
    return True


# The mark each field of a result's method carries in the result schema (x-fabench-role).
ROLE_MARK = "x-fabench-role"
SETTING, DESCRIPTION = "setting", "description"


# A setting only where the host computes: torch's threads move a CPU run's times, never a GPU
# kernel's device time (a GPU run of 32 threads and one of 1 measure one experiment).
HOST_SETTING = "host setting"


@lru_cache(maxsize=None)
def method_roles() -> dict[str, str]:
    """Each declared method field's role, from the result schema's marks: `setting` when it
    changes what is measured, `description` when it describes, observes or judges, `host setting`
    when it changes what a CPU run measures only. Declared in the schema, beside each field's type,
    so that a new field is decided where it is written down."""
    schema = json.loads((SCHEMA_DIR / "result.schema.json").read_text())
    fields = schema["properties"][METHOD]["properties"]
    return {name: rule.get(ROLE_MARK) for name, rule in fields.items()}


def experiment_settings(method: dict | None, platform: str | None = None) -> dict:
    """The method's fields that change what is measured on `platform`. A field the schema does not
    declare counts as a setting: a run is never called comparable on a field nobody has judged."""
    roles = method_roles()
    on_gpu = platform is not None and platform != PlatformName.CPU
    return {k: v for k, v in (method or {}).items()
            if roles.get(k, SETTING) != DESCRIPTION and not (on_gpu and roles.get(k) == HOST_SETTING)}


def experiment_identity(result: dict) -> dict:
    """The settings of one job that change what is measured: shape, dtype, masking, tolerances,
    and the method's settings (experiment_settings). Two runs of one experiment may differ only
    in code and hardware (the cards, their number, the run's name are hardware and naming)."""
    return {"shape": result.get("shape"), "dtype": result.get("dtype"), "causal": result.get("causal"),
            "tolerance": result.get("tolerance"), "flop_convention": result.get("flop_convention"),
            "method": experiment_settings(method_of(result), result.get("platform"))}


def experiment_differences(a: list[dict], b: list[dict]) -> list[str]:
    """The experiment settings in which two runs differ, over the jobs both measured, as
    'key: old -> new' (empty: one experiment)."""
    jobs_a = {(r["variant"], r["shape_id"]): experiment_identity(r) for r in a}
    jobs_b = {(r["variant"], r["shape_id"]): experiment_identity(r) for r in b}
    found: dict[str, str] = {}
    for job in sorted(set(jobs_a) & set(jobs_b)):
        for key, (old, new) in _flat_differences(jobs_a[job], jobs_b[job]).items():
            found.setdefault(key, f"{key}: {old} -> {new}")
    return list(found.values())


def _flat_differences(a: dict, b: dict, prefix: str = "") -> dict:
    out = {}
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict) and key != "shape":
            out.update(_flat_differences(x, y, f"{prefix}{key}."))
        elif _canon(x) != _canon(y):
            out[f"{prefix}{key}"] = (_short(x), _short(y))
    return out


def _short(value) -> str:
    return "absent" if value is None else (value if isinstance(value, str) else _canon(value))
