"""The benchmark image's recipe, read without building it or asking an engine: its tag (a hash of the
Dockerfile, the build arguments and the package source, so an image that is already there is not
built again), the file name of its manifest, and the build arguments its Dockerfile declares. The
plan reads these; the build (fabench.container.image) tags what it builds by them.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from pathlib import Path
from typing import Iterable

DEFAULT_NAME = "fabench"
# workflow/schemas: the schemas' one copy, which src/fabench/schemas links to (package data).
DEFAULT_PACKAGE_PATHS = ("pyproject.toml", "src", "workflow/schemas", "envs/image-aiter.txt",
                         "envs/image-aiter-index.txt", "envs/image-package.txt")
_SKIP_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


def _package_files(paths: Iterable[str | Path], root: Path) -> list[tuple[str, Path]]:
    """(path relative to the context, file) of every file the image gets from our package, sorted."""
    files = []
    for p in paths:
        full = Path(p) if Path(p).is_absolute() else root / p
        if not full.exists():
            raise FileNotFoundError(f"package path {full} does not exist")
        for f in [full] if full.is_file() else (f for f in full.rglob("*") if f.is_file()):
            rel = f.relative_to(root) if f.is_relative_to(root) else f
            if not _generated(rel):
                files.append((rel.as_posix(), f))
    return sorted(files)


def _generated(rel: Path) -> bool:
    """Byte code, tool caches and egg-info: made by running or installing, not part of the source."""
    return bool(_SKIP_PARTS & set(rel.parts)) or rel.suffix in _SKIP_SUFFIXES or any(
        part.endswith(".egg-info") for part in rel.parts)


def image_hash(dockerfile: str | Path, build_args: dict | None = None,
               package_paths: Iterable[str | Path] = DEFAULT_PACKAGE_PATHS,
               context: str | Path | None = None) -> str:
    """sha256 over the Dockerfile, the build arguments and the package files (path + bytes)."""
    dockerfile = Path(dockerfile)
    root = Path(context) if context is not None else dockerfile.parent
    h = hashlib.sha256()
    h.update(b"dockerfile\0" + dockerfile.read_bytes() + b"\0")
    args = {str(k): "" if v is None else str(v) for k, v in (build_args or {}).items()}
    h.update(b"build-args\0" + json.dumps(args, sort_keys=True).encode() + b"\0")
    ignore = root / ".dockerignore"
    if ignore.is_file():
        h.update(b"dockerignore\0" + ignore.read_bytes() + b"\0")
    for rel, f in _package_files(package_paths, root):
        h.update(b"file\0" + rel.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def image_tag(dockerfile: str | Path, build_args: dict | None = None,
              package_paths: Iterable[str | Path] = DEFAULT_PACKAGE_PATHS,
              name: str = DEFAULT_NAME, context: str | Path | None = None) -> str:
    """``<name>:<16 hex digits>``, derived from what goes into the image."""
    return f"{name}:{image_hash(dockerfile, build_args, package_paths, context)[:16]}"


def manifest_name(tag: str) -> str:
    """File name of a tag's manifest (``fabench:abc`` -> ``fabench_abc.json``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", tag) + ".json"


# Build arguments every build takes without an ARG line (Docker's predefined proxy arguments).
PREDEFINED_BUILD_ARGS = frozenset(name for base in ("HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY")
                                  for name in (base, base.lower()))


def dockerfile_args(dockerfile: str | Path) -> set[str]:
    """Every build argument the Dockerfile declares (``ARG NAME`` or ``ARG NAME=default``), and
    Docker's predefined ones: a build argument not among them is ignored by the build."""
    declared = set(re.findall(r"(?im)^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)", Path(dockerfile).read_text()))
    return declared | PREDEFINED_BUILD_ARGS


def dockerfile_arg_defaults(dockerfile: str | Path) -> dict[str, str]:
    """The ``ARG NAME=default`` values of a Dockerfile (last one wins, as for a build)."""
    defaults: dict[str, str] = {}
    for line in Path(dockerfile).read_text().splitlines():
        m = re.match(r"\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?\s*$", line)
        if m and m.group(2) is not None:
            value = m.group(2).strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            defaults[m.group(1)] = value
    return defaults


def build_args_error(config: dict, project: Path) -> str | None:
    """The one line for a missing Dockerfile, or a build argument its Dockerfile does not declare (a
    misspelt one, or one named under the wrong key): the build would ignore it and build another
    image than meant. `config` has the schema's defaults; paths are relative to `project`."""
    images = [("image", config["image"], config["image"].get("build_args", {}))]
    images += [(f"platforms.{label}", {**config["image"], **settings}, settings.get("build_args", {}))
               for label, settings in config["platforms"].items()]
    for where, image, build_args in images:
        dockerfile = Path(project) / image["dockerfile"]
        if not dockerfile.is_file():
            return f"{where}.dockerfile: no Dockerfile at {dockerfile}"
        declared = dockerfile_args(dockerfile)
        for name in build_args:
            if name not in declared:
                close = difflib.get_close_matches(name, sorted(declared), n=1)
                return (f"{where}.build_args.{name}: {dockerfile} declares no ARG {name}, so the build would "
                        f"ignore it (it declares {', '.join(sorted(declared - PREDEFINED_BUILD_ARGS))})"
                        + (f"; did you mean {close[0]!r}?" if close else ""))
    return None
