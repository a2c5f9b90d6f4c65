#!/bin/sh
# make bench: one table — prompt processing (pp512) and decode (tg128) tok/s per weight
# type on tinyllama-1.1b-shaped models, the read-bandwidth probe and the decode limit it
# implies, and llama.cpp's figures beside ours when LLAMA_BENCH=/path/to/llama-bench (run
# right after ours on the same file, so both see the same machine); then one stream through
# `lanes serve` beside `lanes bench` on stories260K, the tokenizers and constrained decoding.
BUILD=${1:-build}
: "${LANES_SHARED:=../shared}"
BIN="$BUILD/lanes"
MODELS="${LANES_BENCH_MODELS:-$BUILD/bench-models}"
TYPES="${LANES_BENCH_TYPES:-Q4_0 Q8_0 Q4_K_M Q6_K}"
THREADS="${LANES_BENCH_THREADS:-2}"
REPS="${LANES_BENCH_REPS:-3}"
mkdir -p "$MODELS" || exit 1

field() { printf '%s' "$1" | sed -n "s/.*\"$2\": *\"\{0,1\}\([^,\"}]*\).*/\1/p"; }

# The probe runs before every type too and the best figure counts: on a shared machine
# a single probe can land in someone else's busy moment.
bw=$("$BUILD/bench/bw" "$THREADS")
bwN=$(field "$bw" bwN_gbs)
bw1=$(field "$bw" bw1_gbs)
echo "read bandwidth: $bw1 GB/s (1 thread), $bwN GB/s ($THREADS threads); $THREADS threads, $REPS repetitions"
best_bw() { b=$(field "$("$BUILD/bench/bw" "$THREADS")" bwN_gbs); [ -n "$b" ] && [ "$(echo "$b > $bwN" | bc)" = 1 ] && bwN=$b; }
[ -n "$LLAMA_BENCH" ] && [ ! -x "$LLAMA_BENCH" ] && { echo "LLAMA_BENCH=$LLAMA_BENCH is not executable"; LLAMA_BENCH=; }

