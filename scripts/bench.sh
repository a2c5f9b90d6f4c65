#!/bin/sh
# make bench: per activation width (q16, q8) one table — prompt processing (pp512) and decode
# (tg128) tok/s per weight type on tinyllama-1.1b-shaped models, decode as a fraction of the
# read-bandwidth limit, and the peers' figures beside ours when LLAMA_BENCH=/path/to/llama-bench
# (llama.cpp) or IK_BENCH=/path/to/llama-bench (ik_llama.cpp, run with -rtr 1) point at one (each
# run right after ours on the same file, so all see the same machine); then `lanes bench
# --concurrent 1/4/16` in both widths on Q4_0, and stories260K, alone and one stream through
# `lanes serve`. Every figure is printed as measured; on a shared machine compare within one run.
BUILD=${1:-build}
: "${LANES_SHARED:=../shared}"
BIN="$BUILD/lanes"
MODELS="${LANES_BENCH_MODELS:-$BUILD/bench-models}"
TYPES="${LANES_BENCH_TYPES:-Q4_0 Q8_0 Q4_K_M Q6_K}"
THREADS="${LANES_BENCH_THREADS:-2}"
REPS="${LANES_BENCH_REPS:-3}"
ACTS="${LANES_BENCH_ACTS:-q16 q8}"
CONC="${LANES_BENCH_CONCURRENT:-1 4 16}"
CONC_N="${LANES_BENCH_CONCURRENT_N:-128}"
mkdir -p "$MODELS" || exit 1
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT

field() { printf '%s' "$1" | sed -n "s/.*\"$2\": *\"\{0,1\}\([^,\"}]*\).*/\1/p"; }
fmt() { [ -n "$1" ] && printf "$2" "$1" || printf "%${3:-8}s" -; }
ratio() { [ -n "$1" ] && [ -n "$2" ] && [ "$(echo "$2 > 0" | bc)" = 1 ] && echo "$1 / $2" | bc -l; }

