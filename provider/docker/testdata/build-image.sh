#!/bin/sh
# Builds berth's Docker test image from this host's Debian packages, for
# machines without a registry: the userland providertest assumes (sh,
# coreutils, python3 with ctypes), their shared libraries, and nothing
# else, imported with docker import. Fast when the image exists already.
#
# Usage: build-image.sh [tag]    (default berth-test:1)
set -eu
tag=${1:-berth-test:1}
if docker image inspect "$tag" >/dev/null 2>&1; then
	exit 0
fi
pkgs="coreutils dash bash grep sed findutils libc6 python3.11-minimal libpython3.11-minimal libpython3.11-stdlib python3-minimal"
root=$(mktemp -d)
list=$(mktemp)
trap 'rm -rf "$root" "$list"' EXIT
for p in $pkgs; do
	dpkg -L "$p" | while read -r f; do
		# Files and links; no documentation.
		case $f in /usr/share/doc/* | /usr/share/man/* | /usr/share/info/* | /usr/share/locale/*) continue ;; esac
		if [ -f "$f" ] || [ -L "$f" ]; then echo "$f"; fi
	done
done >"$list"
# The shared libraries of every program and extension module, as the
# dynamic loader resolves them here.
grep -E '^/usr/(s?bin/|lib/python3.11/lib-dynload/)' "$list" | while read -r f; do
	ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^\t\/lib/{print $1}'
done | sort -u | while read -r lib; do
	echo "$lib"
	readlink -f "$lib" # the file a library's soname link names
done >>"$list"
# Debian's merged /usr: /bin, /lib... are links to their /usr namesakes,
# in the image as on the host.
mkdir -p "$root/usr"
for d in bin lib lib64 sbin; do
	mkdir -p "$root/usr/$d"
	ln -s "usr/$d" "$root/$d"
done
sed -E 's#^/(bin|lib|lib64|sbin)/#/usr/\1/#' "$list" | sort -u |
	tar -C / -cf - --no-recursion --hard-dereference -T - | tar -C "$root" -xf -
mkdir -p "$root/etc" "$root/tmp" "$root/workspace" "$root/proc" "$root/dev" "$root/sys"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
ln -sf dash "$root/usr/bin/sh"
tar -C "$root" -cf - . | docker import -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8' - "$tag" >/dev/null
echo "built $tag"
