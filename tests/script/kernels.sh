#!/bin/sh
# tests: kernel-set dispatch from the command line — the log names the set CPUID picked,
# LANES_KERNELS forces each set the CPU runs (and each gives stories260K's greedy text),
# an unknown or unsupported name is an error naming the choices, and logits stay identical
# across threads and chunking under every set.
BIN=${LANES_BIN:-build/lanes}
SHARED=${LANES_SHARED:-../shared}
TMP=${LANES_TMP:-/tmp}/kernels.$$
M="$SHARED/models/stories260K.gguf"
. "$(dirname "$0")/lib/common.sh"

# greedy continuation of case 0 of text.json (see forward.sh)
ids="1,403,407,261,378"
want=$(awk '/"greedy": \[/ { g = 1; next } g && /^ *\]/ { exit } g { v = $0; gsub(/[ ,]/, "", v); if (v == "2") exit; s = s (s == "" ? "" : ",") v } END { print "[" s "]" }' "$SHARED/golden/stories260K/text.json")

unset LANES_KERNELS
"$BIN" run -m "$M" --ids "$ids" -n 8 --temp 0 > /dev/null 2> "$TMP/err" || bad "run failed: $(cat "$TMP/err")"
best=$(sed -n 's/.*tensor: kernels: \([a-z0-9]*\).*/\1/p' "$TMP/err" | head -n 1)
case "$best" in ref | avx2 | avx512) ok ;; *) bad "no kernel set in the log: $(cat "$TMP/err")" ;; esac
sets="ref"
[ "$best" = avx2 ] && sets="ref avx2"
[ "$best" = avx512 ] && sets="ref avx2 avx512"

for ks in $sets; do
	LANES_KERNELS=$ks "$BIN" run -m "$M" --ids "$ids" -n 64 --temp 0 --print-ids > "$TMP/out" 2> "$TMP/err" || bad "$ks: run failed"
	grep -q "tensor: kernels: $ks (LANES_KERNELS)" "$TMP/err" && ok || bad "$ks: the log does not name the forced set: $(head -n 3 "$TMP/err")"
	[ "$(tail -n 1 "$TMP/out")" = "$want" ] && ok || bad "$ks: greedy ids $(tail -n 1 "$TMP/out"), want $want"
	all="$ids,$(tail -n 1 "$TMP/out" | tr -d '[]')"
	LANES_KERNELS=$ks "$BIN" logits -m "$M" --ids "$all" -o "$TMP/l1" --threads 1 2>/dev/null || bad "$ks: logits failed"
	LANES_KERNELS=$ks "$BIN" logits -m "$M" --ids "$all" -o "$TMP/l2" --threads 2 --chunk 7 2>/dev/null || bad "$ks: logits failed"
	cmp -s "$TMP/l1" "$TMP/l2" && ok || bad "$ks: logits differ between 1 thread whole and 2 threads in chunks of 7"
done

LANES_KERNELS=sse9 "$BIN" run -m "$M" --ids "$ids" -n 4 --temp 0 > /dev/null 2> "$TMP/err"
same "$?" 2 "an unknown set: exit code"
grep -q "lanes run: LANES_KERNELS must be ref, avx2 or avx512, not 'sse9'" "$TMP/err" && ok || bad "an unknown set is not named with the choices: $(head -n 3 "$TMP/err")"
if [ "$best" != avx512 ]; then
	LANES_KERNELS=avx512 "$BIN" run -m "$M" --ids "$ids" -n 4 --temp 0 > /dev/null 2> "$TMP/err"
	same "$?" 2 "a set this CPU lacks: exit code"
	grep -q "LANES_KERNELS=avx512: this CPU cannot run that set" "$TMP/err" && ok || bad "no error for a set this CPU lacks"
fi
echo "kernels: $pass passed, $fail failed"
[ "$fail" = 0 ]
