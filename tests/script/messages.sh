#!/bin/sh
# tests: what the binary says and how it ends — every example of docs/cli.md's exit-code table
# exits with its code; the messages that name the fix (a LoRA file given as a model, a model
# that is not there, a port in use, a value that is no size) come once and before any
# "listening on"; --version writes only the version; serve --help names the four APIs; the default log says what a user needs
# and no engine internals, --log debug adds them, --log-format json writes one object a line;
# the build prints one line per file, V=1 the commands.
BIN=${LANES_BIN:-build/lanes}
SHARED=${LANES_SHARED:-../shared}
TMP=${LANES_TMP:-/tmp}/messages.$$
M="$SHARED/models/stories260K.gguf"
. "$(dirname "$0")/lib/common.sh"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
DOC="$ROOT/docs/cli.md"
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")

# Runs ARGS into $TMP/out and $TMP/err within 60 s; sets rc.
cli() { timeout 60 "$@" > "$TMP/out" 2> "$TMP/err"; rc=$?; }
# Runs ARGS every 50 ms until it succeeds (0) or 20 s pass (1).
poll() {
	for _ in $(seq 400); do
		"$@" && return 0
		sleep 0.05
	done
	return 1
}
# The port in "listening on" of log $1, or a failure once the server ($spid) is gone.
port_in() {
	p=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9][0-9]*\).*/\1/p' "$1" | head -n 1)
	[ -n "$p" ] && echo "$p" && return 0
	kill -0 "$spid" 2>/dev/null || exit 1
	return 1
}
wait_listen() { poll port_in "$1"; }
wait_line() { poll grep -q "$2" "$1"; }

# 1. docs/cli.md's exit codes: each example in the table, MODEL the stories model, exits with
# its row's code; the table has the three codes the binary uses.
awk '/^## Exit codes/ { g = 1; next } /^## / { g = 0 } g && /^\| [0-9] \|/' "$DOC" > "$TMP/codes"
same "$(cut -d'|' -f2 "$TMP/codes" | tr -d ' ' | tr '\n' ' ')" "0 1 2 " "the exit codes docs/cli.md lists"
n=0
while IFS= read -r row; do
	code=$(echo "$row" | cut -d'|' -f2 | tr -d ' ')
	examples=$(echo "$row" | cut -d'|' -f4 | grep -o '`lanes[^`]*`' | tr -d '`')
	echo "$examples" | while IFS= read -r ex; do
		[ -n "$ex" ] || continue
		cmd=$(echo "$ex" | sed "s|^lanes|$BIN|; s|MODEL|$M|g")
		# shellcheck disable=SC2086
		timeout 60 $cmd > /dev/null 2> "$TMP/exerr"
		got=$?
		[ "$got" = "$code" ] && echo ok || echo "bad $ex: exit $got, docs/cli.md says $code ($(head -n 1 "$TMP/exerr"))"
	done
	n=$((n + $(echo "$examples" | grep -c .)))
done < "$TMP/codes" > "$TMP/results"
[ "$n" -ge 9 ] && ok || bad "docs/cli.md's exit-code table has $n examples"
while IFS= read -r r; do
	case "$r" in ok) ok ;; *) bad "${r#bad }" ;; esac
done < "$TMP/results"

# 2. A LoRA adapter given as the model says so and names --lora, in run, plan and serve alike.
"$BIN" gen --lora 4 -m "$M" -o "$TMP/adapter.gguf" > /dev/null 2>&1 || bad "gen --lora failed"
for c in "run -m $TMP/adapter.gguf -p hi" "plan -m $TMP/adapter.gguf" "serve --port 0 -m $TMP/adapter.gguf"; do
	# shellcheck disable=SC2086
	cli "$BIN" $c
	same "$rc" 1 "lanes $c: exit code"
	same "$(grep -c . "$TMP/err")" 1 "lanes $c: lines on stderr ($(cat "$TMP/err"))"
	grep -q "is a LoRA adapter, not a model: give the base model with -m and this file with --lora" "$TMP/err" &&
		ok || bad "lanes $c: $(cat "$TMP/err")"
done

# 3. A model that is not there: the error once, no banner, never "listening on".
cli "$BIN" serve --port 0 -m "$TMP/nope.gguf"
same "$rc" 1 "serve -m nope.gguf: exit code"
same "$(cat "$TMP/err")" "lanes serve: $TMP/nope.gguf: No such file or directory" "serve -m nope.gguf: stderr"

# 4. A bad value exits 2 before anything else is said.
cli "$BIN" serve --port 0 -m "$M" --memory lots
same "$rc" 2 "serve --memory lots: exit code"
same "$(cat "$TMP/err")" "lanes serve: --memory: 'lots' is not a size (e.g. 4GiB, 500MB, 1.5GiB or auto)" "serve --memory lots: stderr"

