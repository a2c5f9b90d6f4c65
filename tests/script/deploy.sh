#!/bin/sh
# tests: docs/deploy.md as written — its peers example runs (on free ports) and a request goes
# from A to B; dist/Dockerfile's build stage installs the packages scripts/deps.sh names and its
# run stage the Debian package of every library the built binary links.
BIN=${LANES_BIN:-build/lanes}
SHARED=${LANES_SHARED:-../shared}
TMP=${LANES_TMP:-/tmp}/deploy.$$
. "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/../.." || exit 1
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
SHARED=$(cd "$SHARED" && pwd)

free_port() { node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }

# 1. The peers example: the block under "## Peers", lanes the binary built, on two free ports.
awk '/^## Peers/ { p = 1 } p && /^```sh$/ { g = 1; next } g && /^```$/ { exit } g' docs/deploy.md > "$TMP/block.sh"
grep -q '^lanes gen ' "$TMP/block.sh" && grep -q '^lanes serve -m peer-model.gguf' "$TMP/block.sh" && ok ||
	bad "docs/deploy.md's peers example does not start with lanes gen and serve: $(head -n 3 "$TMP/block.sh")"
pa=$(free_port)
pb=$(free_port)
while [ "$pb" = "$pa" ]; do pb=$(free_port); done
{
	# the servers go when the block ends, however it ends
	echo "trap 'kill \$A \$B 2>/dev/null' EXIT"
	sed -e "s|^lanes |$BIN |; s|\.\./shared|$SHARED|g; s/8001/$pb/g; s/8000/$pa/g" "$TMP/block.sh"
} > "$TMP/run.sh"
(cd "$TMP" && timeout 120 sh run.sh > out 2> err)
same "$?" 0 "the peers example's exit code ($(tail -n 3 "$TMP/err"))"
grep -qx "lanes_peer_up{peer=\"http://127.0.0.1:$pb\"} 1" "$TMP/out" && ok || bad "the peers example: B is not up: $(cat "$TMP/out")"
fwd=$(sed -n 's/^lanes_overflow_requests_total{peer=".*",outcome="forwarded"} \([0-9]*\)$/\1/p' "$TMP/out")
[ "${fwd:-0}" -ge 1 ] && ok || bad "the peers example forwarded nothing: $(cat "$TMP/out")"
grep -qx "lanes_overflow_requests_total{peer=\"http://127.0.0.1:$pb\",outcome=\"failed\"} 0" "$TMP/out" && ok ||
	bad "the peers example: a forward failed: $(cat "$TMP/out")"
[ -s "$TMP/peer-model.gguf" ] && ok || bad "the peers example wrote no peer-model.gguf"

# 2. dist/Dockerfile: the package lists of its two stages (each the line after an apt-get install).
pkgs() { awk '/apt-get install/ { getline; sub(/&&.*/, ""); gsub(/\\/, ""); print }' dist/Dockerfile | sed -n "${1}p" | tr -s ' \t' '\n' | grep . | sort; }
deps=$(sed -n 's/^PKGS="\([^"$]*\)".*/\1/p' scripts/deps.sh | tr ' ' '\n' | grep . | sort)
[ -n "$deps" ] && same "$(pkgs 1 | tr '\n' ' ')" "$(echo "$deps" | tr '\n' ' ')" "dist/Dockerfile's build packages" ||
	bad "no package list in scripts/deps.sh"
run_pkgs=$(pkgs 2)
if command -v readelf > /dev/null 2>&1 && command -v dpkg > /dev/null 2>&1; then
	n=0
	for lib in $(readelf -d "$BIN" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
		# libc6, in every image; a sanitizer build's runtimes
		case "$lib" in libc.so.* | libm.so.* | libpthread.so.* | ld-linux* | lib*san.so.*) continue ;; esac
		path=$(ldd "$BIN" | awk -v l="$lib" '$1 == l { print $3 }')
		pkg=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -n 1 | cut -d: -f1)
		n=$((n + 1))
		echo "$run_pkgs" | grep -qx "$pkg" && ok || bad "dist/Dockerfile's run stage lacks $pkg (for $lib)"
	done
	[ $n -ge 4 ] && ok || bad "only $n libraries beside libc found in the binary"
fi
grep -qx 'COPY --from=build /out/usr/ /usr/' dist/Dockerfile && grep -q 'make install PREFIX=/usr DESTDIR=/out' dist/Dockerfile && ok ||
	bad "dist/Dockerfile does not copy what make install wrote"
for d in build node_modules .git; do grep -qx "$d" .dockerignore && ok || bad ".dockerignore lacks $d"; done

echo "deploy: $pass passed, $fail failed"
[ "$fail" = 0 ]
