#!/bin/bash
# Makes the base image `debian:bookworm-slim` locally, for a machine that reaches Debian's package
# archive but no container registry. debootstrap's minbase variant is what the official image is
# made from; this one adds the host's CA certificates (a TLS proxy may sit between this machine and
# the package index) and points pip at them. Root only. Usage: base-image.sh ENGINE WORKDIR
set -euo pipefail
ENGINE=${1:?engine: podman or docker}
WORK=${2:?a scratch folder}
NAME=docker.io/library/debian:bookworm-slim
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

rootfs="$WORK/rootfs"
rm -rf "$rootfs"
mkdir -p "$WORK"
debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" "$MIRROR" \
  >"$WORK/debootstrap.log" 2>&1
cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/" 2>/dev/null || true
chroot "$rootfs" update-ca-certificates >/dev/null
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/etc/pip.conf"
# What makes the official image "slim": apt keeps no caches, and dpkg installs no documentation,
# manual pages or translations.
cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT
echo 'Acquire::Languages "none";' >"$rootfs/etc/apt/apt.conf.d/docker-no-languages"
printf 'path-exclude /usr/share/doc/*\npath-include /usr/share/doc/*/copyright\npath-exclude /usr/share/man/*\npath-exclude /usr/share/locale/*\npath-exclude /usr/share/info/*\n' \
  >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim"
find "$rootfs/usr/share/doc" -mindepth 2 ! -name copyright -delete 2>/dev/null || true
rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* "$rootfs"/usr/share/info/*
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | "$ENGINE" import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'LABEL fractal.stand-in="debian:bookworm-slim made by debootstrap --variant=minbase, with this host'"'"'s CA certificates"' \
  --change 'CMD ["bash"]' - "$NAME" >/dev/null
rm -rf "$rootfs"
