#!/bin/sh
# tests: the `lanes` command line as users meet it — docs/cli.md's command table and reference
# equal the binary's `lanes help` and `lanes help --markdown`, every command's --help (and `lanes help CMD`) with a
# synopsis naming every option, bad values named with their range (flags and LANES_*
# variables), `lanes` alone, `lanes --version`, and the newline that ends text on a terminal.
BIN=${LANES_BIN:-build/lanes}
SHARED=${LANES_SHARED:-../shared}
TMP=${LANES_TMP:-/tmp}/cli.$$
M="$SHARED/models/stories260K.gguf"
DOC="$(dirname "$0")/../../docs/cli.md"
. "$(dirname "$0")/lib/common.sh"

# Runs ARGS into $TMP/out and $TMP/err; sets rc.
cli() { "$@" > "$TMP/out" 2> "$TMP/err"; rc=$?; }
# The error in $TMP/err must be exactly want (one line), exit 2, no usage dump.
refused() {
	want=$1
	shift
	cli "$@"
	same "$rc" 2 "$* exit code"
	same "$(head -n 1 "$TMP/err")" "$want" "$* message"
	grep -q "^usage:" "$TMP/err" && bad "$*: printed the usage instead of naming the problem" || ok
}

# docs/cli.md's generated reference is what the binary prints.
awk '/^<!-- BEGIN lanes help --markdown/ { g = 1; next } /^<!-- END lanes help --markdown/ { g = 0 } g' "$DOC" > "$TMP/doc"
"$BIN" help --markdown > "$TMP/gen"
same "$?" 0 "lanes help --markdown exit code"
[ -s "$TMP/doc" ] && ok || bad "docs/cli.md has no generated reference"
if cmp -s "$TMP/doc" "$TMP/gen"; then ok; else
	bad "docs/cli.md disagrees with \`lanes help --markdown\` (run scripts/cli-doc.sh): $(diff "$TMP/doc" "$TMP/gen" | head -n 8)"
fi

# docs/cli.md's command table is `lanes help`'s list, every command in it.
awk '/^<!-- BEGIN lanes help \(/ { g = 1; next } /^<!-- END lanes help -->/ { g = 0 } g' "$DOC" > "$TMP/doc"
"$BIN" help | sh "$(dirname "$0")/../../scripts/cli-doc.sh" --commands > "$TMP/gen"
[ "$(wc -l < "$TMP/gen")" -gt 10 ] && ok || bad "the command table made from lanes help is short: $(cat "$TMP/gen")"
if cmp -s "$TMP/doc" "$TMP/gen"; then ok; else
	bad "docs/cli.md's command table disagrees with \`lanes help\` (run scripts/cli-doc.sh): $(diff "$TMP/doc" "$TMP/gen" | head -n 8)"
fi

# `lanes` alone lists the commands on stderr and exits 2 (no command is a usage error);
# `lanes help` and `lanes --help` list them on stdout, exit 0.
cli "$BIN"
same "$rc" 2 "lanes alone: exit code"
[ ! -s "$TMP/out" ] && grep -q "^usage: lanes COMMAND" "$TMP/err" && ok || bad "lanes alone: no usage on stderr, or output on stdout"
cli "$BIN" --help
same "$rc" 0 "lanes --help: exit code"
cli "$BIN" help
same "$rc" 0 "lanes help: exit code"
cmds=$(sed -n 's/^  \([a-z-]*\)  .*/\1/p' "$TMP/out")
same "$(echo $cmds)" "info tokenize detokenize template quantize gen run logits learn bench serve plan pull ls rm experts mtp-merge" "lanes alone: the command list"

# Every command: --help exits 0, equals `lanes help CMD`, its synopsis names every option and
# stands in docs/cli.md, and each option is in the doc's table for that command.
for c in $cmds; do
	cli "$BIN" "$c" --help
	same "$rc" 0 "$c --help exit code"
	cp "$TMP/out" "$TMP/help"
	cli "$BIN" help "$c"
	same "$rc" 0 "help $c exit code"
	cmp -s "$TMP/out" "$TMP/help" && ok || bad "lanes help $c differs from lanes $c --help"
	usage=$(head -n 1 "$TMP/help")
	case "$usage" in "usage: lanes $c"*) ok ;; *) bad "$c --help starts '$usage'" ;; esac
	grep -qxF -- "$usage" "$DOC" && ok || bad "docs/cli.md lacks the synopsis of $c: $usage"
	section=$(awk -v h="### $c" '$0 == h { g = 1; next } /^### / { g = 0 } g' "$DOC")
	for o in $(sed -n '/^options:/,/^$/s/^  \([^ ]*\).*/\1/p' "$TMP/help"); do
		found=no
		for w in $(echo "$o" | tr '|' ' '); do
			case "$usage " in *" $w "* | *"($w "* | *"[$w "* | *"[$w]"*) found=yes ;; esac
		done
		[ "$o" = "-h|--help" ] || [ $found = yes ] && ok || bad "the synopsis of $c lacks $o"
		case "$section" in *"\`$(printf '%s' "$o" | sed 's/|/\\|/g')"*) ok ;; *) bad "docs/cli.md's $c table lacks $o" ;; esac
	done
done
cli "$BIN" help nosuch
same "$rc" 2 "help of an unknown command: exit code"
grep -q "lanes help: no command 'nosuch'" "$TMP/err" && ok || bad "help nosuch: $(head -n 1 "$TMP/err")"

