#!/usr/bin/env bash
# Builds both images from this checkout's release binaries, stripped as the
# Dockerfile's build stage strips them, on BASE (default: the local Debian 12
# base the container tests make, tests/containers/base-image.sh), and prints
# each image's size and what is in it — the figures deploy/README.md quotes.
#
#   cargo build --release --bins && deploy/image-sizes.sh [BASE]
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-localhost/chorus-ci-base:bookworm}
bins=(chorus-orchestrator chorus-tool-exec chorus-tools chorus-sandbox chorus-health-probe)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/out"
for bin in "${bins[@]}"; do
  [ -x "target/release/$bin" ] || { echo "target/release/$bin is missing: cargo build --release --bins" >&2; exit 1; }
  strip --strip-all -o "$work/out/$bin" "target/release/$bin"
done
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1000000 }'; }
for target in orchestrator tool-exec; do
  podman build -q --layers=false -f deploy/Dockerfile --build-arg "BASE=$base" \
    --build-context "build=$work" --target "$target" -t "localhost/chorus-$target:sizes" . >/dev/null
done
podman build -q --layers=false -f deploy/Dockerfile --build-arg "BASE=$base" \
  --target runtime -t localhost/chorus-runtime:sizes . >/dev/null
size() { podman image inspect --format '{{.Size}}' "$1"; }
printf 'base %s: %s\n' "$base" "$(mib "$(size "$base")")"
printf 'runtime (what both images share): %s\n' "$(mib "$(size localhost/chorus-runtime:sizes)")"
for bin in "${bins[@]}"; do
  printf '  %s: %s\n' "$bin" "$(mib "$(stat -c %s "$work/out/$bin")")"
done
for target in orchestrator tool-exec; do
  printf 'chorus-%s image: %s\n' "$target" "$(mib "$(size "localhost/chorus-$target:sizes")")"
done
