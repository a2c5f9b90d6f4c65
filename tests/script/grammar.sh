#!/bin/sh
# tests: `lanes run --grammar FILE` and `--json-schema FILE` — the text follows the grammar
# (through the lane host, as served), the same seed gives the same text, and a bad grammar or
# an unsupported schema keyword fails with a message naming where.
BIN=${LANES_BIN:-build/lanes}
SHARED=${LANES_SHARED:-../shared}
TMP=${LANES_TMP:-/tmp}/grammar.$$
M="$SHARED/models/stories260K.gguf"
. "$(dirname "$0")/lib/common.sh"

expect_fail() {
	want=$1
	shift
	if "$@" > "$TMP/out" 2> "$TMP/err"; then bad "$* succeeded"; else grep -q -- "$want" "$TMP/err" && ok || bad "$*: '$(cat "$TMP/err")' lacks '$want'"; fi
}

printf 'root ::= "The " ("cat" | "dog") " is " [a-z]{2,8} "."\n' > "$TMP/g.gbnf"
"$BIN" run -m "$M" -p "Once upon a time" -n 40 --temp 1 --seed 5 --grammar "$TMP/g.gbnf" > "$TMP/a" 2> "$TMP/err" && ok || bad "run --grammar: $(cat "$TMP/err")"
grep -Eq '^The (cat|dog) is [a-z]{2,8}\.$' "$TMP/a" && ok || bad "the text does not follow the grammar: '$(cat "$TMP/a")'"
"$BIN" run -m "$M" -p "Once upon a time" -n 40 --temp 1 --seed 5 --grammar "$TMP/g.gbnf" > "$TMP/b" 2> /dev/null
cmp -s "$TMP/a" "$TMP/b" && ok || bad "the same seed gave another text"

cat > "$TMP/s.json" <<'JSON'
{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
 "pet": {"enum": ["cat", "dog", null]}}, "required": ["name", "age", "pet"], "additionalProperties": false}
JSON
for seed in 1 2 3 4 5; do
	"$BIN" run -m "$M" -p "Once upon a time" -n 200 --temp 1 --seed $seed --json-schema "$TMP/s.json" > "$TMP/j" 2> "$TMP/err" || bad "run --json-schema: $(cat "$TMP/err")"
	python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert set(d) == {"name", "age", "pet"}, d
assert isinstance(d["name"], str) and len(d["name"]) <= 12, d
assert isinstance(d["age"], int) and 0 <= d["age"] <= 120, d
assert d["pet"] in ("cat", "dog", None), d
' "$TMP/j" && ok || bad "seed $seed: not valid against the schema: '$(cat "$TMP/j")'"
done

printf 'root ::= "a" (\n' > "$TMP/bad.gbnf"
expect_fail "line 2, column 1: expected ')'" "$BIN" run -m "$M" -p "Once" -n 5 --grammar "$TMP/bad.gbnf"
printf 'root ::= undefined-rule\n' > "$TMP/undef.gbnf"
expect_fail "undefined-rule" "$BIN" run -m "$M" -p "Once" -n 5 --grammar "$TMP/undef.gbnf"
echo '{"type": "object", "not": {"type": "string"}}' > "$TMP/not.json"
expect_fail "unsupported keyword 'not'" "$BIN" run -m "$M" -p "Once" -n 5 --json-schema "$TMP/not.json"
expect_fail "one of --grammar and --json-schema" "$BIN" run -m "$M" -p "Once" -n 5 --grammar "$TMP/g.gbnf" --json-schema "$TMP/s.json"
expect_fail "cannot read" "$BIN" run -m "$M" -p "Once" -n 5 --grammar "$TMP/missing.gbnf"
echo "grammar: $pass passed, $fail failed"
[ "$fail" = 0 ]
