#!/bin/sh
# tests: `lanes run`, `lanes logits` and `lanes bench` from the command line — greedy text of
# every stories260K case, text = detokenized ids, -p = --ids, sampling repeatable by seed and
# independent of threads, logits files identical across threads and chunking (in both
# activation widths), bench JSON, and clear failures.
BIN=${LANES_BIN:-build/lanes}
SHARED=${LANES_SHARED:-../shared}
TMP=${LANES_TMP:-/tmp}/forward.$$
M="$SHARED/models/stories260K.gguf"
. "$(dirname "$0")/lib/common.sh"

# text.json: one line per case, "IDS<TAB>GREEDY" as comma lists; greedy stops before EOS (2).
awk '
	/"ids": \[/ { mode = "ids"; ids = ""; next }
	/"greedy": \[/ { mode = "greedy"; g = ""; stop = 0; next }
	/^ *\]/ { if (mode == "greedy") print ids "\t" g; mode = ""; next }
	mode != "" { v = $0; gsub(/[ ,]/, "", v)
		if (mode == "ids") ids = ids (ids == "" ? "" : ",") v
		else if (!stop) { if (v == "2") stop = 1; else g = g (g == "" ? "" : ",") v } }
' "$SHARED/golden/stories260K/text.json" > "$TMP/cases"
[ "$(wc -l < "$TMP/cases")" -ge 5 ] && ok || bad "text.json: $(wc -l < "$TMP/cases") cases parsed"

tab=$(printf '\t')
while IFS="$tab" read -r ids greedy; do
	"$BIN" run -m "$M" --ids "$ids" -n 64 --temp 0 --print-ids > "$TMP/out" 2> "$TMP/err" || bad "run failed: $(cat "$TMP/err")"
	same "$(tail -n 1 "$TMP/out")" "[$greedy]" "greedy ids for [$ids]"
	# The text before the ids line is exactly the ids detokenized (a continuation keeps its space).
	sed '$d' "$TMP/out" > "$TMP/text"
	printf '[%s]' "$greedy" | "$BIN" detokenize -m "$M" --keep-space > "$TMP/want" 2>/dev/null
	printf '\n' >> "$TMP/want"
	cmp -s "$TMP/text" "$TMP/want" && ok || bad "text for [$ids] differs from its detokenized ids"
done < "$TMP/cases"

# -p tokenizes with BOS: the same continuation as the ids of case 0.
first=$(head -n 1 "$TMP/cases")
ids0=${first%%"$tab"*}
g0=${first#*"$tab"}
same "$("$BIN" run -m "$M" -p "Once upon a time" -n 64 --temp 0 --print-ids 2>/dev/null | tail -n 1)" "[$g0]" "-p greedy"
same "$ids0" "1,403,407,261,378" "case 0 ids"

# Sampling: a seed fixes the text, whatever the thread count; other seeds differ.
a=$("$BIN" run -m "$M" --ids "$ids0" -n 48 --temp 1 --seed 5 --threads 1 --print-ids 2>/dev/null)
b=$("$BIN" run -m "$M" --ids "$ids0" -n 48 --temp 1 --seed 5 --threads 2 --print-ids 2>/dev/null)
c=$("$BIN" run -m "$M" --ids "$ids0" -n 48 --temp 1 --seed 6 --print-ids 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "seed 5: 1 and 2 threads differ"
[ "$a" != "$c" ] && ok || bad "seeds 5 and 6 gave the same text"
n=$("$BIN" run -m "$M" --ids "$ids0" -n 7 --temp 1 --seed 5 --print-ids 2>/dev/null | tail -n 1 | awk -F, '{ print NF }')
[ "$n" -le 7 ] && ok || bad "-n 7 generated $n ids"

# Logits: [positions][vocab] float32, identical across threads and chunking.
all="$ids0,$g0"
npos=$(printf '%s\n' "$all" | awk -F, '{ print NF }')
"$BIN" logits -m "$M" --ids "$all" -o "$TMP/l1" --threads 1 2>/dev/null || bad "logits failed"
"$BIN" logits -m "$M" --ids "$all" -o "$TMP/l2" --threads 2 --chunk 5 2>/dev/null || bad "logits failed"
same "$(wc -c < "$TMP/l1" | tr -d ' ')" "$((npos * 512 * 4))" "logits file size"
cmp -s "$TMP/l1" "$TMP/l2" && ok || bad "logits differ between 1 thread and 2 threads in chunks of 5"

# Bench: the JSON object names every figure.
j=$("$BIN" bench -m "$M" -p 16 -n 4 -r 2 --json 2>/dev/null)
for k in '"model": "stories260K.gguf"' '"type": "F32"' '"threads"' '"pp_tokens": 16' '"pp_tps"' '"pp_sd"' \
	'"tg_tokens": 4' '"tg_tps"' '"tg_sd"'; do
	case "$j" in *"$k"*) ok ;; *) bad "bench --json lacks $k: $j" ;; esac
done

# Bench figures a user can trust: every repetition produced the tokens it claims, its rate is
# its tokens over its seconds, the spread is over those rates, and one stream through the lane
# host is never faster than the kernels' fastest bare pass (a measured limit, not a speed; the
# slack covers that the limit is itself timed, on a machine others share: the median within
# 1.5 times it, no repetition past 3 times — the figures this guards against were thousands).
bench_why() {
	jb=$("$BIN" bench -m "$M" -p 16 -n 32 -r 3 --json 2>/dev/null)
	why=$(printf '%s' "$jb" | node -e '
	const o = JSON.parse(require("fs").readFileSync(0, "utf8")), out = [];
	const spread = (name, f, tokens) => {
		if (!f || !Array.isArray(f.reps) || f.reps.length !== 3) return out.push(`${name}: not 3 repetitions`);
		for (const r of f.reps) {
			if (r.tokens !== tokens) out.push(`${name}: a repetition of ${r.tokens} tokens, want ${tokens}`);
			if (!(r.seconds > 0) || Math.abs(r.tps - r.tokens / r.seconds) > 1e-4 * r.tps) out.push(`${name}: ${r.tps} tok/s is not ${r.tokens} / ${r.seconds} s`);
		}
		const t = f.reps.map((r) => r.tps).sort((a, b) => a - b);
		if (f.min !== t[0] || f.median !== t[1] || f.max !== t[2]) out.push(`${name}: spread ${f.min}/${f.median}/${f.max} of ${t}`);
	};
	spread("pp", o.pp, 16);
	spread("tg", o.tg, 31);
	if (!(o.tg_limit_tps > 0)) out.push("no tg_limit_tps");
	else if (o.tg && (o.tg.median > 1.5 * o.tg_limit_tps || o.tg.max > 3 * o.tg_limit_tps))
		out.push(`tg ${o.tg.median} (max ${o.tg.max}) tok/s is past the kernels limit of ${o.tg_limit_tps}`);
	if (!o.kernels || !(o.threads >= 1)) out.push("no kernels or threads");
	console.log(out.join("; "));
' 2>&1)
}
bench_why
# a busy machine can slow the limit's own passes: a real fault is past it again, noise is not
case "$why" in *"kernels limit"*) bench_why ;; esac
same "$why" "" "bench --json: $jb"
tb=$("$BIN" bench -m "$M" -p 16 -n 8 -r 2 --threads 1 2>/dev/null)
case "$tb" in *"| kernels | threads | test | t/s median | min | max |"*"| 1 | tg8 |"*"kernels' limit"*) ok ;; *) bad "bench table without its spread, kernels and threads: $tb" ;; esac
# -d: the prompt pass and the decode both after a context of D tokens, as llama-bench -d
td=$("$BIN" bench -m "$M" -p 16 -n 4 -d 40 -r 1 2>"$TMP/depth.err")
case "$td" in *"| pp16 @ 40 |"*"| tg4 @ 40 |"*) ok ;; *) bad "bench -d without pp and tg at the depth: $td" ;; esac
grep -q "filled 40 tokens" "$TMP/depth.err" && grep -q "pp16 at depth 40" "$TMP/depth.err" && ok || bad "bench -d did not fill the context once and run pp after it: $(cat "$TMP/depth.err")"

