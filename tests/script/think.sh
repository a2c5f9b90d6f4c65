#!/bin/sh
# tests: `lanes run` with a reasoning model's options — --think-budget ends the thinking with the
# family's end marker exactly at the budget (the same on 1 and 2 threads), --think shows the
# thinking between Thinking... and ...done thinking. (dimmed on a terminal) and then the answer,
# --no-think closes the section in the prompt (the template's enable_thinking switch where it has
# one, else an empty section), and a model that does not think is an error for --think and
# --think-budget and a note for --no-think. stories260K thinks under a template that opens a
# <think> section, as DeepSeek-R1's does, or one with Qwen3's switch.
BIN=${LANES_BIN:-build/lanes}
SHARED=${LANES_SHARED:-../shared}
TMP=${LANES_TMP:-/tmp}/think.$$
M="$SHARED/models/stories260K.gguf"
. "$(dirname "$0")/lib/common.sh"

P="Once upon a time"
printf '%s' '{%- for m in messages %}{{ m.role }}: {{ m.content }}
{% endfor %}{% if add_generation_prompt %}assistant: <think>
{% endif %}' > "$TMP/r1.jinja"
printf '%s' '{%- for m in messages %}{{ m.role }}: {{ m.content }}
{% endfor %}{% if add_generation_prompt %}assistant:{% if enable_thinking is defined and enable_thinking is false %} <think>

</think>

{% endif %}{% endif %}' > "$TMP/q3.jinja"
printf '[{"role": "user", "content": "%s"}]' "$P" > "$TMP/turn.json"
printf '{"messages": [{"role": "user", "content": "%s"}], "enable_thinking": false}' "$P" > "$TMP/off.json"

# Runs `lanes run -m M -p P` with ARGS into $TMP/out and $TMP/err; sets rc.
run() { "$BIN" run -m "$M" -p "$P" "$@" > "$TMP/out" 2> "$TMP/err"; rc=$?; }
# The ids --print-ids ended $TMP/out with, space-separated.
ids() { tail -n 1 "$TMP/out" | tr -d '[]' | tr ',' ' '; }
# The words from $2 (1-based) of the list $1, $3 of them (all when not given).
words() { echo $1 | awk -v from="$2" -v k="${3:-100000}" '{ s = ""; for (i = from; i <= NF && i < from + k; i++) s = s (s ? " " : "") $i; print s }'; }
# The prompt tokens the run logged.
prompt_tokens() { sed -n 's/^I run: prompt \([0-9]*\) tokens.*/\1/p' "$TMP/err"; }

END=$(printf '</think>\n\n' | "$BIN" tokenize -m "$M" --no-bos | tr -d '[],')
k=$(echo $END | wc -w)
[ "$k" -ge 2 ] && ok || bad "the end marker encodes to '$END'"

# --think-budget: the end marker's tokens exactly at the budget, after the free reply's tokens.
run --chat-template "$TMP/r1.jinja" --temp 0 -n 20 --print-ids --think
same "$rc" 0 "free reply: exit code"
free=$(ids)
for b in 0 3 5; do
	run --chat-template "$TMP/r1.jinja" --temp 0 -n 20 --print-ids --think-budget $b
	same "$rc" 0 "--think-budget $b: exit code"
	got=$(ids)
	same "$(words "$got" 1 $b)" "$(words "$free" 1 $b)" "--think-budget $b: the thinking is the free reply's"
	same "$(words "$got" $((b + 1)) $k)" "$(echo $END)" "--think-budget $b: the end marker's tokens at $b"
done
# sampled: the same tokens on 1 and 2 threads
run --chat-template "$TMP/r1.jinja" -n 20 --print-ids --think-budget 4 --temp 0.9 --seed 5 -t 1
one=$(ids)
run --chat-template "$TMP/r1.jinja" -n 20 --print-ids --think-budget 4 --temp 0.9 --seed 5 -t 2
same "$(ids)" "$one" "--think-budget 4, sampled: 2 threads = 1 thread"
same "$(words "$one" 5 $k)" "$(echo $END)" "--think-budget 4, sampled: the end marker's tokens at 4"

