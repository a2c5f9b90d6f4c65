#!/bin/sh
# Unpacks Debian 12's own Node.js (18.x) into DIR without installing it, so the HTTP tests
# can run under it beside a newer node; prints DIR/bin, to be put first in PATH.
# Needs root for the few runtime pieces it installs system-wide (shared libraries, and the
# JavaScript modules Debian's node loads from /usr/share/nodejs).
set -eu
dir=${1:?usage: scripts/node18.sh DIR}
mkdir -p "$dir/debs" "$dir/root" "$dir/bin"
dir=$(cd "$dir" && pwd)
if [ ! -x "$dir/root/usr/bin/node" ]; then
	export DEBIAN_FRONTEND=noninteractive
	{ apt-get update -qq && apt-get install -y -qq -o=Dpkg::Use-Pty=0 --no-install-recommends libuv1 libc-ares2 libicu72 libnghttp2-14 libbrotli1 libssl3; } >&2
	ver=$(apt-cache madison nodejs | awk '$3 ~ /^18\./ {print $3; exit}')
	[ -n "$ver" ] || { echo "node18: Debian's nodejs 18.x is not in the package lists" >&2; exit 1; }
	(cd "$dir/debs" && apt-get download -qq "nodejs=$ver" "libnode108=$ver" node-acorn node-cjs-module-lexer node-undici) >&2
	for d in "$dir"/debs/*.deb; do dpkg-deb -x "$d" "$dir/root"; done
	mkdir -p /usr/share/nodejs
	for m in acorn acorn-walk cjs-module-lexer undici; do
		[ -e "/usr/share/nodejs/$m" ] || cp -r "$dir/root/usr/share/nodejs/$m" /usr/share/nodejs/
	done
fi
cat >"$dir/bin/node" <<EOT
#!/bin/sh
LD_LIBRARY_PATH="$dir/root/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$dir/root/usr/bin/node" "\$@"
EOT
chmod +x "$dir/bin/node"
v=$("$dir/bin/node" --version)
case "$v" in v18.*) ;; *) echo "node18: got $v, not 18.x" >&2; exit 1 ;; esac
echo "$dir/bin"