# 5. A port in use names --port and make's PORT=; the second server never says it listens.
"$BIN" serve --port 0 -m "$M" > /dev/null 2> "$TMP/first.log" &
spid=$!
port=$(wait_listen "$TMP/first.log") || bad "the first server did not listen: $(tail -n 3 "$TMP/first.log")"
cli "$BIN" serve --port "$port" -m "$M"
same "$rc" 1 "serve on a port in use: exit code"
grep -q "^lanes serve: cannot listen on 127.0.0.1:$port: the port is in use.*--port N (make run PORT=N)" "$TMP/err" &&
	ok || bad "serve on a port in use: $(cat "$TMP/err")"
grep -q "listening on" "$TMP/err" && bad "serve on a port in use said it listens" || ok

# 6. The default log of a served request: version, listening, the model, the memory plan and
# the request's line; no engine internals (they are --log debug's).
wait_line "$TMP/first.log" "model stories260K ready" || bad "the first server did not load: $(tail -n 3 "$TMP/first.log")"
curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
	-d '{"prompt":"Once","max_tokens":2}' > /dev/null
wait_line "$TMP/first.log" "POST /v1/completions 200" || bad "no access line for the request: $(tail -n 3 "$TMP/first.log")"
kill -TERM $spid 2>/dev/null
wait $spid 2>/dev/null
for want in "^I serve: lanes .*; kernels " "^I serve: listening on http://127.0.0.1:$port" "^I lanes: 4 lanes, 8192 KV tokens" \
	"^I http: model stories260K ready" "^I http: POST /v1/completions 200 "; do
	grep -q "$want" "$TMP/first.log" && ok || bad "the default log lacks '$want': $(cat "$TMP/first.log")"
done
for internal in "pricing:" "compute:" "built with" "connections: up to"; do
	grep -q "$internal" "$TMP/first.log" && bad "the default log shows the internal '$internal'" || ok
done
cli "$BIN" run -m "$M" --ids 1 -n 2 --temp 0 --log debug
grep -q "^D lanes: pricing: " "$TMP/err" && grep -q "^D lanes: compute: " "$TMP/err" && ok || bad "--log debug lacks the internals: $(cat "$TMP/err")"

# 7. --log-format json (and LANES_LOG_FORMAT): every line one object with time, level, module, msg.
for how in "--log-format json" "env"; do
	if [ "$how" = env ]; then cli env LANES_LOG_FORMAT=json "$BIN" run -m "$M" --ids 1 -n 2 --temp 0 --log debug
	else cli "$BIN" run -m "$M" --ids 1 -n 2 --temp 0 --log debug --log-format json; fi
	same "$rc" 0 "json log ($how): exit code"
	res=$(node -e '
		const lines = require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean);
		let bad = lines.length < 3 ? "only " + lines.length + " lines" : "";
		for (const l of lines) {
			let o;
			try { o = JSON.parse(l); } catch { bad = "not JSON: " + l; break; }
			if (!/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/.test(o.time) || !["error", "warn", "info", "debug"].includes(o.level) ||
			    typeof o.module !== "string" || typeof o.msg !== "string" || Object.keys(o).length !== 4) { bad = "shape: " + l; break; }
		}
		if (!bad && !lines.some((l) => JSON.parse(l).msg.startsWith("pricing: "))) bad = "no debug line";
		console.log(bad || "ok");' "$TMP/err")
	same "$res" ok "json log ($how)"
done

# 8. --version: the version on stdout, nothing on stderr, at every log level.
cli "$BIN" --version
same "$rc" 0 "--version: exit code"
grep -q "^lanes " "$TMP/out" && ok || bad "--version stdout: $(cat "$TMP/out")"
same "$(cat "$TMP/err")" "" "--version stderr"

# serve's help names the four APIs it serves
what=$("$BIN" serve --help | sed -n 2p)
for api in OpenAI Anthropic Responses Ollama; do
	case "$what" in *"$api"*) ok ;; *) bad "serve --help does not name the $api API: $what" ;; esac
done

# 9. The build: one line per file; V=1 prints the command.
cd "$ROOT" || exit 1
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make SANITIZE= BUILD="$TMP/build" "$@"; }
mk "$TMP/build/src/base/sha256.o" > "$TMP/out" 2>&1
same "$(cat "$TMP/out")" "  CC   src/base/sha256.c" "the build's line for one file"
rm -f "$TMP/build/src/base/sha256.o"
mk V=1 "$TMP/build/src/base/sha256.o" > "$TMP/out" 2>&1
grep -q "^${CC:-cc} .* -c src/base/sha256.c -o $TMP/build/src/base/sha256.o$" "$TMP/out" && ok || bad "V=1: $(cat "$TMP/out")"

echo "messages: $pass passed, $fail failed"
[ "$fail" = 0 ]
