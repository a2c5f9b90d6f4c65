#!/bin/sh
# tests: `lanes learn` from the command line — a short run on stories260K prints a progress line
# per step and a lower held-out loss, the adapter it writes changes `lanes logits --lora` and
# can be trained further with --from, conversations train too, gemma2/gemma3/phi3/gpt-oss train, and bad data or options fail
# with a message naming the file and line or the option.
BIN=${LANES_BIN:-build/lanes}
SHARED=${LANES_SHARED:-../shared}
TMP=${LANES_TMP:-/tmp}/learn.$$
M="$SHARED/models/stories260K.gguf"
DATA="$(dirname "$0")/../data/learn"
. "$(dirname "$0")/lib/common.sh"

expect_fail() {
	want=$1
	shift
	if "$@" > "$TMP/out" 2> "$TMP/err"; then bad "$* succeeded"; else grep -q -- "$want" "$TMP/err" && ok || bad "$*: '$(cat "$TMP/err")' lacks '$want'"; fi
}

LANES_LOG=error "$BIN" learn -m "$M" --data "$DATA/stories-train.jsonl" --eval "$DATA/stories-held.jsonl" --steps 8 --batch 2 \
	--rank 4 --lr 0.01 --max-tokens 64 -t 2 -o "$TMP/a.gguf" > "$TMP/out" 2> "$TMP/err" && ok || bad "learn: $(cat "$TMP/err")"
same "$(grep -c '^step [0-9]*/8  loss [0-9.]*  grad [0-9.]*  tokens [0-9]*  [0-9]* tok/s  ([0-9]* tok/s overall)$' "$TMP/out")" 8 "progress lines"
line=$(grep '^held-out loss: ' "$TMP/out")
before=$(echo "$line" | sed -n 's/^held-out loss: \([0-9.]*\) -> \([0-9.]*\) .*/\1/p')
after=$(echo "$line" | sed -n 's/^held-out loss: \([0-9.]*\) -> \([0-9.]*\) .*/\2/p')
[ -n "$after" ] && awk -v b="$before" -v a="$after" 'BEGIN { exit !(a < b) }' && ok || bad "held-out loss did not fall: '$line'"
grep -q "^learn: 48 examples .* rank 4 alpha 4 on 35 weights" "$TMP/out" && ok || bad "summary: $(head -n 1 "$TMP/out")"

# the adapter runs through the inference path and changes the logits
"$BIN" logits -m "$M" --ids 1,403,407,261 -o "$TMP/base" 2> /dev/null && ok || bad "logits"
"$BIN" logits -m "$M" --ids 1,403,407,261 -o "$TMP/lora" --lora "$TMP/a.gguf" 2> "$TMP/err" && ok || bad "logits --lora: $(cat "$TMP/err")"
cmp -s "$TMP/base" "$TMP/lora" && bad "the trained adapter left the logits as they were" || ok

# the families with their own operations train too (examples longer than their window of 16),
# and their adapters run through the inference path
for fam in gemma2-test gemma3-test phi3-test gpt-oss-test; do
	"$BIN" gen --shape "$fam" --type Q8_0 --vocab "$M" -o "$TMP/$fam.gguf" > /dev/null 2>&1 && ok || bad "gen $fam"
	LANES_LOG=error "$BIN" learn -m "$TMP/$fam.gguf" --data "$DATA/stories-train.jsonl" --eval "$DATA/stories-held.jsonl" --steps 6 \
		--batch 2 --rank 4 --lr 0.01 --max-tokens 64 -t 2 -o "$TMP/$fam-a.gguf" > "$TMP/out" 2> "$TMP/err" && ok || bad "learn $fam: $(cat "$TMP/err")"
	line=$(grep '^held-out loss: ' "$TMP/out")
	before=$(echo "$line" | sed -n 's/^held-out loss: \([0-9.]*\) -> \([0-9.]*\) .*/\1/p')
	after=$(echo "$line" | sed -n 's/^held-out loss: \([0-9.]*\) -> \([0-9.]*\) .*/\2/p')
	[ -n "$after" ] && awk -v b="$before" -v a="$after" 'BEGIN { exit !(a < b) }' && ok || bad "$fam: held-out loss did not fall: '$line'"
	"$BIN" logits -m "$TMP/$fam.gguf" --ids 1,403,407,261 -o "$TMP/base" 2> /dev/null && ok || bad "logits $fam"
	"$BIN" logits -m "$TMP/$fam.gguf" --ids 1,403,407,261 -o "$TMP/lora" --lora "$TMP/$fam-a.gguf" 2> "$TMP/err" && ok || bad "logits --lora $fam: $(cat "$TMP/err")"
	cmp -s "$TMP/base" "$TMP/lora" && bad "$fam: the trained adapter left the logits as they were" || ok
	rm -f "$TMP/$fam.gguf" "$TMP/$fam-a.gguf"
