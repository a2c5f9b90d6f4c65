#!/bin/sh
# tests: `lanes plan` from the command line — the JSON object (one, parsed by node), its sums,
# the lane choice under a large budget, what does not fit and why, q8_0 against f16, size
# units, the text form, and exit codes (0 fits, 1 does not or cannot read, 2 bad arguments).
BIN=${LANES_BIN:-build/lanes}
SHARED=${LANES_SHARED:-../shared}
TMP=${LANES_TMP:-/tmp}/plan.$$
M="$SHARED/models/ref-llama-Q4_0.gguf"
. "$(dirname "$0")/lib/common.sh"

# Runs `lanes plan ARGS --json` into $TMP/out; sets rc.
plan() { "$BIN" plan "$@" --json > "$TMP/out" 2> "$TMP/err"; rc=$?; }
# Prints key of the JSON object in $TMP/out (node parses it; the file must hold exactly one).
jget() {
	if command -v node > /dev/null 2>&1; then
		node -e '
			const t = require("fs").readFileSync(process.argv[1], "utf8").trim();
			if (t.includes("\n")) { console.log("MORE_THAN_ONE_LINE"); process.exit(0); }
			const o = JSON.parse(t), v = o[process.argv[2]];
			console.log(v === undefined ? "MISSING" : typeof v === "string" ? v : JSON.stringify(v));' "$TMP/out" "$1" 2>/dev/null ||
			echo "NOT_JSON"
	else
		sed -n "s/.*\"$1\":\(\"[^\"]*\"\|[^,}]*\).*/\1/p" "$TMP/out" | sed 's/^"//; s/"$//'
	fi
}

# A budget that holds everything: 16 lanes at the trained context, sums that add up.
plan -m "$M" --memory 1TiB
same "$rc" 0 "1TiB exit code"
for k in weights_bytes kv_bytes_per_token compute_reserve_bytes lanes window total_bytes fits reason; do
	v=$(jget "$k")
	[ "$v" != MISSING ] && [ "$v" != NOT_JSON ] && [ "$v" != MORE_THAN_ONE_LINE ] && ok || bad "key $k: $v"
done
same "$(jget fits)" true "1TiB fits"
same "$(jget reason)" "" "1TiB reason"
same "$(jget lanes)" 16 "1TiB lanes"
same "$(jget window)" 4096 "1TiB window (the trained context)"
same "$(jget budget_bytes)" 1099511627776 "1TiB budget"
same "$(jget kv_type)" f16s "default kv type"
w=$(jget weights_bytes); kpt=$(jget kv_bytes_per_token); c=$(jget compute_reserve_bytes); t=$(jget total_bytes)
same "$t" "$((w + kpt * 16 * 4096 + c))" "total = weights + KV + compute reserve"
[ "$w" -gt 1000000 ] && [ "$w" -lt 3000000 ] && ok || bad "weights of a 1.9 MiB file: $w"

# The weights alone do not fit: exit 1, and the reason says so.
plan -m "$M" --memory 1MiB
same "$rc" 1 "1MiB exit code"
same "$(jget fits)" false "1MiB fits"
case "$(jget reason)" in *"the weights alone need 1.9 MiB, the budget is 1.0 MiB"*) ok ;; *) bad "1MiB reason: $(jget reason)" ;; esac

# Four lanes given, a budget just short of 4 x 256 tokens of KV: the reason names the KV.
plan -m "$M" --memory 1TiB --lanes 4
same "$(jget lanes)" 4 "--lanes 4"
same "$(jget window)" 4096 "--lanes 4 window"
c4=$(jget compute_reserve_bytes)
need=$((w + c4 + kpt * 4 * 256))
plan -m "$M" --memory "$need" --lanes 4
same "$rc" 0 "exactly 4 x 256 tokens: exit code"
same "$(jget window)" 256 "exactly 4 x 256 tokens: window"
same "$(jget total_bytes)" "$need" "exactly 4 x 256 tokens: total"
plan -m "$M" --memory "$((need - 1))" --lanes 4
same "$rc" 1 "short of 4 x 256 tokens: exit code"
case "$(jget reason)" in *"4 lanes need at least 4 x 256 tokens x "*" of KV = "*" is left after the weights"*) ok ;;
*) bad "short of 4 x 256 tokens: reason '$(jget reason)'" ;; esac

# q8_0 KV: at most 55% of f16's bytes per token, and the window grows in the same budget.
budget=$((w + c4 + 4 * 1024 * $("$BIN" plan -m "$M" --memory 1TiB --kv-type f16 --json 2>/dev/null |
	sed -n 's/.*"kv_bytes_per_token":\([0-9]*\).*/\1/p')))
