#!/bin/sh
# tests: `lanes tokenize` and `lanes detokenize` from the command line — a sample of every
# vocab's test vectors (the unit test runs them all), round trips through both commands, BOS
# and special-token switches, exact output (nothing added) and errors.
BIN=${LANES_BIN:-build/lanes}
SHARED=${LANES_SHARED:-../shared}
TMP=${LANES_TMP:-/tmp}/tokenize.$$
. "$(dirname "$0")/lib/common.sh"

# Splits a .inp file into $TMP/t<i>.txt: each text is followed by "\n__ggml_vocab_test__\n",
# so a text is the lines before a separator line joined by "\n". Prints the count.
split_inp() {
	rm -f "$TMP"/t*.txt
	awk -v dir="$TMP" '
		BEGIN { n = 0; t = ""; have = 0 }
		$0 == "__ggml_vocab_test__" { f = dir "/t" n ".txt"; printf "%s", t > f; close(f); n++; t = ""; have = 0; next }
		{ if (have) t = t "\n" $0; else { t = $0; have = 1 } }
		END { print n + 0 }' "$1"
}

for vocab in "$SHARED"/vocab/ggml-vocab-*.gguf; do
	name=$(basename "$vocab" .gguf)
	n=$(split_inp "$vocab.inp")
	[ "$n" -gt 0 ] || { bad "$name: no texts in $vocab.inp"; continue; }
	# Expected ids: " 1 2 3" -> "[1, 2, 3]".
	sed 's/^ *//; s/ *$//; s/ \{1,\}/, /g; s/^/[/; s/$/]/' "$vocab.out" > "$TMP/want"
	[ "$(wc -l < "$TMP/want")" -eq "$n" ] || bad "$name: $(wc -l < "$TMP/want") result lines for $n texts"
	# Texts with leading spaces, newlines only, emoji, Khmer, CJK and the long mixed one.
	for i in 0 2 7 10 12 18 21 22 28 32 43 45; do
		[ "$i" -lt "$n" ] || continue
		want=$(sed -n "$((i + 1))p" "$TMP/want")
		got=$("$BIN" tokenize -m "$vocab" --no-bos --no-parse-special < "$TMP/t$i.txt")
		same "$got" "$want" "$name text $i"
		case "$name" in
		*llama-spm|*gpt-2|*qwen2)
			# With BOS and special parsing on, detokenize restores the text byte for byte.
			"$BIN" tokenize -m "$vocab" < "$TMP/t$i.txt" > "$TMP/ids" &&
				"$BIN" detokenize -m "$vocab" < "$TMP/ids" > "$TMP/back"
			if cmp -s "$TMP/back" "$TMP/t$i.txt"; then ok; else bad "$name round trip of text $i"; fi
			;;
		esac
	done
done

spm="$SHARED/vocab/ggml-vocab-llama-spm.gguf"
qwen="$SHARED/vocab/ggml-vocab-qwen2.gguf"

# BOS as the vocab says, unless --no-bos; a trailing newline is part of the text.
same "$(printf 'Hello' | "$BIN" tokenize -m "$spm")" "[1, 15043]" "llama-spm BOS"
same "$(printf 'Hello' | "$BIN" tokenize -m "$spm" --no-bos)" "[15043]" "llama-spm --no-bos"
same "$(printf 'Hello\n' | "$BIN" tokenize -m "$spm")" "[1, 15043, 13]" "llama-spm trailing newline"
same "$(printf '' | "$BIN" tokenize -m "$spm")" "[1]" "llama-spm empty text"
same "$(printf '' | "$BIN" tokenize -m "$spm" --no-bos)" "[]" "llama-spm empty text, no BOS"
same "$(printf 'Hello' | "$BIN" tokenize -m "$qwen")" "[9707]" "qwen2 adds no BOS"

# Special tokens: parsed by default, plain text with --no-parse-special.
same "$(printf '<|im_start|>' | "$BIN" tokenize -m "$qwen")" "[151644]" "qwen2 <|im_start|> parsed"
got=$(printf '<|im_start|>' | "$BIN" tokenize -m "$qwen" --no-parse-special)
case "$got" in *151644*|"[]") bad "qwen2 --no-parse-special: got $got" ;; *", "*) ok ;; *) bad "qwen2 --no-parse-special: got $got" ;; esac
same "$(printf '<s>Hi</s>' | "$BIN" tokenize -m "$spm" --no-bos)" "[1, 6324, 2]" "llama-spm <s> </s> parsed"
printf '<|im_start|>user\nHi<|im_end|>\n' > "$TMP/chat"
"$BIN" tokenize -m "$qwen" --no-parse-special < "$TMP/chat" | "$BIN" detokenize -m "$qwen" > "$TMP/back"
if cmp -s "$TMP/back" "$TMP/chat"; then ok; else bad "qwen2 unparsed specials read back as text"; fi

# detokenize prints exactly the text: no newline added, control tokens only with --special.
printf '[15043, 3186]' | "$BIN" detokenize -m "$spm" > "$TMP/out"
same "$(wc -c < "$TMP/out" | tr -d ' ')" "11" "detokenize adds nothing"
same "$(cat "$TMP/out")" "Hello world" "detokenize text"
same "$(printf '[1, 15043, 2]' | "$BIN" detokenize -m "$spm" --special)" "<s> Hello</s>" "detokenize --special"
same "$(printf '[1, 15043, 2]' | "$BIN" detokenize -m "$spm" --keep-space)" " Hello" "detokenize --keep-space"
same "$(printf '[13]' | "$BIN" detokenize -m "$spm" | od -An -c | tr -d ' ')" '\n' "detokenize keeps a newline token"
same "$(printf '[]' | "$BIN" detokenize -m "$spm" | wc -c | tr -d ' ')" "0" "detokenize of no ids"

# Errors: bad ids, bad JSON, a missing model.
if printf '[15043, 32000]' | "$BIN" detokenize -m "$spm" > "$TMP/out" 2> "$TMP/err"; then
	bad "detokenize accepted id 32000"
else
	if [ -s "$TMP/out" ]; then bad "detokenize printed text for a bad id"; else ok; fi
	if grep -q "32000" "$TMP/err"; then ok; else bad "detokenize error does not name the id: $(cat "$TMP/err")"; fi
fi
if printf '[-1]' | "$BIN" detokenize -m "$spm" > /dev/null 2>&1; then bad "detokenize accepted id -1"; else ok; fi
if printf '[1, "a"]' | "$BIN" detokenize -m "$spm" > /dev/null 2>&1; then bad "detokenize accepted a string"; else ok; fi
if printf '{"a": 1}' | "$BIN" detokenize -m "$spm" > /dev/null 2>&1; then bad "detokenize accepted an object"; else ok; fi
if printf 'Hi' | "$BIN" tokenize -m "$TMP/no-such.gguf" > /dev/null 2>&1; then bad "tokenize without a model file"; else ok; fi
if printf 'Hi' | "$BIN" tokenize > /dev/null 2>&1; then bad "tokenize without -m"; else ok; fi

echo "tokenize: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