printf '%-7s %6s %7s %6s %8s %8s' type MiB kernels load_s pp512 tg128
[ -n "$LLAMA_BENCH" ] && printf ' %8s %8s %6s %6s' llama_pp llama_tg pp_x tg_x
printf ' %8s %7s' tg_limit tg/lim
[ -n "$LLAMA_BENCH" ] && printf ' %7s' llama/lim
echo
for t in $TYPES; do
	f="$MODELS/tinyllama-1.1b-$t.gguf"
	if [ ! -s "$f" ]; then
		"$BIN" gen --shape tinyllama-1.1b --type "$t" --vocab "$LANES_SHARED/vocab/ggml-vocab-llama-spm.gguf" -o "$f" >/dev/null 2>&1 ||
			{ echo "$t: lanes gen failed"; continue; }
	fi
	best_bw
	j=$("$BIN" bench -m "$f" -p 512 -n 128 -r "$REPS" --threads "$THREADS" --json 2>/dev/null)
	pp=$(field "$j" pp_tps)
	tg=$(field "$j" tg_tps)
	ks=$(field "$j" kernels)
	load=$(field "$j" load_s)
	[ -n "$pp" ] && [ -n "$tg" ] || { echo "$t: lanes bench failed"; continue; }
	# bytes read per token: every weight tensor but token_embd, of which one row
	wbytes=$("$BIN" info --json "$f" | python3 -c '
import json,sys
d=json.load(sys.stdin)
sizes={"F32":(1,4),"F16":(1,2),"BF16":(1,2),"Q4_0":(32,18),"Q4_1":(32,20),"Q5_0":(32,22),"Q5_1":(32,24),"Q8_0":(32,34),"Q2_K":(256,84),"Q3_K":(256,110),"Q4_K":(256,144),"Q5_K":(256,176),"Q6_K":(256,210)}
tot=0
for t in d["tensors"]:
    n=1
    for x in t["shape"]: n*=x
    b,s=sizes[t["type"]]; by=n//b*s
    if t["name"]=="token_embd.weight": by//=t["shape"][1]
    tot+=by
print(tot)')
	size=$(( $(stat -c %s "$f") / 1048576 ))
	limit=$(echo "scale=1; $bwN * 1000000000 / $wbytes" | bc)
	printf '%-7s %6s %7s %6.2f %8.1f %8.1f' "$t" "$size" "$ks" "$load" "$pp" "$tg"
	if [ -n "$LLAMA_BENCH" ]; then
		lj=$("$LLAMA_BENCH" -m "$f" -p 512 -n 128 -r "$REPS" -t "$THREADS" -o json 2>/dev/null)
		lpp=$(printf '%s' "$lj" | python3 -c 'import json,sys; d=json.load(sys.stdin); print([x["avg_ts"] for x in d if x["n_prompt"]>0][0])' 2>/dev/null)
		ltg=$(printf '%s' "$lj" | python3 -c 'import json,sys; d=json.load(sys.stdin); print([x["avg_ts"] for x in d if x["n_gen"]>0][0])' 2>/dev/null)
		printf ' %8.1f %8.1f %6.2f %6.2f' "${lpp:-0}" "${ltg:-0}" "$(echo "$pp / ${lpp:-1}" | bc -l)" "$(echo "$tg / ${ltg:-1}" | bc -l)"
	fi
	printf ' %8.1f %7.2f' "$limit" "$(echo "$tg / $limit" | bc -l)"
	[ -n "$LLAMA_BENCH" ] && printf ' %7.2f' "$(echo "${ltg:-0} / $limit" | bc -l)"
	echo
done
best_bw
echo "best read bandwidth seen: $bwN GB/s ($THREADS threads); tg_limit = bytes of weights read per token / $bwN GB/s at the time of each row"
# one stream through HTTP (serve as it comes, streamed and not) beside the engine alone, on
# stories260K, whose tiny rounds show what the server adds per token; bench runs before and after
one_stream() {
	sm="$LANES_SHARED/models/stories260K.gguf"
	command -v node >/dev/null 2>&1 && [ -d node_modules/openai ] || { echo "one stream: node and npm ci needed"; return; }
	t1=$(field "$("$BIN" bench -m "$sm" -p 0 -n 256 -r "$REPS" --threads "$THREADS" --json 2>/dev/null)" tg_tps)
	hj=$(node bench/http_load.mjs --bin "$BIN" --model "$sm" --one-stream 256 --requests 5 --threads "$THREADS" --json 2>/dev/null)
	t2=$(field "$("$BIN" bench -m "$sm" -p 0 -n 256 -r "$REPS" --threads "$THREADS" --json 2>/dev/null)" tg_tps)
	pl=$(field "$hj" plain_tps)
	st=$(field "$hj" stream_tps)
	[ -n "$t1" ] && [ -n "$t2" ] && [ -n "$pl" ] && [ -n "$st" ] || { echo "one stream: a run failed"; return; }
	tg=$(echo "($t1 + $t2) / 2" | bc -l)
	printf 'stories260K one stream: lanes bench tg256 %.0f tok/s (%.0f, %.0f); through HTTP %.0f plain (%.2f), %.0f streamed (%.2f)\n' \
		"$tg" "$t1" "$t2" "$pl" "$(echo "$pl / $tg" | bc -l)" "$st" "$(echo "$st / $tg" | bc -l)"
}
one_stream
for v in llama-spm qwen2 gpt-2; do
	"$BUILD/bench/tok_bench" "$LANES_SHARED/vocab/ggml-vocab-$v.gguf" 2>/dev/null | tail -n 1
done
# constrained decoding: mask + accept per token along a JSON document, cold and warm
"$BUILD/bench/grammar_bench" "$LANES_SHARED/vocab/ggml-vocab-llama-spm.gguf" "$LANES_SHARED/vocab/ggml-vocab-qwen2.gguf"
# model load without and with a progress callback (the bar and /health's progress)
[ -s "$MODELS/tinyllama-1.1b-Q4_0.gguf" ] && "$BUILD/bench/load_bench" "$MODELS/tinyllama-1.1b-Q4_0.gguf" 5 2>/dev/null
