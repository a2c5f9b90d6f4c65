#!/bin/sh
# Makes sure the Debian packages lanes builds and tests with are present:
# installs them when run as root, otherwise prints the exact apt-get line.
PKGS="gcc make libc6-dev libjansson-dev libpcre2-dev libmicrohttpd-dev libcurl4-openssl-dev pkg-config xxd"
# --node: also the Node.js clients the HTTP tests drive (npm ci, from package-lock.json)
if [ "$1" = "--node" ]; then
	shift
	# tests/script/install.sh renders the installed manual pages (man -l)
	PKGS="$PKGS man-db"
	if ! command -v npm >/dev/null 2>&1; then
		if [ "$(id -u)" = 0 ]; then
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; } >&2 || exit 1
		else
			echo "deps: Node.js 18 or newer and npm are needed for the HTTP tests; run:" >&2
			echo "  sudo apt-get install -y nodejs npm" >&2
			exit 1
		fi
	fi
	# the web page's test drives Debian's Chromium (it skips without one)
	if [ "$(id -u)" = 0 ] && ! command -v chromium >/dev/null 2>&1; then
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } >&2 || exit 1
	fi
	# a node_modules that links to another checkout's is that checkout's to refresh: npm ci here
	# would empty it through the link (a fresh worktree's lock file is newer than any install)
	stale=false
	[ ! -L node_modules ] && [ package-lock.json -nt node_modules ] && stale=true
	if [ ! -d node_modules/openai ] || [ ! -d node_modules/@anthropic-ai/sdk ] || [ ! -d node_modules/ollama ] || [ ! -d node_modules/puppeteer-core ] || $stale; then
		npm ci --no-audit --no-fund >&2 || exit 1
	fi
fi
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && { [ "$1" = "--quiet" ] || echo "deps: all present"; exit 0; }
if [ "$(id -u)" = 0 ]; then
	echo "deps: installing$missing" >&2
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing; } >&2 || exit 1
else
	echo "deps: missing Debian packages; run:" >&2
	echo "  sudo apt-get install -y$missing" >&2
	exit 1
fi
