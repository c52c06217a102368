"""Shape ids: b4-s512-h8-d256 names (batch, seq, heads, head_dim) in file names and wildcards."""

from __future__ import annotations

import argparse
import re

SHAPE_ID_PATTERN = r"b(\d+)-s(\d+)-h(\d+)-d(\d+)"
_KEYS = ("batch", "seq", "heads", "head_dim")


def shape_id(shape: dict) -> str:
    return "b{batch}-s{seq}-h{heads}-d{head_dim}".format(**shape)


def parse_shape_id(text: str) -> dict:
    match = re.fullmatch(SHAPE_ID_PATTERN, text)
    if not match:
        raise argparse.ArgumentTypeError(f"shape id {text!r} is not of the form b4-s512-h8-d256")
    return dict(zip(_KEYS, map(int, match.groups())))
