#!/bin/sh
# tests: LoRA adapters from the command line — `lanes gen --lora` writes them, `lanes logits`
# and `lanes run` take --lora PATH[:SCALE]: B = 0 or scale 0 give the base's logits bit for
# bit, chunking does not change them, `run` decodes what the logits say, and bad adapters fail
# with a message naming the file and the tensor.
BIN=${LANES_BIN:-build/lanes}
SHARED=${LANES_SHARED:-../shared}
TMP=${LANES_TMP:-/tmp}/lora.$$
M="$SHARED/models/stories260K.gguf"
. "$(dirname "$0")/lib/common.sh"

IDS=1,403,407,261,378,300,301
expect_fail() {
	want=$1
	shift
	if "$@" > "$TMP/out" 2> "$TMP/err"; then bad "$* succeeded"; else grep -q -- "$want" "$TMP/err" && ok || bad "$*: '$(cat "$TMP/err")' lacks '$want'"; fi
}
# The argmax of the last row of a float32 logits file of V columns.
last_argmax() { od -A n -t f4 -v "$1" | tr -s ' ' '\n' | sed '/^$/d' | tail -n "$2" | awk 'NR == 1 || $1 > m { m = $1; i = NR - 1 } END { print i }'; }

"$BIN" gen --lora 8 -m "$M" -o "$TMP/a.gguf" --seed 2 > /dev/null 2> "$TMP/err" && ok || bad "gen --lora: $(cat "$TMP/err")"
"$BIN" gen --lora 4 -m "$M" -o "$TMP/z.gguf" --type F16 --lora-zero-b > /dev/null 2> "$TMP/err" && ok || bad "gen --lora-zero-b: $(cat "$TMP/err")"
"$BIN" logits -m "$M" --ids $IDS -o "$TMP/base" 2> /dev/null && ok || bad "logits"
"$BIN" logits -m "$M" --ids $IDS -o "$TMP/z" --lora "$TMP/z.gguf" 2> /dev/null && ok || bad "logits --lora zero"
cmp -s "$TMP/base" "$TMP/z" && ok || bad "an adapter with B = 0 changed the logits"
"$BIN" logits -m "$M" --ids $IDS -o "$TMP/a0" --lora "$TMP/a.gguf:0" 2> /dev/null && ok || bad "logits --lora :0"
cmp -s "$TMP/base" "$TMP/a0" && ok || bad "scale 0 changed the logits"
"$BIN" logits -m "$M" --ids $IDS -o "$TMP/a" --lora "$TMP/a.gguf" 2> "$TMP/err" && ok || bad "logits --lora: $(cat "$TMP/err")"
cmp -s "$TMP/base" "$TMP/a" && bad "the adapter left the logits as they were" || ok
grep -q "rank 8" "$TMP/err" && ok || bad "the adapter's rank is not logged: $(cat "$TMP/err")"
"$BIN" logits -m "$M" --ids $IDS -o "$TMP/a3" --chunk 3 --lora "$TMP/a.gguf" 2> /dev/null && ok || bad "logits --chunk 3 --lora"
cmp -s "$TMP/a" "$TMP/a3" && ok || bad "chunking changed the adapter's logits"
# two adapters add up: a then z equals a alone
"$BIN" logits -m "$M" --ids $IDS -o "$TMP/az" --lora "$TMP/a.gguf" --lora "$TMP/z.gguf:3" 2> /dev/null && ok || bad "two --lora"
cmp -s "$TMP/a" "$TMP/az" && ok || bad "a zero adapter after another changed its logits"

# run goes through the lane host: its first greedy token is the argmax of the last logits row
V=$(( $(wc -c < "$TMP/a") / 4 / 7 ))
want=$(last_argmax "$TMP/a" $V)
got=$("$BIN" run -m "$M" --ids $IDS -n 1 --temp 0 --print-ids --lora "$TMP/a.gguf" 2> /dev/null | tail -n 1)
same "$got" "[$want]" "run --lora: first greedy token"
base_tok=$(last_argmax "$TMP/base" $V)
got=$("$BIN" run -m "$M" --ids $IDS -n 1 --temp 0 --print-ids --lora "$TMP/z.gguf" 2> /dev/null | tail -n 1)
same "$got" "[$base_tok]" "run --lora zero: the base's token"

# run takes --lora repeatably: a zero adapter after a changes nothing, a second random one does
"$BIN" gen --lora 4 -m "$M" -o "$TMP/b.gguf" --seed 9 > /dev/null 2>&1 && ok || bad "gen --lora b"
run8() { "$BIN" run -m "$M" --ids $IDS -n 8 --temp 0 --print-ids "$@" 2> /dev/null | tail -n 1; }
alone=$(run8 --lora "$TMP/a.gguf")
same "$(run8 --lora "$TMP/a.gguf" --lora "$TMP/z.gguf:3")" "$alone" "run --lora a --lora zero: a's tokens"
[ "$(run8 --lora "$TMP/a.gguf" --lora "$TMP/b.gguf:2")" != "$alone" ] && ok || bad "run --lora a --lora b: b changed nothing"
"$BIN" logits -m "$M" --ids $IDS -o "$TMP/ab" --lora "$TMP/a.gguf" --lora "$TMP/b.gguf:2" 2> /dev/null && ok || bad "logits --lora a --lora b"
want=$(last_argmax "$TMP/ab" $V)
same "$(run8 --lora "$TMP/a.gguf" --lora "$TMP/b.gguf:2" | tr -d '[]' | cut -d, -f1)" "$want" "run --lora a --lora b: first token = the logits' argmax"

# bad adapters and arguments
"$BIN" gen --lora 4 -m "$SHARED/models/ref-llama-F32.gguf" -o "$TMP/other.gguf" > /dev/null 2>&1 && ok || bad "gen for ref-llama"
expect_fail "other.gguf: lora: tensor .*\.lora_[ab] has shape" "$BIN" logits -m "$M" --ids 1,2 -o "$TMP/x" --lora "$TMP/other.gguf"
expect_fail "none.gguf" "$BIN" run -m "$M" --ids 1 -n 1 --lora "$TMP/none.gguf"
expect_fail "general.type is '', expected 'adapter'" "$BIN" logits -m "$M" --ids 1,2 -o "$TMP/x" --lora "$M"
expect_fail "F32, F16, BF16 or Q8_0" "$BIN" gen --lora 8 -m "$M" -o "$TMP/x.gguf" --type Q4_0
expect_fail "not a multiple of 32" "$BIN" gen --lora 8 -m "$M" -o "$TMP/x.gguf" --type Q8_0
expect_fail "needs -m BASE" "$BIN" gen --lora 8 -o "$TMP/x.gguf"
expect_fail "goes with --lora" "$BIN" gen --shape test --vocab "$M" --lora-zero-b -o "$TMP/x.gguf"
expect_fail "give --shape NAME" "$BIN" gen -o "$TMP/x.gguf"
echo "lora: $pass passed, $fail failed"
[ "$fail" = 0 ]
