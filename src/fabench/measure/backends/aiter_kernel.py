"""AMD's aiter Triton MHA forward, loaded from the installed aiter and configured through its own
config file and loader, on ROCm and on any other host where Triton runs (CUDA; CPU for the loader).

Nothing of aiter is copied or modified on disk. Three things stand between the installed package
and a host without ROCm (../shared/reference/facts.md), and each is handled here, in memory:

1. aiter's package root loads HIP modules and fails without ROCm. Off ROCm, `aiter` is registered
   as a bare package object over the installed directory, so its submodules import and its
   __init__ never runs (`load_aiter`). On ROCm the real package is imported (CK needs it).
2. aiter's arch query returns Triton's target arch, an int on CUDA (90), and aiter compares it with
   strings and maps it to the name of its config file. Off ROCm it answers a named AMD arch
   (`config_arch`, the published target's by default): the name of the config file it reads.
3. Triton's CUDA backend refuses AMD-only launch options ("Keyword argument waves_per_eu was
   specified but unrecognised"). `launch_options` asks Triton which keys the active backend and
   the kernel accept; the rest is left out of the launch and recorded as not applied.

The config goes through aiter's own file and loader: `ask_config_name` lets aiter's `_get_config`
say which file it opens, `install_config` puts the variant's patched file under that name in a
directory of this process's own and points aiter's config path there (the installed package is
shared by every job and never written), and `read_back` returns what the loader then loads.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.machinery
import importlib.util
import shutil
import sys
import tempfile
import types
from pathlib import Path

from fabench.aiter_config import DEFAULT_ARCH, aiter_version, installed_aiter_dir
from fabench.platforms import PlatformName

# Where aiter keeps its Triton MHA forward: the user-facing module (flash_attn_func) and the kernel
# module that holds the config loader (_get_config), by aiter version, newest last.
API_MODULES = ("aiter.ops.triton.mha", "aiter.ops.triton.attention.mha")
LOADER_MODULES = ("aiter.ops.triton._triton_kernels.mha", "aiter.ops.triton._triton_kernels.attention.mha")
ARCH_INFO_MODULE = "aiter.ops.triton.utils._triton.arch_info"
CONFIGS_PATH_NAME = "AITER_TRITON_CONFIGS_PATH"


class AiterUnavailable(RuntimeError):
    """AMD's aiter (or the part of it needed here) cannot be loaded on this host."""


def unavailable_reason() -> str | None:
    """Why AMD's aiter cannot be used here, or None. Reads metadata only: cheap, imports nothing."""
    package = installed_aiter_dir()
    if package is None:
        return "AMD's aiter is not installed (pip install -e '.[aiter]', or the container built from git)"
    if not (package / "ops" / "triton").is_dir():
        version = aiter_version(package) or "an unknown distribution"
        return (f"the installed `aiter` ({version}) is not AMD's aiter (no aiter/ops/triton): the name `aiter` on "
                "the package index is an unrelated project; AMD's is `amd-aiter`")
    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed (aiter's kernels are Triton kernels)"
    return None


def load_aiter(platform: str, config_arch: str = DEFAULT_ARCH) -> None:
    """Make aiter's Triton modules importable here, without running the package root off ROCm."""
    reason = unavailable_reason()
    if reason:
        raise AiterUnavailable(reason)
    if platform == PlatformName.ROCM:
        importlib.import_module("aiter")
        return
    loaded = sys.modules.get("aiter")
    if loaded is None:
        sys.modules["aiter"] = _bare_package("aiter", installed_aiter_dir())
    arch_info = importlib.import_module(ARCH_INFO_MODULE)
    if getattr(arch_info.get_arch, "fabench_config_arch", None) != config_arch:
        arch_info.get_arch = _named_arch(config_arch)


def _bare_package(name: str, directory: Path) -> types.ModuleType:
    """A package object over `directory` whose __init__.py is never executed."""
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(directory)]
    module = importlib.util.module_from_spec(spec)
    module.__path__ = [str(directory)]
    return module


def _named_arch(arch: str):
    def get_arch() -> str:
        return arch

    get_arch.fabench_config_arch = arch  # marks the replacement, so loading twice keeps one
    return get_arch


def api_module(platform: str, config_arch: str = DEFAULT_ARCH) -> types.ModuleType:
    """aiter's Triton MHA module (flash_attn_func), wherever this aiter version keeps it.

    Importing it compiles nothing but queries Triton's active driver: it needs a GPU.
    """
    load_aiter(platform, config_arch)
    return _first_module(API_MODULES)


def loader_module(platform: str, config_arch: str = DEFAULT_ARCH) -> types.ModuleType:
    """The module holding aiter's MHA config loader (_get_config); it imports on a CPU too."""
    load_aiter(platform, config_arch)
    return _first_module(LOADER_MODULES)


def _first_module(names: tuple[str, ...]) -> types.ModuleType:
    for name in names:
        parent = name.rsplit(".", 1)[0]
        if importlib.util.find_spec(parent) and importlib.util.find_spec(name):
            return importlib.import_module(name)
    raise AiterUnavailable(f"none of {', '.join(names)} in the installed aiter ({aiter_version(installed_aiter_dir())})")


