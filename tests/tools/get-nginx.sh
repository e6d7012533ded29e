#!/bin/sh
# Debian's nginx for tests/integration/test_reverse_proxy.py, in DIR/usr/sbin/nginx without root:
# the installed one if there is one, else Debian's package unpacked (from apt's cache, or
# fetched with `apt-get download nginx`). Usage: tests/tools/get-nginx.sh DIR
set -eu
dir=$1
mkdir -p "$dir/usr/sbin"
if command -v nginx >/dev/null 2>&1; then
    ln -sf "$(command -v nginx)" "$dir/usr/sbin/nginx"
    exit 0
fi
deb=$(ls /var/cache/apt/archives/nginx_*.deb 2>/dev/null | tail -n 1 || true)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "$deb" ]; then
    (cd "$tmp" && apt-get download nginx >/dev/null 2>&1) || {
        echo "get-nginx: cannot fetch Debian's nginx package (apt-get download nginx)" >&2
        exit 1
    }
    deb=$(ls "$tmp"/nginx_*.deb | tail -n 1)
fi
dpkg-deb -x "$deb" "$dir"
"$dir/usr/sbin/nginx" -v
