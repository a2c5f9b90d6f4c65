#!/bin/sh
# tests: `lanes template` from the command line — renders of ../shared/chat-templates compared
# byte for byte with expected.json, raise_exception as a non-zero exit with the message,
# templates read from GGUF vocab files with their bos token, and usage errors.
BIN=${LANES_BIN:-build/lanes}
SHARED=${LANES_SHARED:-../shared}
TMP=${LANES_TMP:-/tmp}/template.$$
CT="$SHARED/chat-templates"
. "$(dirname "$0")/lib/common.sh"

# Pulls one value out of expected.json: the CLI takes a JSON object as the whole context, and
# printing a string with {{ }} is the simplest thing the interpreter does (the unit test checks it).
extract() { # EXPR OUTFILE
	printf '{{ %s }}' "$1" > "$TMP/x.jinja"
	"$BIN" template --file "$TMP/x.jinja" --messages "$CT/expected.json" > "$2"
}

# Renders TEMPLATE over CONVERSATION (with +gen for the generation prompt) and compares bytes.
check_render() { # TEMPLATE CONVERSATION GEN
	key=$2
	gen=
	[ "$3" = gen ] && { key="$2+gen"; gen=--add-generation-prompt; }
	extract "conversations['$2']|tojson" "$TMP/msgs.json" || { bad "extract conversation $2"; return; }
	extract "renders['$1']['$key'].ok" "$TMP/want" || { bad "extract render $1 $key"; return; }
	if "$BIN" template --file "$CT/$1" --messages "$TMP/msgs.json" --bos '<s>' --eos '</s>' \
		--date 2026-12-02 $gen > "$TMP/got" 2> "$TMP/err" && cmp -s "$TMP/got" "$TMP/want"; then
		ok
	else
		bad "$1 [$key] differs: $(head -c 300 "$TMP/err")"
	fi
}

[ -f "$CT/expected.json" ] || { echo "template: no $CT/expected.json" >&2; echo "template: 0 passed, 1 failed"; exit 1; }
check_render google-gemma-2-2b-it.jinja single gen
check_render google-gemma-2-2b-it.jinja trailing_space
check_render meta-llama-Llama-3.2-3B-Instruct.jinja multi gen
check_render Qwen-Qwen2.5-7B-Instruct.jinja unicode gen
check_render mistralai-Mistral-Nemo-Instruct-2407.jinja multi
check_render CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja system gen
check_render meetkai-functionary-medium-v3.2.jinja trailing_space gen

# raise_exception: non-zero exit, the template's message, nothing on stdout
extract "conversations['system']|tojson" "$TMP/sys.json"
if "$BIN" template --file "$CT/google-gemma-2-2b-it.jinja" --messages "$TMP/sys.json" > "$TMP/got" 2> "$TMP/err"; then
	bad "gemma with a system message should fail"
else
	grep -q 'System role not supported' "$TMP/err" && ok || bad "gemma error message: $(cat "$TMP/err")"
	[ -s "$TMP/got" ] && bad "gemma error wrote to stdout" || ok
fi

# the prompt is printed exactly: no newline added
printf '[{"role": "user", "content": "Hi"}]' > "$TMP/hi.json"
printf '{{ bos_token }}[{{ messages[0].content }}]{{ eos_token }}' > "$TMP/t.jinja"
"$BIN" template --file "$TMP/t.jinja" --messages "$TMP/hi.json" > "$TMP/got" && [ "$(od -An -c "$TMP/got" | tr -d ' \n')" = '[Hi]' ] &&
	ok || bad "--file without --bos/--eos: got '$(cat "$TMP/got")'"
"$BIN" template --file "$TMP/t.jinja" --messages "$TMP/hi.json" --bos B --eos E > "$TMP/got" && [ "$(cat "$TMP/got")" = 'B[Hi]E' ] &&
	ok || bad "--bos/--eos: got '$(cat "$TMP/got")'"

# -m: the GGUF's own template, and its bos token by default
printf '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]' > "$TMP/m.json"
printf '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n' > "$TMP/want"
"$BIN" template -m "$SHARED/vocab/ggml-vocab-qwen2.gguf" --messages "$TMP/m.json" --add-generation-prompt > "$TMP/got" &&
	cmp -s "$TMP/got" "$TMP/want" && ok || bad "qwen2 vocab template: got '$(cat "$TMP/got")'"
printf '<s><|user|>\nHello<|end|>\n<|assistant|>\n' > "$TMP/want"
"$BIN" template -m "$SHARED/vocab/ggml-vocab-phi-3.gguf" --messages "$TMP/m.json" --add-generation-prompt > "$TMP/got" &&
	cmp -s "$TMP/got" "$TMP/want" && ok || bad "phi-3 vocab template with its bos: got '$(cat "$TMP/got")'"
# a GGUF without a template or ChatML's tokens falls back to plain text: the turns' texts
"$BIN" template -m "$SHARED/vocab/ggml-vocab-gpt-2.gguf" --messages "$TMP/hi.json" > "$TMP/got" &&
	[ "$(cat "$TMP/got")" = "Hi" ] && ok || bad "plain fallback: got '$(cat "$TMP/got")'"

# usage and input errors
"$BIN" template --messages "$TMP/hi.json" > /dev/null 2>&1; [ $? -eq 2 ] && ok || bad "no template source should exit 2"
"$BIN" template --file "$TMP/t.jinja" > /dev/null 2>&1; [ $? -eq 2 ] && ok || bad "no --messages should exit 2"
"$BIN" template --file "$TMP/none.jinja" --messages "$TMP/hi.json" > /dev/null 2>&1; [ $? -eq 1 ] && ok || bad "missing template file should exit 1"
printf '{%% for %%}' > "$TMP/bad.jinja"
"$BIN" template --file "$TMP/bad.jinja" --messages "$TMP/hi.json" > /dev/null 2> "$TMP/err"; [ $? -eq 1 ] && grep -q 'line 1' "$TMP/err" &&
	ok || bad "syntax error: $(cat "$TMP/err")"
printf 'not json' > "$TMP/bad.json"
"$BIN" template --file "$TMP/t.jinja" --messages "$TMP/bad.json" > /dev/null 2>&1; [ $? -eq 1 ] && ok || bad "bad messages JSON should exit 1"
"$BIN" template --file "$TMP/t.jinja" --messages "$TMP/hi.json" --date 2026-13-01 > /dev/null 2>&1; [ $? -eq 1 ] && ok || bad "bad --date should exit 1"

echo "template: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
