#!/usr/bin/env bash
# Makes the local Debian 12 image the container tests build on, where no image
# registry can be reached: `debootstrap --variant=minbase bookworm` from Debian's
# packages, kept as a tarball in the cache directory (made once, about a minute),
# then `podman import`ed when the image is missing.
#
#   tests/containers/base-image.sh IMAGE CACHE_DIR
set -euo pipefail
image=${1:?usage: base-image.sh IMAGE CACHE_DIR}
cache=${2:?usage: base-image.sh IMAGE CACHE_DIR}
mirror=${CHORUS_DEBIAN_MIRROR:-http://deb.debian.org/debian}

podman image exists "$image" && exit 0
mkdir -p "$cache"
# One maker at a time (two test processes may ask together).
exec 9>"$cache/base-image.lock"
flock 9
podman image exists "$image" && exit 0

tarball="$cache/debian-bookworm-minbase.tar"
if [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null || {
    echo "debootstrap is missing: apt-get install debootstrap (.ci/run does)" >&2
    exit 1
  }
  work=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  echo "debootstrap --variant=minbase bookworm from $mirror" >&2
  debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -20 "$work/debootstrap.log" >&2
    exit 1
  }
  rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/*
  tar -C "$work/rootfs" -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
fi
# PATH as the Debian images set it.
podman import --quiet \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' "$tarball" "$image" >/dev/null