# A bad value names the option (or variable) and its range or choices.
refused "lanes run: -n must be 0..16777216, not -5" "$BIN" run -m "$M" --ids 1 -n -5
refused "lanes run: --temp must be 0..2, not 9" "$BIN" run -m "$M" --ids 1 --temp 9
refused "lanes run: --top-k wants an integer in 0..2147483647, got 'x'" "$BIN" run -m "$M" --ids 1 --top-k x
refused "lanes plan: --lanes must be 1..64, not 0" "$BIN" plan -m "$M" --lanes 0
refused "lanes serve: --port must be 0..65535, not 70000" "$BIN" serve -m "$M" --port 70000
refused "lanes serve: --draft must be auto, off, ngram or mtp, not 'maybe'" "$BIN" serve -m "$M" --draft maybe
refused "lanes gen: --threads must be 0..1024, not 5000" "$BIN" gen --shape test --vocab "$M" -o "$TMP/g.gguf" --threads 5000
refused "lanes info: LANES_LOG must be error, warn, info or debug, not 'verbose'" env LANES_LOG=verbose "$BIN" info "$M"
refused "lanes run: LANES_ATTN must be fused or unfused, not 'half'" env LANES_ATTN=half "$BIN" run -m "$M" --ids 1 -n 1
refused "lanes serve: LANES_DRAIN_S must be 0..86400, not 90000" env LANES_DRAIN_S=90000 "$BIN" serve -m "$M"
refused "lanes serve: -m is given twice (a.gguf, then b.gguf): give it once" "$BIN" serve -m a.gguf -m b.gguf
refused "lanes run: --threads is given twice (1, then 2): give it once" "$BIN" run -m "$M" --ids 1 -t 1 --threads 2
refused "lanes: LANES_LOG must be error, warn, info or debug, not 'loud'" env LANES_LOG=loud "$BIN" --version
# a missing requirement or an unknown option: the message, then the synopsis
cli "$BIN" run -m "$M" --bogus
same "$rc" 2 "unknown option: exit code"
same "$(head -n 1 "$TMP/err")" "lanes run: unknown option '--bogus'" "unknown option message"
cli "$BIN" logits -m "$M" -o "$TMP/l"
same "$(head -n 1 "$TMP/err")" "lanes logits: --ids 1,2,3 is required" "missing --ids"
grep -q "^usage: lanes logits" "$TMP/err" && ok || bad "missing --ids: no synopsis"
# a fixed round cost needs the row's price beside it (serve refuses before it loads anything)
cli "$BIN" serve -m "$M" --port 0 --price-fixed-us 500
same "$rc" 2 "--price-fixed-us alone: exit code"
same "$(head -n 1 "$TMP/err")" "lanes serve: --price-fixed-us needs --price-row-us" "--price-fixed-us alone: message"
# LANES_LOG still gates the log
LANES_LOG=error "$BIN" run -m "$M" --ids 1 -n 2 --temp 0 > /dev/null 2> "$TMP/err"
[ ! -s "$TMP/err" ] && ok || bad "LANES_LOG=error still logged: $(head -n 2 "$TMP/err")"

# lanes info on a mixed file: each type it uses with its tensors and their bytes, text and JSON.
Q4KM="$SHARED/models/ref-llama-Q4_K_M.gguf"
cli "$BIN" info "$Q4KM"
same "$rc" 0 "info on a Q4_K_M file: exit code"
same "$(sed -n '/^types:/,$p' "$TMP/out" | tr -s ' ')" "types:
 F32 9 tensors 0.01 MiB
 Q4_K 25 tensors 1.51 MiB
 Q6_K 5 tensors 0.46 MiB" "info: the types of a Q4_K_M file"
cli "$BIN" info "$Q4KM" --json
grep -q '"types":\[{"type":"F32","tensors":9,"bytes":9216},{"type":"Q4_K","tensors":25,"bytes":1585152},{"type":"Q6_K","tensors":5,"bytes":483840}\]' "$TMP/out" && ok ||
	bad "info --json: the types of a Q4_K_M file: $(grep -o '"types":.*' "$TMP/out" | head -c 300)"

# --version: version and commit, kernel set, build flags.
cli "$BIN" --version
same "$rc" 0 "--version exit code"
grep -Eq "^lanes [^ ]+ \(commit ([0-9a-f]+|unknown)\)$" "$TMP/out" && ok || bad "--version first line: $(head -n 1 "$TMP/out")"
grep -Eq "^kernels: (ref|avx2|avx512) \(this CPU runs ref" "$TMP/out" && ok || bad "--version kernels: $(cat "$TMP/out")"
grep -Eq "^build: .*-std=c11" "$TMP/out" && ok || bad "--version build flags: $(cat "$TMP/out")"
cli env LANES_KERNELS=ref "$BIN" --version
grep -q "^kernels: ref " "$TMP/out" && ok || bad "--version under LANES_KERNELS=ref: $(sed -n 2p "$TMP/out")"

# On a terminal the text ends with a newline before the stats line; into a file it is exact.
ids="1,403,407,261,378"
"$BIN" run -m "$M" --ids "$ids" -n 8 --temp 0 > "$TMP/text" 2> /dev/null
[ -n "$(tail -c 1 "$TMP/text")" ] && ok || bad "the greedy text of this test ends with a newline already: pick another prompt"
if command -v script > /dev/null 2>&1; then
	script -qec "$BIN run -m $M --ids $ids -n 8 --temp 0" /dev/null > "$TMP/tty" 2>&1
	grep -q "^I run: prompt" "$TMP/tty" && ok || bad "on a terminal the stats line does not start a line: $(tr '\r' ' ' < "$TMP/tty" | tail -n 2)"
fi

echo "cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
