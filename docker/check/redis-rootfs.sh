#!/usr/bin/env bash
# Usage: redis-rootfs.sh DIR
#
# Fills DIR with the smallest root filesystem that runs this machine's redis-server
# and redis-cli, plus the few tools compose.yml's scripts and healthchecks call (sh,
# grep, getent, seq, sleep, cat): each binary with the shared libraries `ldd` names,
# at the same paths. `docker import` turns it into the local stand-in for redis:7.2.
# REDIS_SERVER / REDIS_CLI pick other binaries (a valkey-server works as the server).
set -euo pipefail

dir=${1:?usage: redis-rootfs.sh DIR}
server=${REDIS_SERVER:-$(command -v redis-server || true)}
cli=${REDIS_CLI:-$(command -v redis-cli || true)}
[ -n "$server" ] || { echo "redis-server not found: apt-get install redis-server (or set REDIS_SERVER)" >&2; exit 1; }
[ -n "$cli" ] || { echo "redis-cli not found: apt-get install redis-tools (or set REDIS_CLI)" >&2; exit 1; }
command -v ldd >/dev/null || { echo "ldd not found: it lists the libraries to copy" >&2; exit 1; }

mkdir -p "$dir"/{bin,usr/bin,etc,data,tmp}
chmod 1777 "$dir/tmp"

# put SOURCE as /usr/bin/NAME, with every library it loads
add() {
	local name=$1 source
	source=$(readlink -f "$2")
	cp "$source" "$dir/usr/bin/$name"
	ldd "$source" | awk '/=> \// {print $3} /^\s*\/[^ ]+ \(0x/ {print $1}' | while read -r lib; do
		[ -e "$dir$lib" ] || cp -L --parents "$lib" "$dir"
	done
}

# redis-server is a link to redis-check-rdb in Debian; the name it runs under decides
add redis-server "$server"
add redis-cli "$cli"
for tool in sh grep getent seq sleep cat; do
	add "$tool" "$(command -v "$tool")"
done
ln -s /usr/bin/sh "$dir/bin/sh"

printf 'root:x:0:0:root:/root:/bin/sh\nredis:x:999:999:redis:/data:/bin/sh\n' >"$dir/etc/passwd"
printf 'root:x:0:\nredis:x:999:\n' >"$dir/etc/group"
printf 'hosts: files dns\n' >"$dir/etc/nsswitch.conf"
