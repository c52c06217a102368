#!/usr/bin/env bash
# Regenerate the locks in envs/ from pyproject.toml and envs/image-*.in (uv pip compile, every file
# with its sha256). The host locks are resolved together (test.txt first, the others within it),
# for CPython 3.11 on Linux x86_64, the machine the README's commands and CI run on; the CPU torch
# wheel (torch==2.13.0+cpu) is found in /opt/wheels, where such a machine keeps it.
#   pip install uv==0.13.9 && bash envs/refresh.sh
set -euo pipefail
cd "$(dirname "$0")/.."
compile() { uv pip compile --quiet --generate-hashes --python-version 3.11 --find-links /opt/wheels "$@"; }
compile pyproject.toml --extra workflow --extra cpu --extra test --emit-find-links -o envs/test.txt
compile pyproject.toml --extra workflow --extra cpu --emit-find-links -c envs/test.txt -o envs/cpu.txt
compile pyproject.toml --extra workflow -c envs/test.txt -o envs/host.txt
# A GPU host keeps its own torch (never emitted, though FlashAttention-4 requires one): the workflow,
# AMD's aiter (the Triton column), NVML and FlashAttention-4 (the fa4 backend, NVIDIA only).
compile pyproject.toml --extra workflow --extra aiter --extra gpu --extra fa4 -c envs/test.txt --no-emit-package torch \
  -o envs/gpu.txt
# The package-index aiter layer of the image (AITER_FROM_INDEX=1): pyproject's `aiter` extra, for
# the Python of either base image (the hashes cover every wheel of each pinned release).
python3 -c "import tomllib; print(chr(10).join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['aiter']))" \
  > envs/image-aiter-index.in
compile envs/image-aiter-index.in -o envs/image-aiter-index.txt
for layer in image-aiter image-package; do
  uv pip compile --quiet --generate-hashes --python-version 3.12 --python-platform x86_64-manylinux_2_28 \
    --exclude-newer 2025-12-30 "envs/$layer.in" -o "envs/$layer.txt"
done
