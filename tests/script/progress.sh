#!/bin/sh
# tests: progress as a person sees it — on a terminal (a pty from `script`) `lanes gen`,
# `lanes quantize` and a model load draw one bar redrawn in place that reaches 100%; when
# stderr is not a terminal there is no bar and no escape, only plain lines (gen's tenths,
# quantize's line per tensor) or nothing (a load); LANES_LOG=error shows no progress.
BIN=${LANES_BIN:-build/lanes}
SHARED=${LANES_SHARED:-../shared}
TMP=${LANES_TMP:-/tmp}/progress.$$
M="$SHARED/models/stories260K.gguf"
. "$(dirname "$0")/lib/common.sh"

if ! command -v script > /dev/null 2>&1; then
	echo "progress: no script(1) (util-linux): terminal checks skipped"
	echo "progress: 0 passed, 0 failed"
	exit 0
fi
ESC=$(printf '\033')
CR=$(printf '\r')
# Runs a command on a terminal; everything it wrote into $TMP/tty.
tty_run() { script -qec "$1" /dev/null > "$TMP/tty" 2>&1; }
# A bar named $1 was drawn: redrawn in place (carriage return, erase to the line's end) up to 100%.
has_bar() {
	grep -q "$CR$1 \[#*\.*\] " "$TMP/tty" && grep -q "$ESC\[K" "$TMP/tty" && grep -q "$1 \[#\{30\}\] 100%" "$TMP/tty"
}
show() { tr '\r\033' '~^' < "$1" | tail -c 600; }
# Plain output: no carriage return, no escape sequence.
plain() { ! grep -q "[$CR$ESC]" "$1"; }

# lanes gen: a bar on a terminal; plain lines at each tenth otherwise
tty_run "$BIN gen --shape test --type Q8_0 --vocab $M -o $TMP/g.gguf"
same "$?" 0 "gen on a terminal: exit code"
has_bar gen && ok || bad "gen on a terminal drew no bar: $(show "$TMP/tty")"
"$BIN" gen --shape test --type Q8_0 --vocab "$M" -o "$TMP/g2.gguf" > "$TMP/out" 2> "$TMP/err"
same "$?" 0 "gen: exit code"
plain "$TMP/err" && ok || bad "gen without a terminal wrote a bar: $(show "$TMP/err")"
grep -q "^gen: 100% (" "$TMP/err" && ok || bad "gen without a terminal: no plain line at 100%: $(cat "$TMP/err")"
pcts=$(sed -n 's/^gen: \([0-9]*\)% (.*/\1/p' "$TMP/err" | tr '\n' ' ')
same "$(echo $pcts | tr ' ' '\n' | sort -n | tr '\n' ' ')" "$pcts" "gen without a terminal: its tenths in order"
cmp -s "$TMP/g.gguf" "$TMP/g2.gguf" && ok || bad "the bar changed what gen wrote"

# lanes quantize: a bar on a terminal; its line per tensor otherwise
tty_run "$BIN quantize $TMP/g.gguf $TMP/q.gguf Q4_0"
same "$?" 0 "quantize on a terminal: exit code"
has_bar quantize && ok || bad "quantize on a terminal drew no bar: $(show "$TMP/tty")"
grep -q '^\[ *1/' "$TMP/tty" && bad "quantize on a terminal printed its plain lines too" || ok
"$BIN" quantize "$TMP/g.gguf" "$TMP/q2.gguf" Q4_0 > "$TMP/out" 2> "$TMP/err"
same "$?" 0 "quantize: exit code"
plain "$TMP/err" && ok || bad "quantize without a terminal wrote a bar: $(show "$TMP/err")"
grep -q '^\[ *1/' "$TMP/err" && ok || bad "quantize without a terminal: no line per tensor: $(cat "$TMP/err")"
cmp -s "$TMP/q.gguf" "$TMP/q2.gguf" && ok || bad "the bar changed what quantize wrote"

# a model load (lanes run): a bar on a terminal, nothing otherwise
tty_run "$BIN run -m $TMP/g.gguf -p hello -n 2"
same "$?" 0 "run on a terminal: exit code"
has_bar load && ok || bad "a load on a terminal drew no bar: $(show "$TMP/tty")"
"$BIN" run -m "$TMP/g.gguf" -p hello -n 2 > "$TMP/out" 2> "$TMP/err"
same "$?" 0 "run: exit code"
plain "$TMP/err" && ok || bad "a load without a terminal wrote a bar: $(show "$TMP/err")"
grep -q "load" "$TMP/err" && bad "a load without a terminal printed progress: $(cat "$TMP/err")" || ok

# LANES_LOG=error: no progress, even on a terminal
tty_run "LANES_LOG=error $BIN gen --shape test --type Q8_0 --vocab $M -o $TMP/g3.gguf"
same "$?" 0 "gen LANES_LOG=error: exit code"
grep -q "gen \[" "$TMP/tty" && bad "LANES_LOG=error still drew a bar: $(show "$TMP/tty")" || ok

echo "progress: $pass passed, $fail failed"
[ "$fail" = 0 ]
