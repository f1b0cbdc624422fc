#!/bin/bash
# Prepares Podman (root) for docker-compose and the container check on a Debian machine without
# systemd or a Docker engine: installs it, and serves the Docker API on /run/podman/podman.sock
# with docker/check/containers.conf, the settings this kind of machine needs. Idempotent; the
# API service keeps running in the background. Afterwards:
#   export DOCKER_HOST=unix:///run/podman/podman.sock CONTAINERS_CONF=$PWD/docker/check/containers.conf
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
socket=${FRACTAL_PODMAN_SOCKET:-/run/podman/podman.sock}

needed=(podman runc netavark aardvark-dns debootstrap uidmap fuse-overlayfs iptables docker-compose)
missing=()
for package in "${needed[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# A CNI bridge left by an earlier podman shadows netavark's route to its own network.
ip link del cni-podman0 2>/dev/null || true

if ! curl -sf -m 3 --unix-socket "$socket" http://podman/_ping >/dev/null 2>&1; then
  mkdir -p "$(dirname "$socket")"
  CONTAINERS_CONF=$here/containers.conf nohup podman system service --time=0 "unix://$socket" >/tmp/podman-service.log 2>&1 &
  for _ in $(seq 30); do
    curl -sf -m 3 --unix-socket "$socket" http://podman/_ping >/dev/null 2>&1 && break
    sleep 1
  done
fi
curl -sf -m 3 --unix-socket "$socket" http://podman/_ping >/dev/null \
  || { echo "error: the Podman API did not start (see /tmp/podman-service.log)" >&2; exit 1; }
echo "podman $(podman --version | awk '{print $3}'): Docker API on $socket"
