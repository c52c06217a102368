"""Shapes and their names: b4-s512-h8-d256 names (batch, seq, heads, head_dim) in file names and
wildcards, "(4, 512, 8, 256)" in tables, (B,S,H,D) order for sorting, and the main head_dim."""

from __future__ import annotations

import argparse
import re
from collections import Counter
from typing import Iterable

SHAPE_ID_PATTERN = r"b(\d+)-s(\d+)-h(\d+)-d(\d+)"
_KEYS = ("batch", "seq", "heads", "head_dim")


def shape_id(shape: dict) -> str:
    return "b{batch}-s{seq}-h{heads}-d{head_dim}".format(**shape)


def parse_shape_id(text: str) -> dict:
    match = re.fullmatch(SHAPE_ID_PATTERN, text)
    if not match:
        raise argparse.ArgumentTypeError(f"shape id {text!r} is not of the form b4-s512-h8-d256")
    return dict(zip(_KEYS, map(int, match.groups())))


def shape_key(shape: dict) -> tuple:
    """Shapes sort in the order of the report's "(B,S,H,D)" column."""
    return tuple(shape[key] for key in _KEYS)


def shape_text(shape: dict) -> str:
    """A shape as the tables spell it: (B, S, H, D)."""
    return "({}, {}, {}, {})".format(*shape_key(shape))


def main_head_dim(shapes: Iterable[dict]) -> int | None:
    """The head_dim most shapes share: the report's subject (the published report's 256); other
    head dims are side comparisons, as its appendix's d_k=64 line. None for no shapes."""
    counts = Counter(shape["head_dim"] for shape in shapes)
    return counts.most_common(1)[0][0] if counts else None
