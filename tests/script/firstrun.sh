#!/bin/sh
# tests: the first five minutes of a new user — a missing shared folder is named before
# anything is built, `make run PORT= ARGS=` serves where asked, and the "try" lines the
# server prints run as printed (with and without --api-key) and answer 200 with text.
BIN=${LANES_BIN:-build/lanes}
SHARED=${LANES_SHARED:-../shared}
TMP=${LANES_TMP:-/tmp}/firstrun.$$
. "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/../.." || exit 1
# a make of our own, not the jobserver of the make that may be running us
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make "$@"; }

# A free loopback port.
free_port() { node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }

# Waits for "listening on http://127.0.0.1:PORT" in log $1; prints the port.
wait_listen() {
	i=0
	while [ $i -lt 200 ]; do
		p=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9][0-9]*\).*/\1/p' "$1" | head -n 1)
		[ -n "$p" ] && { echo "$p"; return 0; }
		sleep 0.05
		i=$((i + 1))
	done
	return 1
}
# Waits for the try lines in log $1.
wait_try() {
	i=0
	while [ $i -lt 400 ]; do
		grep -q 'try: curl' "$1" && grep -q 'chat: curl\|try: curl.*chat' "$1" && return 0
		sleep 0.05
		i=$((i + 1))
	done
	return 1
}
# Runs the curl command printed after "$2: " in log $1, with the status appended and the key
# the log shows as "…" and its last 4 characters put back as $3; sets out.
run_line() {
	cmd=$(sed -n "s/.*$2: \(curl .*\)/\1/p" "$1" | sed "s/Bearer \xe2\x80\xa6[^']*'/Bearer $3'/" | head -n 1)
	[ -n "$cmd" ] || { out="no '$2' line"; return; }
	out=$(eval "$cmd -s -w ' status=%{http_code}'" 2>&1)
}

# 1. No shared folder: make names ../shared and LANES_SHARED, and builds nothing first.
for goal in test run; do
	out=$(LANES_SHARED="$TMP/nowhere" mk "$goal" BUILD="$TMP/build-none" 2>&1)
	rc=$?
	[ $rc -ne 0 ] && ok || bad "make $goal without the shared folder exited 0"
	case "$out" in *../shared*LANES_SHARED*) ok ;; *) bad "make $goal without the shared folder: '$out'" ;; esac
	[ ! -d "$TMP/build-none" ] && ok || bad "make $goal built before saying the shared folder is missing"
done

# 2. make run PORT= HOST= ARGS= serves there, with the arguments given.
port=$(free_port)
KEY="k-$$-secret"
mk run SHARED="$SHARED" PORT="$port" HOST=127.0.0.1 ARGS="--lanes 2 --api-key $KEY" >"$TMP/run.log" 2>&1 &
mpid=$!
got=$(wait_listen "$TMP/run.log")
same "$got" "$port" "make run PORT=$port listens there"
wait_try "$TMP/run.log" || bad "make run: no try lines: $(tail -n 5 "$TMP/run.log")"
lanes=$(curl -s "http://127.0.0.1:$port/slots" -H "Authorization: Bearer $KEY" | node -e 'let t="";process.stdin.on("data",d=>t+=d).on("end",()=>{try{console.log(JSON.parse(t).lanes.length)}catch{console.log("?")}})')
same "$lanes" 2 "make run ARGS=--lanes 2"

# 3. The try lines work as printed, with the key: a completion for a model with no chat
# template of its own (stories260K), then the chat line.
run_line "$TMP/run.log" try "$KEY"
case "$out" in *'"text"'*'status=200') ok ;; *) bad "the try line with --api-key: $out" ;; esac
# the key is never logged whole: "…" and its last 4 characters stand for it
last4=$(printf '%s' "$KEY" | tail -c 4)
case "$(grep 'try: curl' "$TMP/run.log" | head -n 1)" in *v1/completions*"Authorization: Bearer …$last4'"*) ok ;; *) bad "the first try line is not a keyed completion with the key hidden" ;; esac
grep '^[EWID] ' "$TMP/run.log" | grep -qF "$KEY" && bad "the log shows the API key: $(grep -F "$KEY" "$TMP/run.log" | head -n 1)" || ok
run_line "$TMP/run.log" "or chat" "$KEY"
case "$out" in *'"content"'*'status=200') ok ;; *) bad "the chat try line with --api-key: $out" ;; esac
kill -TERM $mpid 2>/dev/null
pkill -TERM -f "serve -m .* --port $port " 2>/dev/null
wait $mpid 2>/dev/null

# Without --api-key the lines carry no header and still answer 200.
"$BIN" serve -m "$SHARED/models/stories260K.gguf" --port 0 >"$TMP/serve.log" 2>&1 &
spid=$!
wait_listen "$TMP/serve.log" >/dev/null || bad "serve did not start"
wait_try "$TMP/serve.log" || bad "serve: no try lines"
grep 'try: curl' "$TMP/serve.log" | grep -q Authorization && bad "a try line without --api-key carries a key" || ok
run_line "$TMP/serve.log" try
case "$out" in *'"text"'*'status=200') ok ;; *) bad "the try line without a key: $out" ;; esac
kill -TERM $spid 2>/dev/null
wait $spid 2>/dev/null

echo "firstrun: $pass passed, $fail failed"
[ "$fail" = 0 ]
