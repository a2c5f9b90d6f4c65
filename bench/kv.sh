#!/bin/sh
# bench/kv: per KV type and attention (fused, unfused), at each context depth D: the prompt
# rate filling D tokens in pieces of 512, generation after them, and the peak RSS.
# usage: bench/kv.sh MODEL   (LANES_KV_DEPTHS="4096 16384", LANES_KV_TYPES="f16 q8_0 q4_0",
#        LANES_BIN=build/lanes, LANES_BENCH_THREADS=2)
model=${1:?usage: bench/kv.sh MODEL}
bin=${LANES_BIN:-build/lanes}
threads=${LANES_BENCH_THREADS:-2}
echo "| depth | kv | attention | fill tok/s | tg tok/s | peak RSS MiB |"
echo "|---|---|---|---|---|---|"
for d in ${LANES_KV_DEPTHS:-4096 16384}; do
	for t in ${LANES_KV_TYPES:-f16 q8_0 q4_0}; do
		for a in fused unfused; do
			# the block types always run fused
			case "$t:$a" in q*:unfused) continue ;; esac
			j=$(LANES_ATTN=$a "$bin" bench -m "$model" -p 0 -n 32 -r 1 -d "$d" -t "$threads" --kv-type "$t" --json 2>/dev/null) || {
				echo "| $d | $t | $a | failed | | |"
				continue
			}
			echo "$j" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const o=JSON.parse(s);
				console.log(`| ${o.depth} | ${o.kv} | ${o.attention} | ${o.fill_tps.toFixed(1)} | ${o.tg_tps.toFixed(2)} | ${o.peak_rss_mib.toFixed(0)} |`)})'
		done
	done
done