done

# training goes on from the file; conversations (plain text here: the model has no template, nor ChatML's tokens) train too
printf '%s\n' '{"messages": [{"role": "user", "content": "Tell me a story."}, {"role": "assistant", "content": "Once upon a time, Pip the little robot found a red ball."}]}' \
	'{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, friend."}]}' > "$TMP/chat.jsonl"
LANES_LOG=error "$BIN" learn -m "$M" --data "$TMP/chat.jsonl" --from "$TMP/a.gguf" --steps 2 --batch 2 -o "$TMP/b.gguf" > "$TMP/out" 2> "$TMP/err" \
	&& ok || bad "learn --from with conversations: $(cat "$TMP/err")"
grep -q "^learn: 2 examples .* rank 4 alpha 4" "$TMP/out" && ok || bad "--from: $(head -n 1 "$TMP/out")"
[ -s "$TMP/b.gguf" ] && ok || bad "--from wrote nothing"

# bad data and options
printf '%s\n' '{"prompt": "a", "completion": "b"}' 'not json' > "$TMP/bad.jsonl"
expect_fail "bad.jsonl:2: " "$BIN" learn -m "$M" --data "$TMP/bad.jsonl" -o "$TMP/x.gguf"
printf '%s\n' '{"text": "a"}' > "$TMP/bad2.jsonl"
expect_fail 'bad2.jsonl:1: a line holds "messages", or "prompt" and "completion" strings' "$BIN" learn -m "$M" --data "$TMP/bad2.jsonl" -o "$TMP/x.gguf"
printf '%s\n' '{"messages": [{"role": "user", "content": "Hi"}]}' > "$TMP/bad3.jsonl"
expect_fail "bad3.jsonl:1: learn: the conversation has no assistant turn to learn" "$BIN" learn -m "$M" --data "$TMP/bad3.jsonl" -o "$TMP/x.gguf"
expect_fail "none.jsonl: cannot read it" "$BIN" learn -m "$M" --data "$TMP/none.jsonl" -o "$TMP/x.gguf"
expect_fail "data FILE.jsonl is required" "$BIN" learn -m "$M" -o "$TMP/x.gguf"
expect_fail "type is F32, F16, BF16 or Q8_0, not 'Q4_0'" "$BIN" learn -m "$M" --data "$TMP/chat.jsonl" -o "$TMP/x.gguf" --type Q4_0
expect_fail "rank must be 1..4096, not 0" "$BIN" learn -m "$M" --data "$TMP/chat.jsonl" -o "$TMP/x.gguf" --rank 0
[ -e "$TMP/x.gguf" ] && bad "a failed run wrote an adapter" || ok

# --mtp: a head trained on the model's own continuations, which serve, bench and mtp-merge take
LANES_LOG=error "$BIN" learn --mtp -m "$M" --data "$DATA/stories-train.jsonl" --eval "$DATA/stories-held.jsonl" --gen 32 --temp 1 \
	--steps 20 --batch 4 --lr 0.006 -t 2 -o "$TMP/head.gguf" > "$TMP/out" 2> "$TMP/err" && ok || bad "learn --mtp: $(cat "$TMP/err")"
