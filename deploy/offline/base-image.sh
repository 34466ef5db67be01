#!/usr/bin/env bash
# A Python 3.11 base image without a registry: a Debian bookworm root file system made from Debian's
# own packages (mmdebstrap, python3 3.11 from bookworm) and imported with `docker import`. The image is
# what the Dockerfile's BASE_IMAGE ARG takes in place of the public python:3.11-slim; the offline
# Temporal and S3 stand-in images build on it too (deploy/offline/*.Dockerfile).
#
#   deploy/offline/base-image.sh [TAG]     # default deerflow-base:bookworm-python3.11
#
# Needs root (or mmdebstrap's unshare mode) and Debian's mirror. Nothing is rebuilt when the tag exists.
set -euo pipefail
TAG=${1:-deerflow-base:bookworm-python3.11}
DOCKER=${DOCKER:-docker}
# A daemon that is not running would look like a missing image: minutes of mmdebstrap, then a
# failed import. Say so first.
"$DOCKER" info >/dev/null 2>&1 || { echo "$DOCKER cannot reach its daemon (is dockerd running?)" >&2; exit 1; }
if "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then
    echo "$TAG: already built"
    exit 0
fi
command -v mmdebstrap >/dev/null || { echo "mmdebstrap is missing: apt-get install mmdebstrap" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# minbase: Essential packages and apt; python3-venv brings ensurepip (the build stage's pip), passwd
# useradd (the image's non-root user), ca-certificates the providers' TLS roots. No compiler.
mmdebstrap --variant=minbase --quiet \
    --include=python3,python3-venv,ca-certificates,passwd \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    bookworm "$work/rootfs.tar" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main"
"$DOCKER" import \
    --change 'ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' \
    "$work/rootfs.tar" "$TAG"
echo "$TAG: built ($("$DOCKER" image inspect --format '{{.Size}}' "$TAG") bytes)"
