#!/bin/sh
# bench/experts: what the MoE expert observer costs — prompt and decode tok/s through the lane
# host with the observer on and off, runs interleaved (on, off, on, off ...) on one generated
# Mixtral-style file so both see the same machine; then `lanes experts` over a corpus of about
# 100k tokens in three domains (this repository's C sources, its docs, the chat templates).
# usage: bench/experts.sh [MODEL]  (default: `lanes gen --shape mixtral-mini --type Q4_0` into
#        build/bench-models; LANES_BIN, LANES_SHARED, LANES_BENCH_REPS=4, LANES_BENCH_THREADS=2,
#        LANES_EXPERTS_MODEL: the model for the corpus run, default MODEL)
bin=${LANES_BIN:-build/lanes}
shared=${LANES_SHARED:-../shared}
reps=${LANES_BENCH_REPS:-4}
threads=${LANES_BENCH_THREADS:-2}
model=$1
if [ -z "$model" ]; then
	mkdir -p build/bench-models || exit 1
	model=build/bench-models/mixtral-mini-Q4_0.gguf
	[ -s "$model" ] || "$bin" gen --shape mixtral-mini --type Q4_0 --vocab "$shared/vocab/ggml-vocab-llama-spm.gguf" -o "$model" >/dev/null ||
		{ echo "lanes gen failed"; exit 1; }
fi
field() { printf '%s' "$1" | sed -n "s/.*\"$2\": *\"\{0,1\}\([^,\"}]*\).*/\1/p"; }

# one stream (512-token prompt, 64 tokens) and four at once: prompt tok/s from the first token's
# time (one stream), decode tok/s after it; then the observer's own work, timed apart from the noise
echo "| run | observer | concurrent | prompt tok/s | decode tok/s | aggregate tok/s |"
echo "|---|---|---|---|---|---|"
for r in $(seq 1 "$reps"); do
	for m in 1 4; do
		for o in on off; do
			j=$("$bin" bench -m "$model" --concurrent "$m" --req-prompt 512 -n 64 -t "$threads" --experts "$o" --json 2>/dev/null) ||
				{ echo "| $r | $o | $m | failed | | |"; continue; }
			# one stream: its 513 prompt tokens over the time to its first token
			pp=-
			[ "$m" = 1 ] && pp=$(echo "scale=1; 513 * 1000 / $(field "$j" ttft_ms)" | bc)
			echo "| $r | $o | $m | $pp | $(field "$j" tg_tps) | $(field "$j" aggregate_tps) |"
		done
	done
done

[ -x build/bench/experts_bench ] && { echo; build/bench/experts_bench "$model" "$threads" 15 2>/dev/null; }

corpus=${TMPDIR:-/tmp}/lanes-experts-corpus.$$
mkdir -p "$corpus/code" "$corpus/docs" "$corpus/templates" || exit 1
for f in src/*/*.c; do cp "$f" "$corpus/code/$(echo "$f" | tr / _)"; done
cp docs/*.md README.md "$corpus/docs/"
cp "$shared"/chat-templates/* "$corpus/templates/" 2>/dev/null
em=${LANES_EXPERTS_MODEL:-$model}
t0=$(date +%s.%N)
"$bin" experts -m "$em" --corpus "$corpus" --tokens 34000 -t "$threads" --svg "$corpus.svg" > "$corpus.txt" 2> "$corpus.log" ||
	{ cat "$corpus.log"; exit 1; }
t1=$(date +%s.%N)
echo
grep "tokens of" "$corpus.log" | sed 's/^I experts: /lanes experts: /'
printf 'lanes experts: %.1f s in all (load, tokenize, run, report) on %s\n' "$(echo "$t1 - $t0" | bc)" "$(basename "$em")"
sed -n '/Jaccard/,$p' "$corpus.txt"
rm -rf "$corpus" "$corpus.txt" "$corpus.log" "$corpus.svg"
