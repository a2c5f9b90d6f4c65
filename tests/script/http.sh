#!/bin/sh
# http: starts a real `lanes serve` on stories260K on a free loopback port and runs the
# Node.js tests in tests/http against it (the official openai, @anthropic-ai/sdk and ollama clients,
# raw sockets; some tests start their own servers for drain, halt and limits).
# Needs node and `npm ci` at the repository root. Prints "http: N passed, M failed" last.
cd "$(dirname "$0")/../.." || exit 1
: "${LANES_SHARED:=../shared}"
: "${LANES_BIN:=build/lanes}"
fail() {
	echo "http: $1"
	echo "http: 0 passed, 1 failed"
	exit 1
}
command -v node >/dev/null 2>&1 || fail "node is not installed (Debian: apt-get install nodejs npm)"
[ -d node_modules/openai ] && [ -d node_modules/@anthropic-ai/sdk ] && [ -d node_modules/ollama ] ||
	fail "node_modules is missing: run 'npm ci' at the repository root first"
[ -x "$LANES_BIN" ] || fail "$LANES_BIN is missing: run make first"
tmp=${LANES_TMP:-$(mktemp -d)}
mkdir -p "$tmp"
log="$tmp/http-serve.log"
: >"$log"
# rows priced as cheap beside a round's fixed cost, so n-gram drafts pay on any machine
"$LANES_BIN" serve -m "$LANES_SHARED/models/stories260K.gguf" --port 0 --api-key test-key --price-row-us 100 \
	--price-fixed-us 20000 2>"$log" &
pid=$!
port=""
i=0
while [ $i -lt 400 ] && [ -z "$port" ]; do
	port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9][0-9]*\).*/\1/p' "$log" | head -n 1)
	[ -n "$port" ] && break
	kill -0 $pid 2>/dev/null || break
	sleep 0.05
	i=$((i + 1))
done
if [ -z "$port" ]; then
	cat "$log"
	kill -9 $pid 2>/dev/null
	fail "lanes serve did not start"
fi
# One file at a time (no runner flags newer than Node.js 18): each test is printed as it
# finishes, and `timeout` bounds a file that hangs.
export LANES_URL="http://127.0.0.1:$port" LANES_KEY=test-key LANES_BIN LANES_SHARED LANES_TMP="$tmp"
: >"$tmp/http-tap.txt"
pass=0
failed=0
for f in tests/http/*.test.mjs; do
	name=$(basename "$f" .test.mjs)
	# LANES_HTTP_SKIP: files a rerun leaves out (names without .test.mjs), said aloud
	case " ${LANES_HTTP_SKIP:-} " in *" $name "*) echo "http: skipped $name (LANES_HTTP_SKIP)"; continue ;; esac
	: >"$tmp/http-file.txt"
	timeout -k 10 "${LANES_HTTP_TIMEOUT:-300}" node --test-reporter=tap "$f" >>"$tmp/http-file.txt" 2>&1 &
	tpid=$!
	# the top-level results as the file's tests finish
	tail -s 0.1 -n +1 -f --pid=$tpid "$tmp/http-file.txt" 2>/dev/null | sed -un "s/^\(not ok\|ok\) [0-9]* - \(.*\)/http: \1  $name: \2/p"
	wait $tpid
	rc=$?
	cat "$tmp/http-file.txt" >>"$tmp/http-tap.txt"
	p=$(sed -n 's/^# pass \([0-9][0-9]*\)$/\1/p' "$tmp/http-file.txt" | tail -n 1)
	fl=$(sed -n 's/^# fail \([0-9][0-9]*\)$/\1/p' "$tmp/http-file.txt" | tail -n 1)
	cn=$(sed -n 's/^# cancelled \([0-9][0-9]*\)$/\1/p' "$tmp/http-file.txt" | tail -n 1)
	if [ -z "$p" ]; then
		echo "http: $name ended (exit $rc) without a summary:"
		tail -n 30 "$tmp/http-file.txt"
		p=0
		fl=1
	fi
	if [ "$rc" -ne 0 ] && [ "${fl:-0}" = 0 ] && [ "${cn:-0}" = 0 ]; then
		echo "http: $name exited $rc though its tests passed:"
		tail -n 10 "$tmp/http-file.txt"
		fl=1
	fi
	pass=$((pass + p))
	failed=$((failed + ${fl:-0} + ${cn:-0}))
done
kill -TERM $pid 2>/dev/null
wait $pid
serve_rc=$?
# the failing tests with their diagnostics, then the figures the tests printed
awk '/^ *not ok /{p=1} /^ *ok /{p=0} p' "$tmp/http-tap.txt"
grep -E 'during prefill' "$tmp/http-tap.txt" | sed 's/^[# \]*/# /'
if [ "$serve_rc" -ne 0 ]; then
	echo "lanes serve exited $serve_rc after SIGTERM (want 0):"
	tail -n 20 "$log"
	failed=$((failed + 1))
fi
echo "http: $pass passed, $failed failed"
[ "$failed" -eq 0 ]
