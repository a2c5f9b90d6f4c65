#!/bin/sh
# Runs every unit test binary and every tests/*.sh script; sums the results.
# Each test prints "name: N passed, M failed" as its last line, counting tests (not checks).
BUILD=${1:-build}
: "${LANES_SHARED:=../shared}"
export LANES_SHARED
export LANES_BIN="${LANES_BIN:-$BUILD/lanes}"
export LANES_TMP="${LANES_TMP:-$(mktemp -d)}"
pass=0; fail=0; broken=""
scripts=tests/script/*.sh
[ "${LANES_ONLY:-}" = c ] && scripts=""
for t in "$BUILD"/tests/test_* $scripts; do
	[ -e "$t" ] || continue
	t0=$(date +%s)
	log="$LANES_TMP/run-$(basename "$t").log"
	: >"$log"
	"$t" >>"$log" 2>&1 &
	tpid=$!
	# a test that reports as it goes ("name: ok  …" lines) is shown while it runs
	tail -s 0.1 -n +1 -f --pid=$tpid "$log" 2>/dev/null | grep --line-buffered -E '^[a-z0-9_.-]+: (ok|not ok)  '
	wait $tpid; rc=$?
	out=$(cat "$log")
	secs=$(( $(date +%s) - t0 ))
	line=$(printf '%s\n' "$out" | grep -E '^[a-z0-9_.-]+: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
	p=$(printf '%s' "$line" | sed -n 's/.*: \([0-9]*\) passed.*/\1/p'); f=$(printf '%s' "$line" | sed -n 's/.* \([0-9]*\) failed$/\1/p')
	[ -n "$p" ] || { p=0; f=1; }
	if [ $rc -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
	pass=$((pass + p)); fail=$((fail + f))
	if [ "$f" != 0 ]; then
		broken="$broken $(basename "$t")"
		printf '%s\n' "$out" | tail -n 40
		echo "FAIL $(basename "$t") (exit $rc, ${secs}s)"
	else
		echo "ok   $(basename "$t"): $p passed (${secs}s)"
	fi
done
rm -rf "$LANES_TMP"
[ -n "$broken" ] && echo "failing:$broken"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
