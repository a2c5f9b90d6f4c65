#!/bin/sh
# bench/learn: LoRA training speed — `lanes learn` tokens/s (forward, backward, AdamW, commit)
# on each model given, over the stories fixture, and the held-out loss it reaches.
# usage: bench/learn.sh MODEL...   (LANES_LEARN_STEPS=4, LANES_LEARN_RANK=8, LANES_LEARN_BATCH=4,
#        LANES_LEARN_PIECE=512, LANES_BIN=build/lanes, LANES_BENCH_THREADS=2)
[ $# -gt 0 ] || { echo "usage: bench/learn.sh MODEL..."; exit 2; }
bin=${LANES_BIN:-build/lanes}
data="$(dirname "$0")/../tests/data/learn"
out=${LANES_TMP:-/tmp}/learn-bench.$$
mkdir -p "$out" || exit 1
trap 'rm -rf "$out"' EXIT
echo "| model | rank | steps x batch | piece | threads | tokens | tok/s | held-out loss |"
echo "|---|---|---|---|---|---|---|---|"
for m in "$@"; do
	LANES_LOG=error "$bin" learn -m "$m" --data "$data/stories-train.jsonl" --eval "$data/stories-held.jsonl" \
		--steps "${LANES_LEARN_STEPS:-4}" --batch "${LANES_LEARN_BATCH:-4}" --rank "${LANES_LEARN_RANK:-8}" \
		--piece "${LANES_LEARN_PIECE:-512}" -t "${LANES_BENCH_THREADS:-2}" -o "$out/a.gguf" > "$out/log" 2>&1 || { echo "$m: $(tail -n 1 "$out/log")"; continue; }
	sum=$(grep '^learn: .* steps, ' "$out/log")
	tokens=$(echo "$sum" | sed -n 's/.* steps, \([0-9]*\) tokens.*/\1/p')
	tps=$(echo "$sum" | sed -n 's/.*s (\([0-9.]*\) tok\/s).*/\1/p')
	held=$(sed -n 's/^held-out loss: \([0-9.]* -> [0-9.]*\).*/\1/p' "$out/log")
	echo "| $(basename "$m") | ${LANES_LEARN_RANK:-8} | ${LANES_LEARN_STEPS:-4} x ${LANES_LEARN_BATCH:-4} | ${LANES_LEARN_PIECE:-512} | ${LANES_BENCH_THREADS:-2} | $tokens | $tps | $held |"
done