grep -q "^learn --mtp: [0-9]* sequences ([0-9]* head rows, the model's continuations)" "$TMP/out" && ok || bad "--mtp summary: $(head -n 1 "$TMP/out")"
same "$(grep -c '^step [0-9]*/20  loss [0-9.]*  grad [0-9.]*' "$TMP/out")" 3 "--mtp progress lines (1, 10, 20)"
line=$(grep "^held-out: the head's first draft is the model's choice" "$TMP/out")
before=$(echo "$line" | sed -n 's/.*, loss \([0-9.]*\) -> \([0-9.]*\)$/\1/p')
after=$(echo "$line" | sed -n 's/.*, loss \([0-9.]*\) -> \([0-9.]*\)$/\2/p')
[ -n "$after" ] && awk -v b="$before" -v a="$after" 'BEGIN { exit !(a < b) }' && ok || bad "the head's held-out loss did not fall: '$line'"
grep -q "shards" "$TMP/out" && bad "the states fit --mtp-memory's default, yet the run was sharded" || ok
# states past --mtp-memory: the examples run through the model in shards, each pass again, and the head still learns
LANES_LOG=error "$BIN" learn --mtp -m "$M" --data "$DATA/stories-train.jsonl" --eval "$DATA/stories-held.jsonl" --gen 32 --temp 1 \
	--steps 20 --batch 4 --lr 0.006 -t 2 --mtp-memory 1MiB -o "$TMP/head2.gguf" > "$TMP/out" 2> "$TMP/err" && ok || bad "learn --mtp sharded: $(cat "$TMP/err")"
grep -q "^learn --mtp: the examples' states exceed --mtp-memory 1MiB: [0-9]* shards" "$TMP/out" && ok || bad "no shards: $(head -n 3 "$TMP/out")"
line=$(grep "^held-out: the head's first draft is the model's choice" "$TMP/out")
before=$(echo "$line" | sed -n 's/.*, loss \([0-9.]*\) -> \([0-9.]*\)$/\1/p')
after=$(echo "$line" | sed -n 's/.*, loss \([0-9.]*\) -> \([0-9.]*\)$/\2/p')
[ -n "$after" ] && awk -v b="$before" -v a="$after" 'BEGIN { exit !(a < b) }' && ok || bad "sharded: the head's held-out loss did not fall: '$line'"
expect_fail "--mtp-memory: 'lots' is not a size" "$BIN" learn --mtp -m "$M" --data "$DATA/stories-train.jsonl" --mtp-memory lots -o "$TMP/y.gguf"
LANES_LOG=error "$BIN" bench -m "$M" --draft-head "$TMP/head.gguf" --concurrent 1 --draft -n 64 -t 1 --text "Once upon a time" > "$TMP/out" 2> "$TMP/err" \
	&& ok || bad "bench --draft-head: $(cat "$TMP/err")"
grep -q "the MTP head's by position: [0-9]*%" "$TMP/out" && ok || bad "bench --draft-head: no MTP drafts: $(cat "$TMP/out")"
LANES_LOG=error "$BIN" mtp-merge -m "$M" --draft-head "$TMP/head.gguf" -o "$TMP/merged.gguf" > "$TMP/out" 2> "$TMP/err" && ok || bad "mtp-merge: $(cat "$TMP/err")"
"$BIN" info "$TMP/merged.gguf" > "$TMP/out" 2> /dev/null
grep -q "llama.nextn_predict_layers \[u32\] = 1" "$TMP/out" && grep -q "llama.block_count \[u32\] = 6" "$TMP/out" && grep -q "blk.5.nextn.eh_proj.weight" "$TMP/out" \
	&& ok || bad "the merged file's head: $(grep -E 'nextn|block_count' "$TMP/out" | head -n 4)"
expect_fail "the draft head follows a trunk of 5 layers, the model's has 4" "$BIN" mtp-merge -m "$SHARED/models/ref-llama-F32.gguf" --draft-head "$TMP/head.gguf" -o "$TMP/y.gguf"
expect_fail "the draft head is not an MTP head file" "$BIN" bench -m "$M" --draft-head "$M" --concurrent 1 -n 4
expect_fail "draft-head HEAD.gguf is required" "$BIN" mtp-merge -m "$M" -o "$TMP/y.gguf"
[ -e "$TMP/y.gguf" ] && bad "a failed merge wrote a file" || ok
echo "learn: $pass passed, $fail failed"
[ "$fail" = 0 ]