# --- aiter's config file, through its own loader ------------------------------------------------

def _configs_path_holders() -> list[types.ModuleType]:
    """Every loaded aiter module that composes config paths from the configs directory."""
    return [m for name, m in list(sys.modules.items())
            if name.startswith("aiter.") and m is not None and hasattr(m, CONFIGS_PATH_NAME)]


def _point_configs_at(directory: str) -> None:
    for module in _configs_path_holders():
        setattr(module, CONFIGS_PATH_NAME, directory)


def forget_loaded_config(loader) -> None:
    """Forget the config aiter's loader module `loader` has read: its _get_config keeps the parsed file on
    itself and, in most versions, an lru_cache. Public: a measuring worker calls it between jobs."""
    get_config = loader._get_config
    if hasattr(get_config, "_config_dict"):
        del get_config._config_dict
    if hasattr(get_config, "cache_clear"):
        get_config.cache_clear()


def ask_config_name(loader, dtype) -> str:
    """The file aiter's loader opens for the MHA forward config, relative to its configs directory.

    aiter is asked, not guessed: its loader runs against an empty directory and names the file it
    could not open.
    """
    original = getattr(loader, CONFIGS_PATH_NAME, None)
    empty = tempfile.mkdtemp(prefix="fabench-aiter-ask-")
    try:
        _point_configs_at(empty)
        forget_loaded_config(loader)
        try:
            loader._get_config(False, dtype)
        except FileNotFoundError as err:
            return str(Path(err.filename).relative_to(empty))
        raise AiterUnavailable("aiter's MHA config loader read a config from an empty directory")
    finally:
        if original is not None:
            _point_configs_at(original)
        forget_loaded_config(loader)
        shutil.rmtree(empty, ignore_errors=True)


def install_config(loader, patched_file: str | Path, dtype, directory: str | Path) -> dict:
    """Put the patched file where aiter's loader reads it, in `directory` (this process's own).

    The file's bytes are copied unchanged (its sha256 stays the patched file's); aiter's configs
    path then points at `directory` and its cached config is dropped, so the next call loads it.
    """
    name = ask_config_name(loader, dtype)
    target = Path(directory) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(patched_file, target)
    _point_configs_at(str(directory))
    forget_loaded_config(loader)
    return {"loader": f"{loader.__name__}._get_config", "asked_for": name, "configs_dir": str(directory)}


def read_back(loader, dtype) -> dict:
    """The forward config aiter's loader returns for fp16 without dropout (its "default" entry)."""
    return dict(loader._get_config(False, dtype))


def load_patched(platform: str, patched_file: str | Path, dtype, directory: str | Path) -> tuple[types.ModuleType, dict]:
    """aiter's loader module, reading `patched_file` from `directory`; and the record of what it read:
    the name it asked for, where, and the forward config it returned."""
    loader = loader_module(platform)
    placed = install_config(loader, patched_file, dtype, directory)
    return loader, {**placed, "read_back": read_back(loader, dtype), "aiter": aiter_version(installed_aiter_dir())}


# --- launch options the platform's compiler accepts ----------------------------------------------

def launch_options(config: dict, kernel, target=None) -> tuple[dict, dict]:
    """Split `config` into what Triton accepts at `kernel`'s launch on `target` and what it refuses.

    Triton's rule (runtime/jit.py): a launch keyword must be a kernel parameter or a field of the
    active backend's compile options; anything else raises "specified but unrecognised". The
    same test is made here, by asking Triton, so that nothing is dropped by a list of our own.
    """
    accepted = set(_kernel_params(kernel)) | set(_backend_option_names(target))
    applied = {k: v for k, v in config.items() if k in accepted}
    backend = (target or _active_target()).backend
    not_applied = {k: f"not applied on this platform: Triton's {backend} backend has no launch option {k}"
                   for k in config if k not in accepted}
    return applied, not_applied


def _kernel_params(kernel) -> list[str]:
    while not hasattr(kernel, "params") and hasattr(kernel, "fn"):  # autotuner/heuristics wrappers
        kernel = kernel.fn
    return [p.name for p in kernel.params]


def _backend_option_names(target) -> list[str]:
    from triton.compiler.compiler import make_backend

    options = make_backend(target or _active_target()).parse_options({})
    return [f.name for f in dataclasses.fields(options)] if dataclasses.is_dataclass(options) else list(vars(options))


def _active_target():
    import triton

    return triton.runtime.driver.active.get_current_target()


def forward_kernel(loader):
    """aiter's Triton forward kernel (_attn_fwd) in its loader module."""
    return loader._attn_fwd


def compiler_description(target=None) -> str:
    """E.g. "Triton 3.6.0, cuda backend (sm 90)": which compiler built the kernel here."""
    import triton

    target = target or _active_target()
    return f"Triton {triton.__version__}, {target.backend} backend ({target.arch})"