# Activation widths: q16 by default; q8 rounds a quantized model's activations to int8, so
# its logits differ from q16's, and stay the same across threads and chunking.
Q="$SHARED/models/ref-llama-Q4_0.gguf"
qids="1,20,300,41,5,66,7,88,9,100,11"
case "$j" in *'"activations": "q16"'*) ok ;; *) bad "bench --json lacks activations q16: $j" ;; esac
jq8=$("$BIN" bench -m "$Q" -p 8 -n 2 -r 1 --activations q8 --json 2>/dev/null)
case "$jq8" in *'"activations": "q8"'*) ok ;; *) bad "bench --activations q8 --json: $jq8" ;; esac
"$BIN" logits -m "$Q" --ids "$qids" -o "$TMP/q16" 2>/dev/null || bad "logits q16 failed"
"$BIN" logits -m "$Q" --ids "$qids" -o "$TMP/q8a" --activations q8 --threads 1 2>/dev/null || bad "logits q8 failed"
"$BIN" logits -m "$Q" --ids "$qids" -o "$TMP/q8b" --activations q8 --threads 2 --chunk 3 2>/dev/null || bad "logits q8 failed"
cmp -s "$TMP/q8a" "$TMP/q8b" && ok || bad "q8 logits differ between 1 thread and 2 threads in chunks of 3"
cmp -s "$TMP/q16" "$TMP/q8a" && bad "q8 logits equal q16's: the width did not take effect" || ok
a=$("$BIN" run -m "$Q" --ids "$qids" -n 12 --temp 1 --seed 3 --activations q8 --threads 1 --print-ids 2>/dev/null)
b=$("$BIN" run -m "$Q" --ids "$qids" -n 12 --temp 1 --seed 3 --activations q8 --threads 2 --print-ids 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "run --activations q8: 1 and 2 threads differ"

# gemma2, gemma3, phi3 and gpt-oss from lanes gen: info names the architecture; 40 positions (past
# the window of 16 of their local layers) give the same logits on 1 and 2 threads in chunks of 7, in
# the fused and the unfused attention, and training writes the same adapter on 1 and 2 threads.
gids=$(seq 3 42 | paste -sd, -)
printf '{"prompt": "Once upon", "completion": " a time"}\n' > "$TMP/g.jsonl"
for fam in gemma2 gemma3 phi3 gpt-oss; do
	G="$TMP/$fam.gguf"
	"$BIN" gen --shape $fam-test --type Q8_0 --vocab "$M" -o "$G" > /dev/null 2>&1 || bad "gen --shape $fam-test failed"
	"$BIN" info "$G" 2>/dev/null | grep -q "^architecture: $fam$" && ok || bad "info does not name $fam"
	for attn in fused unfused; do
		LANES_ATTN=$attn "$BIN" logits -m "$G" --ids "$gids" -o "$TMP/g1" --threads 1 2>/dev/null || bad "$fam logits ($attn) failed"
		LANES_ATTN=$attn "$BIN" logits -m "$G" --ids "$gids" -o "$TMP/g2" --threads 2 --chunk 7 2>/dev/null || bad "$fam logits ($attn) failed"
		same "$(wc -c < "$TMP/g1" | tr -d ' ')" "$((40 * 512 * 4))" "$fam logits file size ($attn)"
		cmp -s "$TMP/g1" "$TMP/g2" && ok || bad "$fam logits ($attn) differ between 1 thread and 2 threads in chunks of 7"
	done
	for t in 1 2; do
		"$BIN" learn -m "$G" --data "$TMP/g.jsonl" --steps 2 --batch 1 -t $t -o "$TMP/ga$t.gguf" > /dev/null 2> "$TMP/err" ||
			bad "learn on $fam (-t $t): $(cat "$TMP/err")"
	done
	cmp -s "$TMP/ga1.gguf" "$TMP/ga2.gguf" && ok || bad "$fam: the adapter trained on 1 thread differs from 2 threads'"
done

# phi3's LongRoPE: 80 positions (past its original context of 64) rotate by the long factors, so
# their first 40 rows differ from those of a 40-position run (the short ones).
lids=$(seq 3 82 | paste -sd, -)
"$BIN" logits -m "$TMP/phi3.gguf" --ids "$lids" -o "$TMP/p80" 2>/dev/null || bad "phi3 logits over 80 positions failed"
"$BIN" logits -m "$TMP/phi3.gguf" --ids "$gids" -o "$TMP/p40" 2>/dev/null || bad "phi3 logits over 40 positions failed"
head -c $((40 * 512 * 4)) "$TMP/p80" | cmp -s - "$TMP/p40" && bad "phi3: 80 positions rotate as 40 do" || ok

# An adapter lanes gen writes for phi3 leaves its fused gate-up out, and lanes applies it.
"$BIN" gen --lora 4 -m "$TMP/phi3.gguf" -o "$TMP/p3lora.gguf" > /dev/null 2>&1 || bad "gen --lora on phi3 failed"
"$BIN" logits -m "$TMP/phi3.gguf" --lora "$TMP/p3lora.gguf" --ids "$gids" -o "$TMP/p3l" 2> "$TMP/err" && ok ||
	bad "phi3 with an adapter: $(cat "$TMP/err")"

# IQ4_NL, IQ4_XS, TQ1_0, IQ2_XXS and MXFP4 files made here: logits the same on 1 thread in one
# chunk of 256 and on 2 threads in chunks of 1, in both widths.
for ft in IQ4_NL IQ4_XS TQ1_0 IQ2_XXS MXFP4; do
	"$BIN" quantize "$SHARED/models/ref-llama-F32.gguf" "$TMP/$ft.gguf" "$ft" > /dev/null 2>&1 || bad "quantize to $ft failed"
	for act in q16 q8; do
		"$BIN" logits -m "$TMP/$ft.gguf" --ids "$qids" -o "$TMP/$ft-a" --activations $act --threads 1 --chunk 256 2>/dev/null || bad "$ft logits failed"
		"$BIN" logits -m "$TMP/$ft.gguf" --ids "$qids" -o "$TMP/$ft-b" --activations $act --threads 2 --chunk 1 2>/dev/null || bad "$ft logits failed"
		[ -s "$TMP/$ft-a" ] && cmp -s "$TMP/$ft-a" "$TMP/$ft-b" && ok || bad "$ft $act logits differ between 1 thread whole and 2 threads in chunks of 1"
	done
done

# Grid types held compact (read in place, each tile gathered or expanded as a matmul reaches
# it): the logits of the expanded weights, bit for bit, whole and in chunks of 1 (the rows
# gathered), in both widths and every kernel set.
for ft in IQ2_XXS IQ2_S IQ3_S IQ1_M; do
	[ -s "$TMP/$ft.gguf" ] || "$BIN" quantize "$SHARED/models/ref-llama-F32.gguf" "$TMP/$ft.gguf" "$ft" > /dev/null 2>&1 || bad "quantize to $ft failed"
	for ks in $("$BIN" --version | sed -n 's/.*this CPU runs \(.*\))/\1/p'); do
		[ "$ks" = ref ] && continue
		for act in q16 q8; do
			for chunk in 256 1; do
				LANES_KERNELS=$ks "$BIN" logits -m "$TMP/$ft.gguf" --ids "$qids" -o "$TMP/$ft-x" --activations $act --chunk $chunk --compact-weights off 2>/dev/null || bad "$ft logits failed"
				LANES_KERNELS=$ks "$BIN" logits -m "$TMP/$ft.gguf" --ids "$qids" -o "$TMP/$ft-c" --activations $act --chunk $chunk --compact-weights on 2>/dev/null || bad "$ft compact logits failed"
				[ -s "$TMP/$ft-x" ] && cmp -s "$TMP/$ft-x" "$TMP/$ft-c" && ok || bad "$ft $ks $act chunk $chunk: compact logits differ from the expanded weights'"
			done
		done
	done
done

# Failures: a non-zero exit and a message naming the problem.
expect_fail() {
	want=$1
	shift
	if "$@" > /dev/null 2> "$TMP/err"; then bad "succeeded: $*"; else
		grep -q -- "$want" "$TMP/err" && ok || bad "'$*' said: $(cat "$TMP/err")"
	fi
}
expect_fail "outside the vocabulary" "$BIN" run -m "$M" --ids 1,600 -n 2
expect_fail "No such file" "$BIN" run -m "$TMP/none.gguf" --ids 1 -n 2
expect_fail "bad token id" "$BIN" logits -m "$M" --ids 1,x -o "$TMP/l3"
expect_fail "temp must be 0..2, not -1" "$BIN" run -m "$M" --ids 1 -n 2 --temp -1
expect_fail "kv must be f16s, f16, q8_0 or q4_0, not .q9." "$BIN" bench -m "$M" --kv q9
expect_fail "usage" "$BIN" run -m "$M" -n 2
expect_fail "activations must be q16 or q8, not .q4." "$BIN" logits -m "$M" --ids 1 -o "$TMP/l4" --activations q4
echo "forward: $pass passed, $fail failed"
[ "$fail" = 0 ]
