#!/usr/bin/env bash
# Usage: python-rootfs.sh DIR
#
# Fills DIR with a minimal Debian root filesystem (debootstrap, minbase variant) with
# python3 and pip: the local stand-in for python:3.11-slim that docker/Dockerfile is
# built on by `make docker-check` (no image registry needed, only the Debian mirror
# apt already uses). Like python:3.11-slim it lets `pip install` write to the system
# Python (Debian's EXTERNALLY-MANAGED marker is removed) and has `python` and `pip`.
# The CA bundle is this machine's, so pip in the build trusts what the host trusts.
# DEBIAN_MIRROR and DEBIAN_SUITE override what is read from apt's sources and
# /etc/os-release.
set -euo pipefail

dir=${1:?usage: python-rootfs.sh DIR}
command -v debootstrap >/dev/null || { echo "debootstrap not found: apt-get install debootstrap" >&2; exit 1; }

# The mirror apt is configured with (deb822 .sources, else a one-line sources.list).
mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
	mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2}' | grep -v -- -security | head -n1 || true)
fi
if [ -z "$mirror" ]; then
	mirror=$(sed -E 's/\[[^]]*\]//' /etc/apt/sources.list 2>/dev/null | awk '$1 == "deb" {print $2}' | grep -v -- -security | head -n1 || true)
fi
[ -n "$mirror" ] || { echo "no Debian mirror in apt's sources: set DEBIAN_MIRROR" >&2; exit 1; }
suite=${DEBIAN_SUITE:-$( . /etc/os-release && echo "${VERSION_CODENAME:-}")}
[ -n "$suite" ] || { echo "no Debian suite in /etc/os-release: set DEBIAN_SUITE" >&2; exit 1; }

if ! debootstrap --variant=minbase --include=python3,python3-pip,ca-certificates \
	"$suite" "$dir" "$mirror" >"$dir.log" 2>&1; then
	echo "debootstrap $suite from $mirror failed: $(tail -n1 "$dir.log")" >&2
	exit 1
fi

rm -f "$dir"/usr/lib/python3*/EXTERNALLY-MANAGED
ln -sf /usr/bin/python3 "$dir/usr/local/bin/python"
ln -sf /usr/bin/pip3 "$dir/usr/local/bin/pip"
cp /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/ca-certificates.crt"
# What an image does not need: package caches and lists, docs, man pages, locales.
rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* \
	"$dir"/usr/share/doc "$dir"/usr/share/man "$dir"/usr/share/locale "$dir"/usr/share/info
find "$dir" -name __pycache__ -prune -exec rm -rf {} +
