#!/bin/bash
# Make the local CPU base image that CI and tests build our Dockerfile on.
#
# No container registry can be reached here, so the image is made from scratch:
#   1. debootstrap --variant=minbase bookworm (mirror taken from /etc/apt/sources.list.d/),
#      with python3 + pip and the host's extra CA certificates (HTTPS goes through a
#      re-signing proxy);
#   2. `docker import` of that root file system;
#   3. a container of it installs the CPU torch wheel (bind-mounted read-only from the host,
#      its dependencies from PyPI over the host network), committed as the final tag.
# An image that already has the tag is reused (pass --force to remake it).
#
# Usage: tools/make-cpu-base-image.sh [--force] [TAG]
# Env:   TORCH_WHEEL   the torch wheel (default: the CPU cp311 wheel under /opt/wheels), or
#                      "debian" for Debian's own python3-torch (1.13 on bookworm): a second,
#                      older torch, for tests that need two platform versions
#                      (tests/test_platforms.py)
#        DEBIAN_MIRROR the Debian mirror (default: from /etc/apt/sources.list.d/)
#        DOCKER_HOST   the engine to use (see python -m support.docker_engine)
set -euo pipefail

force=0
if [ "${1:-}" = "--force" ]; then force=1; shift; fi
TAG="${1:-fabench-cpu-base:bookworm-torch2.13}"
STAGE_TAG="${TAG%%:*}:bookworm-minbase"
TORCH_WHEEL="${TORCH_WHEEL:-/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl}"
# extra packages beside python3-pip: `python` on PATH (the runner is started as python -m ...)
DEB_PACKAGES="python3,python3-pip,python-is-python3,ca-certificates"

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
t_start=$(date +%s)

if [ "$force" = 0 ] && docker image inspect "$TAG" >/dev/null 2>&1; then
    log "reusing existing image $TAG ($(docker image inspect -f '{{.Id}}' "$TAG"))"
    exit 0
fi

[ "$(id -u)" = 0 ] || { echo "error: debootstrap needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "error: debootstrap is not installed" >&2; exit 1; }
[ "$TORCH_WHEEL" = debian ] || [ -f "$TORCH_WHEEL" ] || { echo "error: no torch wheel at $TORCH_WHEEL" >&2; exit 1; }

# The first bookworm "main" mirror of the host's deb822 sources (or a one-line list).
find_mirror() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk '
            function flush() { if (uri != "" && suites ~ /(^| )bookworm( |$)/ && comps ~ /main/) { print uri; found = 1; exit } }
            /^[[:space:]]*$/ { flush(); uri = ""; suites = ""; comps = ""; next }
            /^URIs:/       { uri = $2 }
            /^Suites:/     { $1 = ""; suites = $0 }
            /^Components:/ { $1 = ""; comps = $0 }
            END { if (!found) flush() }
        ' "$f"
    done | head -n1
    for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list; do
        [ -f "$f" ] || continue
        awk '$1 == "deb" && $3 == "bookworm" { print ($2 ~ /^\[/ ? $3 : $2); exit }' "$f"
    done | head -n1
}
MIRROR="${DEBIAN_MIRROR:-$(find_mirror | head -n1)}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"

rootfs="$(mktemp -d /var/tmp/fabench-rootfs.XXXXXX)"
ctr="fabench-base-build-$$"
cleanup() {
    docker rm -f "$ctr" >/dev/null 2>&1 || true
    # debootstrap may leave proc/sys mounted on failure
    for m in $(awk -v r="$rootfs" '$5 ~ "^"r {print $5}' /proc/self/mountinfo | sort -r); do
        umount "$m" 2>/dev/null || umount -l "$m" || true
    done
    rm -rf "$rootfs"
}
trap cleanup EXIT

if [ "$force" = 0 ] && docker image inspect "$STAGE_TAG" >/dev/null 2>&1; then
    log "reusing Debian stage $STAGE_TAG"
else
    log "debootstrap --variant=minbase bookworm from $MIRROR"
    t0=$(date +%s)
    debootstrap --variant=minbase --include="$DEB_PACKAGES" bookworm "$rootfs" "$MIRROR" \
        > "$rootfs.debootstrap.log" 2>&1 || { tail -n 30 "$rootfs.debootstrap.log" >&2; exit 1; }
    rm -f "$rootfs.debootstrap.log"
    log "debootstrap took $(( $(date +%s) - t0 )) s"

    # Host CA certificates (re-signing proxy) into the image's trust store.
    if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
        cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
        chroot "$rootfs" update-ca-certificates >/dev/null
    fi
    # Smaller image: no apt lists or caches.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb

    t0=$(date +%s)
    tar --numeric-owner -C "$rootfs" -c . | docker import \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PIP_BREAK_SYSTEM_PACKAGES=1' \
        --change 'ENV PIP_NO_CACHE_DIR=1' \
        --change 'ENV PIP_DISABLE_PIP_VERSION_CHECK=1' \
        --change 'CMD ["/bin/bash"]' \
        --message "debootstrap --variant=minbase bookworm $MIRROR" \
        - "$STAGE_TAG" >/dev/null
    log "docker import took $(( $(date +%s) - t0 )) s -> $STAGE_TAG"
fi

t0=$(date +%s)
if [ "$TORCH_WHEEL" = debian ]; then
    log "installing Debian's python3-torch"
    docker run --name "$ctr" --network host -e DEBIAN_FRONTEND=noninteractive "$STAGE_TAG" \
        bash -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-torch python3-numpy \
                 && rm -rf /var/lib/apt/lists/*' >&2
    source_note="Debian's python3-torch"
else
    log "installing $(basename "$TORCH_WHEEL") (+ numpy, dependencies from PyPI)"
    wheel_dir="$(dirname "$TORCH_WHEEL")"
    docker run --name "$ctr" --network host \
        -v "$wheel_dir:/wheels:ro" "$STAGE_TAG" \
        python3 -m pip install --no-cache-dir --break-system-packages --progress-bar off \
            "/wheels/$(basename "$TORCH_WHEEL")" numpy >&2
    source_note="CPU torch from $(basename "$TORCH_WHEEL")"
fi
docker commit \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --message "$source_note" \
    "$ctr" "$TAG" >/dev/null
log "torch install + commit took $(( $(date +%s) - t0 )) s"
docker run --rm "$TAG" python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)' >&2
log "made $TAG ($(docker image inspect -f '{{.Id}}' "$TAG")) in $(( $(date +%s) - t_start )) s"