# The probe runs before every type too and the best figure counts: on a shared machine
# a single probe can land in someone else's busy moment.
bw=$("$BUILD/bench/bw" "$THREADS")
bwN=$(field "$bw" bwN_gbs)
bw1=$(field "$bw" bw1_gbs)
echo "read bandwidth: $bw1 GB/s (1 thread), $bwN GB/s ($THREADS threads); $THREADS threads, $REPS repetitions; load average $(cut -d' ' -f1-3 /proc/loadavg)"
best_bw() { b=$(field "$("$BUILD/bench/bw" "$THREADS")" bwN_gbs); [ -n "$b" ] && [ "$(echo "$b > $bwN" | bc)" = 1 ] && bwN=$b; }
# The peers: name, binary, the flags of its best CPU setting. Said once, read by every table.
PEERS=
for p in "llama:$LLAMA_BENCH:" "ik:$IK_BENCH:-rtr 1"; do
	name=${p%%:*}; rest=${p#*:}; bin=${rest%%:*}; flags=${rest#*:}
	[ -n "$bin" ] || continue
	[ -x "$bin" ] || { echo "$(echo "$name" | tr a-z A-Z)_BENCH=$bin is not executable"; continue; }
	eval "PEER_BIN_$name=\$(realpath \"\$bin\")" && eval "PEER_FLAGS_$name=\$flags"
	PEERS="$PEERS $name"
done

# A peer's llama-bench pp and tg averages on a file, "PP TG"
# (run from the temporary folder: it looks for backends in its working directory)
peer() {
	m=$(realpath "$2")
	eval "pb=\$PEER_BIN_$1 pf=\$PEER_FLAGS_$1"
	# shellcheck disable=SC2086
	(cd "$TMP" && "$pb" -m "$m" -p "$3" -n "$4" -r "$REPS" -t "$THREADS" $pf -o json 2>/dev/null) | python3 -c '
import json,sys
d=json.load(sys.stdin)
pp=[x["avg_ts"] for x in d if x["n_prompt"]>0]; tg=[x["avg_ts"] for x in d if x["n_gen"]>0]
print(pp[0] if pp else "", tg[0] if tg else "")' 2>/dev/null
}

# bytes read per decoded token: every weight tensor but token_embd, of which one row
weight_bytes() {
	"$BIN" info --json "$1" | python3 -c '
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
print(tot)'
}

# Every type: ours in each width, then llama.cpp, one after the other on the same file.
for t in $TYPES; do
	f="$MODELS/tinyllama-1.1b-$t.gguf"
	if [ ! -s "$f" ]; then
		"$BIN" gen --shape tinyllama-1.1b --type "$t" --vocab "$LANES_SHARED/vocab/ggml-vocab-llama-spm.gguf" -o "$f" >/dev/null 2>&1 ||
			{ echo "$t: lanes gen failed"; continue; }
	fi
	best_bw
	echo "$(weight_bytes "$f") $(( $(stat -c %s "$f") / 1048576 )) $bwN" > "$TMP/$t.info"
	for a in $ACTS; do
		"$BIN" bench -m "$f" -p 512 -n 128 -r "$REPS" --threads "$THREADS" --activations "$a" --json 2>/dev/null > "$TMP/$t.$a" ||
			echo "$t: lanes bench --activations $a failed"
	done
	for p in $PEERS; do peer "$p" "$f" 512 128 > "$TMP/$t.$p"; done
done

for a in $ACTS; do
	echo
	echo "activations $a:"
	printf '%-7s %6s %7s %6s %8s %8s' type MiB kernels load_s pp512 tg128
	for p in $PEERS; do printf ' %8s %8s %6s %6s' "${p}_pp" "${p}_tg" "pp/$p" "tg/$p"; done
	printf ' %8s %7s' tg_limit tg/lim
	for p in $PEERS; do printf ' %9s' "$p/lim"; done
	echo
	for t in $TYPES; do
		[ -s "$TMP/$t.$a" ] || continue
		j=$(cat "$TMP/$t.$a")
		read -r wbytes size bwt < "$TMP/$t.info"
		pp=$(field "$j" pp_tps); tg=$(field "$j" tg_tps); ks=$(field "$j" kernels); load=$(field "$j" load_s)
		limit=$(echo "scale=1; $bwt * 1000000000 / $wbytes" | bc)
		printf '%-7s %6s %7s %6.2f %8.1f %8.1f' "$t" "$size" "$ks" "$load" "$pp" "$tg"
		for p in $PEERS; do
			read -r lpp ltg < "$TMP/$t.$p"
			printf ' %s %s %s %s' "$(fmt "$lpp" '%8.1f')" "$(fmt "$ltg" '%8.1f')" "$(fmt "$(ratio "$pp" "$lpp")" '%6.2f' 6)" \
				"$(fmt "$(ratio "$tg" "$ltg")" '%6.2f' 6)"
		done
		printf ' %8.1f %7.2f' "$limit" "$(echo "$tg / $limit" | bc -l)"
		for p in $PEERS; do
			read -r lpp ltg < "$TMP/$t.$p"
			printf ' %s' "$(fmt "$(ratio "$ltg" "$limit")" '%9.2f' 9)"
		done
		echo
	done
done
best_bw
echo "best read bandwidth seen: $bwN GB/s ($THREADS threads); tg_limit = bytes of weights read per token / the best bandwidth seen before each type"

# Batched decode: M requests of CONC_N tokens at once through the lane host, aggregate tok/s.
f="$MODELS/tinyllama-1.1b-Q4_0.gguf"
if [ -s "$f" ]; then
	echo
	echo "concurrent requests (tinyllama-1.1b Q4_0, $CONC_N tokens each, $THREADS threads): aggregate tok/s"
	printf '%-11s' activations
	for c in $CONC; do printf ' %8s' "c$c"; done
	printf ' %10s\n' "last/first"
	for a in $ACTS; do
		printf '%-11s' "$a"
		first=; last=
		for c in $CONC; do
			j=$("$BIN" bench -m "$f" --concurrent "$c" -n "$CONC_N" --threads "$THREADS" --activations "$a" --json 2>/dev/null)
			v=$(field "$j" aggregate_tps)
			printf ' %s' "$(fmt "$v" '%8.1f')"
			[ -z "$first" ] && first=$v
			last=$v
		done
		printf ' %s\n' "$(fmt "$(ratio "$last" "$first")" '%10.2f' 10)"
	done
fi

# stories260K: the small model, where fixed costs per token show.
s="$LANES_SHARED/models/stories260K.gguf"
if [ -s "$s" ]; then
	echo
	echo "stories260K (F32: both widths compute alike):"
	j=$("$BIN" bench -m "$s" -p 128 -n 256 -r "$REPS" --threads "$THREADS" --json 2>/dev/null)
	printf 'lanes      pp128 %8.1f  tg256 %8.1f\n' "$(field "$j" pp_tps)" "$(field "$j" tg_tps)"
	for p in $PEERS; do
		read -r lpp ltg <<EOF
$(peer "$p" "$s" 128 256)
EOF
		printf '%-10s pp128 %s  tg256 %s\n' "$p" "$(fmt "$lpp" '%8.1f')" "$(fmt "$ltg" '%8.1f')"
	done
	# one stream through HTTP (serve as it comes, streamed and not), what the server adds per
	# token beside the engine alone; lanes bench runs again after, and their mean counts
	if command -v node >/dev/null 2>&1; then
		h=$(node bench/http_load.mjs --bin "$BIN" --model "$s" --one-stream 256 --requests 5 --threads "$THREADS" --json 2>/dev/null)
		t2=$(field "$("$BIN" bench -m "$s" -p 0 -n 256 -r "$REPS" --threads "$THREADS" --json 2>/dev/null)" tg_tps)
		t1=$(field "$j" tg_tps)
		tg=$([ -n "$t1" ] && [ -n "$t2" ] && echo "($t1 + $t2) / 2" | bc -l)
		pl=$(field "$h" plain_tps)
		st=$(field "$h" stream_tps)
		printf 'HTTP, one stream     tg256 %s plain (%s of lanes bench), %s streamed (%s); lanes bench after: %s\n' \
			"$(fmt "$pl" '%.1f')" "$(fmt "$(ratio "$pl" "$tg")" '%.2f' 4)" "$(fmt "$st" '%.1f')" "$(fmt "$(ratio "$st" "$tg")" '%.2f' 4)" "$(fmt "$t2" '%.1f')"
	else
		echo "HTTP, one stream: node is needed"
	fi
fi

for v in llama-spm qwen2 gpt-2; do
	"$BUILD/bench/tok_bench" "$LANES_SHARED/vocab/ggml-vocab-$v.gguf" 2>/dev/null | tail -n 1
done
# constrained decoding: mask + accept per token along a JSON document, cold and warm
"$BUILD/bench/grammar_bench" "$LANES_SHARED/vocab/ggml-vocab-llama-spm.gguf" "$LANES_SHARED/vocab/ggml-vocab-qwen2.gguf"
# model load without and with a progress callback (the bar and /health's progress)
[ -s "$MODELS/tinyllama-1.1b-Q4_0.gguf" ] && "$BUILD/bench/load_bench" "$MODELS/tinyllama-1.1b-Q4_0.gguf" 5 2>/dev/null
