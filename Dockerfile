# fabench benchmark image: a ROCm PyTorch base + AMD aiter at a pinned commit + a pinned
# Triton + this project's package (installed last, so that a change to src/ does not
# rebuild aiter).
#
# Built by the workflow through fabench.container.image.build_image, which also writes a manifest;
# by hand:
#   docker build --network host -t fabench:dev .
# CPU image for CI/tests, with AMD's aiter from the package index (its config loader runs there):
#   docker build --network host --build-arg BASE_IMAGE=fabench-cpu-base:bookworm-torch2.13 \
#       --build-arg AITER_COMMIT= --build-arg AITER_FROM_INDEX=1 --build-arg TRITON_VERSION=3.6.0 -t fabench:cpu .
#
# Written for the legacy builder: no RUN --mount, no heredocs, no COPY --chmod.

# ROCm 7.0.2 / PyTorch 2.8.0 / Python 3.12 on Ubuntu 24.04: the image aiter's own release
# CI built its Python 3.12 wheels in (aiter commit d394c66283, 2025-10-17), i.e. the
# ROCm/PyTorch pairing aiter was built against around the report's date (2025-12-30).
ARG BASE_IMAGE=rocm/pytorch:rocm7.0.2_ubuntu24.04_py3.12_pytorch_release_2.8.0
FROM ${BASE_IMAGE}

ARG BASE_IMAGE
# AMD's aiter from its git repository (the "aiter" name on PyPI is an unrelated package).
# bfe8107fa6 (2025-12-30): Triton MHA at aiter/ops/triton/mha.py, config at
# aiter/ops/triton/configs/gfx942-MHA-DEFAULT.json. Empty: no aiter (CPU/CI images).
ARG AITER_REPO=https://github.com/ROCm/aiter.git
ARG AITER_COMMIT=bfe8107fa6c0ebf90f365e0c992a59afd73875ee
ARG GPU_ARCHS=gfx942
# aiter's PREBUILD_KERNELS (0: CK modules are compiled just in time, on first use)
ARG AITER_PREBUILD_KERNELS=0
ARG MAX_JOBS=
# Triton from PyPI (its wheel carries the AMD backend); 3.5.0 is the version aiter's AOT
# kernel metadata at that commit was produced with. Empty: keep the base image's Triton.
ARG TRITON_VERSION=3.5.0

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Images with a Debian/Ubuntu system Python refuse pip installs without this (PEP 668).
ENV PIP_BREAK_SYSTEM_PACKAGES=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# --- aiter at the pinned commit --------------------------------------------------------
# Its build needs, and this package's build backend, are locked with their hashes in
# envs/image-*.txt (releases of 2025, before the report's date; refresh: envs/refresh.sh).
COPY envs/image-aiter.txt envs/image-aiter-index.txt envs/image-package.txt /opt/fabench/envs/
RUN set -eux; \
    if [ -z "${AITER_COMMIT}" ]; then echo "AITER_COMMIT is empty: no aiter in this image"; exit 0; fi; \
    if [ "${#AITER_COMMIT}" -ne 40 ]; then echo "AITER_COMMIT must be a full 40-character SHA" >&2; exit 1; fi; \
    git clone --no-checkout "${AITER_REPO}" /opt/aiter; \
    cd /opt/aiter; \
    git checkout --detach "${AITER_COMMIT}"; \
    test "$(git rev-parse HEAD)" = "${AITER_COMMIT}"; \
    git submodule sync --recursive; \
    git submodule update --init --recursive --jobs 4; \
    python3 -m pip install --require-hashes -r /opt/fabench/envs/image-aiter.txt; \
    if [ -n "${MAX_JOBS}" ]; then export MAX_JOBS; fi; \
    GPU_ARCHS="${GPU_ARCHS}" PREBUILD_KERNELS="${AITER_PREBUILD_KERNELS}" \
        python3 -m pip install --no-build-isolation .; \
    cd /; \
    python3 -c "import importlib.metadata as m; print('amd-aiter', m.version('amd-aiter'))"

# --- Triton ------------------------------------------------------------------------------
# The ROCm PyTorch images ship Triton as pytorch-triton-rocm; both distributions provide the
# `triton` module, so the old one is removed first.
RUN set -eux; \
    if [ -z "${TRITON_VERSION}" ]; then echo "TRITON_VERSION is empty: keeping the base image's Triton"; exit 0; fi; \
    python3 -m pip uninstall -y pytorch-triton-rocm triton || true; \
    python3 -m pip install "triton==${TRITON_VERSION}"; \
    python3 -c "import triton; print('triton', triton.__version__)"

# --- or AMD's aiter from the package index ----------------------------------------------------
# AITER_FROM_INDEX=1 (with AITER_COMMIT empty): amd-aiter and its requirements as pyproject.toml's
# `aiter` extra pins them, locked with their hashes into envs/image-aiter-index.txt by
# envs/refresh.sh (one source for the pins). Its Triton kernels and config loader are the same
# Python as in a git build; it carries no compiled CK modules.
ARG AITER_FROM_INDEX=
RUN set -eux; \
    if [ -z "${AITER_FROM_INDEX}" ]; then exit 0; fi; \
    if [ -n "${AITER_COMMIT}" ]; then echo "AITER_FROM_INDEX and AITER_COMMIT both set: choose one aiter" >&2; exit 1; fi; \
    python3 -m pip install --require-hashes -r /opt/fabench/envs/image-aiter-index.txt; \
    python3 -c "import importlib.metadata as m; print('amd-aiter', m.version('amd-aiter'))"

# Recorded for the runner's provenance and the image manifest.
ENV FABENCH_BASE_IMAGE=${BASE_IMAGE} \
    FABENCH_AITER_REPO=${AITER_REPO} \
    FABENCH_AITER_COMMIT=${AITER_COMMIT} \
    FABENCH_AITER_FROM_INDEX=${AITER_FROM_INDEX} \
    FABENCH_GPU_ARCHS=${GPU_ARCHS} \
    FABENCH_TRITON_VERSION=${TRITON_VERSION} \
    GPU_ARCHS=${GPU_ARCHS}
LABEL org.opencontainers.image.title="fabench" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      fabench.aiter.commit="${AITER_COMMIT}" \
      fabench.aiter.from_index="${AITER_FROM_INDEX}" \
      fabench.gpu_archs="${GPU_ARCHS}" \
      fabench.triton.version="${TRITON_VERSION}"

# --- this project's package, last --------------------------------------------------------
# --no-deps: the runner needs only torch (from the base) and the standard library; the
# report's dependencies (Jinja2, jsonschema, PyYAML) stay on the host. Built with the locked
# setuptools (--no-build-isolation: no unpinned download of a build backend).
COPY pyproject.toml /opt/fabench/pyproject.toml
COPY src /opt/fabench/src
# The schemas' one copy, which src/fabench/schemas links to: the package data a wheel carries.
COPY workflow/schemas /opt/fabench/workflow/schemas
RUN set -eux; \
    python3 -m pip install --require-hashes -r /opt/fabench/envs/image-package.txt; \
    python3 -m pip install --no-deps --no-build-isolation /opt/fabench; \
    python3 -c "import fabench; print('fabench', fabench.__version__)"

WORKDIR /tmp
CMD ["/bin/bash"]
