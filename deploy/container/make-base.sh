#!/usr/bin/env bash
# Builds the Dockerfile's two base images from Debian's packages, for machines that reach a Debian mirror
# but no container registry: debootstrap bookworm (minbase) into a folder, tar it, and import it as
# debian:bookworm (the build stage's base) and, without documentation and locales, debian:bookworm-slim.
#   deploy/container/make-base.sh [--engine docker|podman] [--rootfs-only DIR]
#     --rootfs-only DIR: only debootstrap into DIR (tests/deploy/container_rootfs.sh uses this); no engine
# Needs root (debootstrap) and, for the import, a running docker engine or podman.
set -euo pipefail
engine="" rootfs_only="" mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
while [ $# -gt 0 ]; do
  case "$1" in
    --engine) engine=$2; shift 2 ;;
    --rootfs-only) rootfs_only=$2; shift 2 ;;
    *) echo "make-base.sh: unknown argument '$1'; see the comment at the top" >&2; exit 2 ;;
  esac
done
command -v debootstrap >/dev/null || { echo "make-base.sh: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }

# The slim variant: what debian:bookworm-slim leaves out (documentation, manual pages, locales but C).
slim() {
  local root=$1
  rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/cache/apt/*.bin \
         "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} + 2>/dev/null || true
  # as in the slim images: dpkg skips these paths for packages installed later
  mkdir -p "$root/etc/dpkg/dpkg.cfg.d"
  printf 'path-exclude /usr/share/doc/*\npath-exclude /usr/share/man/*\npath-exclude /usr/share/info/*\npath-exclude /usr/share/locale/*\npath-include /usr/share/locale/locale.alias\n' \
    > "$root/etc/dpkg/dpkg.cfg.d/docker-slim"
}

if [ -n "$rootfs_only" ]; then
  debootstrap --variant=minbase bookworm "$rootfs_only" "$mirror" >&2
  slim "$rootfs_only"
  exit 0
fi

if [ -z "$engine" ]; then
  if command -v podman >/dev/null; then engine=podman; else engine=docker; fi
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
debootstrap --variant=minbase bookworm "$work/root" "$mirror" >&2
rm -rf "$work/root/var/lib/apt/lists/"*
tar -C "$work/root" -c . | "$engine" import - debian:bookworm
slim "$work/root"
tar -C "$work/root" -c . | "$engine" import - debian:bookworm-slim
echo "make-base.sh: imported debian:bookworm and debian:bookworm-slim into $engine" >&2