# What --think shows: the reply's text split at the close marker, the thinking trimmed and
# framed, the answer after it; never a marker.
run --chat-template "$TMP/r1.jinja" --temp 0 -n 20 --print-ids --think-budget 3
printf '[%s]' "$(ids | tr ' ' ',')" | "$BIN" detokenize -m "$M" > "$TMP/raw"
node -e '
const raw = require("fs").readFileSync(process.argv[1], "utf8"), at = raw.indexOf("</think>");
process.stdout.write(`Thinking...\n${raw.slice(0, at).trim()}\n...done thinking.\n\n${raw.slice(at + 8).trimStart()}`);
' "$TMP/raw" > "$TMP/want"
run --chat-template "$TMP/r1.jinja" --temp 0 -n 20 --think-budget 3
same "$rc" 0 "--think-budget 3 shown: exit code"
cmp -s "$TMP/out" "$TMP/want" && ok || bad "--think-budget 3 shows '$(cat "$TMP/out")', want '$(cat "$TMP/want")'"
grep -q '<think>\|</think>' "$TMP/out" && bad "a marker was shown: $(cat "$TMP/out")" || ok
# thinking cut by -n: framed at its start, no footer
run --chat-template "$TMP/r1.jinja" --temp 0 -n 6 --think
same "$rc" 0 "--think: exit code"
same "$(head -n 1 "$TMP/out")" "Thinking..." "--think: the first line"
grep -q 'done thinking' "$TMP/out" && bad "--think cut by -n said it was done: $(cat "$TMP/out")" || ok
# on a terminal the thinking is dimmed, and the terminal's colour given back
if command -v script > /dev/null 2>&1; then
	script -qec "$BIN run -m $M -p '$P' --temp 0 -n 20 --think-budget 3 --chat-template $TMP/r1.jinja 2> /dev/null" /dev/null > "$TMP/tty"
	grep -q "$(printf '\033\\[2mThinking\\.\\.\\.')" "$TMP/tty" && grep -q "$(printf 'done thinking\\.\033\\[0m')" "$TMP/tty" && ok ||
		bad "on a terminal the thinking is not dimmed: $(od -c "$TMP/tty" | head -n 4)"
fi

# --no-think: the prompt is the rendered turn with an empty section closed after it, or what the
# template's switch writes; the reply is its greedy continuation, shown as it is.
nothink() { # TEMPLATE CONTEXT SUFFIX
	"$BIN" template --file "$1" --messages "$2" --add-generation-prompt > "$TMP/prompt"
	printf "$3" >> "$TMP/prompt"
	want_ids=$("$BIN" tokenize -m "$M" < "$TMP/prompt" | tr -d '[] ')
	"$BIN" run -m "$M" --ids "$want_ids" --temp 0 -n 12 --print-ids > "$TMP/out" 2> /dev/null
	want=$(ids)
	run --chat-template "$1" --temp 0 -n 12 --print-ids --no-think
	same "$rc" 0 "--no-think $1: exit code"
	same "$(ids)" "$want" "--no-think $1: the continuation of the closed prompt"
	same "$(prompt_tokens)" "$(echo "$want_ids" | tr ',' ' ' | wc -w)" "--no-think $1: the prompt's tokens"
	grep -q 'Thinking' "$TMP/out" && bad "--no-think $1 showed thinking" || ok
}
nothink "$TMP/r1.jinja" "$TMP/turn.json" '</think>\n\n'
nothink "$TMP/q3.jinja" "$TMP/off.json" ''

# A model that does not think: --think and --think-budget are errors, --no-think a note.
run --think
same "$rc" 2 "--think on a model that does not think: exit code"
grep -q "^lanes run: --think: this model does not think" "$TMP/err" && ok || bad "--think, no reasoning: $(grep -v '^I ' "$TMP/err")"
run --think-budget 2 --chat-template "$TMP/r1.jinja" --reasoning-format none
same "$rc" 2 "--think-budget with --reasoning-format none: exit code"
grep -q "^lanes run: --think-budget: this model does not think" "$TMP/err" && ok || bad "--think-budget, none: $(grep -v '^I ' "$TMP/err")"
run --no-think -n 4
same "$rc" 0 "--no-think on a model that does not think: exit code"
grep -q "^W run: --no-think: this model does not think" "$TMP/err" && ok || bad "--no-think, no reasoning: no note: $(cat "$TMP/err")"
# options that do not go together
run --think --no-think
same "$rc" 2 "--think --no-think: exit code"
"$BIN" run -m "$M" --ids 1,2 --think-budget 2 > /dev/null 2> "$TMP/err"
same "$?" 2 "--think-budget with --ids: exit code"
run --chat-template "$TMP/r1.jinja"
same "$rc" 2 "--chat-template without a thinking option: exit code"

echo "think: $pass passed, $fail failed"
[ "$fail" = 0 ]
