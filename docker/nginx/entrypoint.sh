#!/bin/sh
# Writes /etc/nginx/resolver.conf, which nginx.conf includes, with the first name server of the
# container's /etc/resolv.conf: Docker's embedded DNS (127.0.0.11) or, under Podman, aardvark-dns
# on the network gateway. Either answers the service name `fractal` with one address per replica.
# Then runs nginx in the foreground.
set -eu
server=$(awk '$1 == "nameserver" { print $2; exit }' /etc/resolv.conf)
if [ -z "$server" ]; then
  echo "error: /etc/resolv.conf names no name server; nginx cannot find the replicas" >&2
  exit 2
fi
case $server in
  *:*) server="[$server]" ;;
esac
echo "resolver $server valid=5s ipv6=off;" > /etc/nginx/resolver.conf
echo "fractal-nginx: replicas looked up through $server"
exec nginx -g 'daemon off;'