plan -m "$M" --memory "$budget" --lanes 4 --kv-type f16
same "$(jget kv_type)" f16 "--kv-type f16"
k16=$(jget kv_bytes_per_token); w16=$(jget window)
plan -m "$M" --memory "$budget" --lanes 4 --kv-type q8_0
same "$(jget kv_type)" q8_0 "--kv-type q8_0"
k8=$(jget kv_bytes_per_token); w8=$(jget window)
[ "$((k8 * 100))" -le "$((k16 * 55))" ] && ok || bad "q8_0 $k8 bytes per token vs f16 $k16"
same "$w16" 1024 "f16 window in its budget"
[ "$((w8 * 100))" -ge "$((w16 * 170))" ] && ok || bad "q8_0 window $w8 vs f16 $w16"
plan -m "$M" --memory "$budget" --lanes 4 --kv-type=q4_0
[ "$(jget window)" -gt "$w8" ] && ok || bad "q4_0 window $(jget window) vs q8_0 $w8"

# Size units: powers of 1024 and of 1000, fractions, a space, any case.
plan -m "$M" --memory=2GB
same "$(jget budget_bytes)" 2000000000 "2GB"
plan -m "$M" --memory "1.5 GiB"
same "$(jget budget_bytes)" 1610612736 "1.5 GiB"
plan -m "$M" --memory 300mb
same "$(jget budget_bytes)" 300000000 "300mb"
plan -m "$M" --memory 512KiB
same "$(jget budget_bytes)" 524288 "512KiB"
# Without --memory the budget is the available memory.
plan -m "$M"
avail=$(awk '/^MemAvailable:/ { printf "%.0f\n", $2 * 1024 }' /proc/meminfo)
b=$(jget budget_bytes)
[ "$b" -gt "$((avail / 2))" ] && [ "$b" -lt "$((avail * 2))" ] && ok || bad "default budget $b, MemAvailable $avail"

# The text form.
"$BIN" plan -m "$M" --memory 1GiB > "$TMP/text" 2> /dev/null
same "$?" 0 "text exit code"
for want in "^weights  *1.9 MiB" "^KV per token  *2.0 KiB (f16s)" "^lanes  *16$" "^window  *4096 tokens per lane" \
	"^compute  *" "^total  *" "^budget  *1.0 GiB$" "^fits  *yes$"; do
	grep -q "$want" "$TMP/text" && ok || bad "text lacks '$want'"
done
"$BIN" plan -m "$M" --memory 3MiB > "$TMP/text" 2> /dev/null
same "$?" 1 "text exit code when it does not fit"
grep -q "^fits  *no: the weights (1.9 MiB) and the compute reserve for 1 lane" "$TMP/text" && ok ||
	bad "text reason: $(grep fits "$TMP/text")"

# Grid-type weights held compact weigh about the file's size; expanded, more; auto expands what
# fits (this small model, always).
"$BIN" quantize "$SHARED/models/ref-llama-F32.gguf" "$TMP/iq1m.gguf" IQ1_M > /dev/null 2>&1 || bad "quantize to IQ1_M failed"
file=$(wc -c < "$TMP/iq1m.gguf")
plan -m "$TMP/iq1m.gguf" --memory 1GiB --compact-weights on
won=$(jget weights_bytes)
plan -m "$TMP/iq1m.gguf" --memory 1GiB --compact-weights off
woff=$(jget weights_bytes)
plan -m "$TMP/iq1m.gguf" --memory 1GiB
wauto=$(jget weights_bytes)
[ "$won" -le "$file" ] && [ "$woff" -gt $((won * 2)) ] && ok || bad "IQ1_M weights: compact $won, expanded $woff bytes, file $file"
same "$wauto" "$woff" "auto on a model that fits"
# a budget the expanded weights would take most of: auto holds them compact
plan -m "$TMP/iq1m.gguf" --memory "$woff"
same "$(jget weights_bytes)" "$won" "auto under a budget the expanded weights do not fit"
plan -m "$TMP/iq1m.gguf" --memory 1GiB --compact-weights maybe
same "$rc" 2 "--compact-weights maybe"

# Bad arguments: exit 2 with a message; a model that cannot be read: exit 1.
for args in "--memory 1x" "--memory -5GiB" "--memory ''" "--kv-type f8" "--lanes 65" "--lanes -1" "--threads -2" \
	"--bogus" "--draft-max 99"; do
	eval "\"\$BIN\" plan -m \"\$M\" $args" > /dev/null 2> "$TMP/err"
	rc=$?
	same "$rc" 2 "plan $args"
	[ -s "$TMP/err" ] && ok || bad "plan $args: no message"
done
"$BIN" plan --memory 1GiB > /dev/null 2>&1
same "$?" 2 "no model"
"$BIN" plan -m "$TMP/none.gguf" --memory 1GiB > "$TMP/out" 2> "$TMP/err"
same "$?" 1 "missing model file"
[ -s "$TMP/err" ] && [ ! -s "$TMP/out" ] && ok || bad "missing model file: message on stderr only"
"$BIN" plan --help > /dev/null 2>&1
same "$?" 0 "--help"

echo "plan.sh: $pass passed, $fail failed"
[ "$fail" = 0 ]
