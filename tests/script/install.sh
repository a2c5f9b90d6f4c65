#!/bin/sh
# tests: `make install DESTDIR=… PREFIX=…` writes the binary, a man page for lanes and one per
# command, the bash and zsh completions, the systemd unit and the license, and nothing else;
# the pages render with man -l and list every option; the bash completion completes a command,
# a flag and a choice; the unit drains on stop; `make uninstall` removes every file it wrote.
BIN=${LANES_BIN:-build/lanes}
TMP=${LANES_TMP:-/tmp}/install.$$
. "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/../.." || exit 1
BUILD=$(dirname "$BIN")
# a make of our own, not the jobserver of the make that may be running us; the binary as built
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -o "$BUILD/lanes" BUILD="$BUILD" SANITIZE= "$@"; }

ROOT="$TMP/root"
mk install DESTDIR="$ROOT" PREFIX=/usr > "$TMP/make.log" 2>&1
same "$?" 0 "make install exit code ($(tail -n 3 "$TMP/make.log"))"
cmds=$("$BIN" help | sed -n 's/^  \([a-z]*\)  .*/\1/p')
want="/usr/bin/lanes /usr/lib/systemd/system/lanes.service /usr/share/bash-completion/completions/lanes"
want="$want /usr/share/doc/lanes/LICENSE /usr/share/man/man1/lanes.1 /usr/share/zsh/site-functions/_lanes"
for c in $cmds; do want="$want /usr/share/man/man1/lanes-$c.1"; done
got=$(cd "$ROOT" && find . -type f | sed 's/^\.//' | sort | tr '\n' ' ')
same "$got" "$(printf '%s\n' $want | sort | tr '\n' ' ')" "the files make install wrote"
[ -x "$ROOT/usr/bin/lanes" ] && ok || bad "the installed binary is not executable"
"$ROOT/usr/bin/lanes" --version > "$TMP/v" 2>&1 && grep -q '^lanes ' "$TMP/v" && ok || bad "the installed binary: $(cat "$TMP/v")"
grep -q '^MIT License' "$ROOT/usr/share/doc/lanes/LICENSE" && ok || bad "the license installed is not the MIT license"

# Every page renders without a warning; lanes(1) names each command's page, each command's page
# its synopsis and every option its --help lists.
for page in "$ROOT"/usr/share/man/man1/*.1; do
	MANWIDTH=200 man --warnings -l "$page" > "$TMP/page" 2> "$TMP/warn"
	same "$?" 0 "man -l $(basename "$page") exit code"
	[ ! -s "$TMP/warn" ] && ok || bad "man -l $(basename "$page") warns: $(head -n 3 "$TMP/warn")"
	grep -q '^NAME' "$TMP/page" && grep -q '^EXIT STATUS' "$TMP/page" && ok || bad "$(basename "$page") lacks NAME or EXIT STATUS"
done
MANWIDTH=200 man -l "$ROOT/usr/share/man/man1/lanes.1" > "$TMP/page" 2>&1
for c in $cmds; do grep -q "lanes-$c(1)" "$TMP/page" && ok || bad "lanes(1) does not name lanes-$c(1)"; done
for c in $cmds; do
	MANWIDTH=200 man -l "$ROOT/usr/share/man/man1/lanes-$c.1" > "$TMP/page" 2>&1
	grep -q "lanes-$c - " "$TMP/page" && ok || bad "lanes-$c(1) has no NAME line"
	"$BIN" help "$c" > "$TMP/help"
	for o in $(sed -n '/^options:/,/^$/s/^  \([^ ]*\).*/\1/p' "$TMP/help"); do
		tag=$(echo "$o" | sed 's/|/, /g')
		grep -q "^ *$tag\( \|\$\)" "$TMP/page" && ok || bad "lanes-$c(1) does not list $o"
	done
done

# The bash completion, loaded as bash-completion loads it: a command, a flag, a choice, help's argument.
complete_in_bash() {
	bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
		f=$(complete -p lanes | sed -n "s/.*-F \([^ ]*\) .*/\1/p"); [ -n "$f" ] || exit 3
		"$f" lanes "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"; printf "%s\n" "${COMPREPLY[@]}"' \
		sh "$ROOT/usr/share/bash-completion/completions/lanes" "$@"
}
same "$(complete_in_bash lanes se)" "serve" "bash: lanes se<TAB>"
same "$(complete_in_bash lanes serve --por)" "--port" "bash: lanes serve --por<TAB>"
same "$(complete_in_bash lanes run --temp 0 --top- | tr '\n' ' ')" "--top-k --top-p --top-nsigma " "bash: lanes run --temp 0 --top-<TAB>"
same "$(complete_in_bash lanes serve --kv-type q | tr '\n' ' ')" "q8_0 q4_0 " "bash: lanes serve --kv-type q<TAB>"
same "$(complete_in_bash lanes help ex)" "experts" "bash: lanes help ex<TAB>"
same "$(complete_in_bash lanes bench --dra | tr '\n' ' ')" "--draft --draft-head --draft-model " "bash: lanes bench --dra<TAB>"
if command -v zsh > /dev/null 2>&1; then
	zsh -n "$ROOT/usr/share/zsh/site-functions/_lanes" && ok || bad "the zsh completion does not parse"
fi

# The unit: the installed binary, a dynamic user, the models folder in its state, SIGTERM drains
# within the stop timeout (LANES_DRAIN_S plus the halt's grace).
U="$ROOT/usr/lib/systemd/system/lanes.service"
grep -qx 'ExecStart=/usr/bin/lanes serve -m ${MODEL} $LANES_ARGS' "$U" && ok || bad "the unit's ExecStart: $(grep ExecStart "$U")"
grep -qx 'DynamicUser=yes' "$U" && ok || bad "the unit has no DynamicUser=yes"
grep -q '^StateDirectory=.* lanes/models' "$U" && grep -q 'LANES_MODELS=%S/lanes/models' "$U" && ok || bad "the unit's models folder"
grep -qx 'KillSignal=SIGTERM' "$U" && ok || bad "the unit does not stop with SIGTERM (the drain)"
drain=$(sed -n 's/.*LANES_DRAIN_S=\([0-9]*\).*/\1/p' "$U")
stop=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)$/\1/p' "$U")
[ -n "$drain" ] && [ -n "$stop" ] && [ "$stop" -gt $((drain + 5)) ] && ok || bad "TimeoutStopSec=$stop leaves no time for LANES_DRAIN_S=$drain and the halt"
if command -v systemd-analyze > /dev/null 2>&1; then
	# installed for real under a prefix in $TMP, so the unit's paths and man pages exist
	mk install PREFIX="$TMP/prefix" > "$TMP/make2.log" 2>&1 || bad "make install PREFIX=: $(tail -n 3 "$TMP/make2.log")"
	MANPATH="$TMP/prefix/share/man" systemd-analyze verify "$TMP/prefix/lib/systemd/system/lanes.service" > "$TMP/verify" 2>&1 &&
		ok || bad "systemd-analyze verify: $(head -n 5 "$TMP/verify")"
fi

# uninstall leaves only the folders
mk uninstall DESTDIR="$ROOT" PREFIX=/usr > "$TMP/make.log" 2>&1
same "$?" 0 "make uninstall exit code ($(tail -n 3 "$TMP/make.log"))"
same "$(cd "$ROOT" && find . -type f)" "" "files left after make uninstall"

echo "install: $pass passed, $fail failed"
[ "$fail" = 0 ]
