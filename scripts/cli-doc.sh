#!/bin/sh
# Rewrites the generated parts of docs/cli.md — the command table from `lanes help`, and every
# command's synopsis, options, defaults and ranges from `lanes help --markdown`;
# tests/script/cli.sh fails while they disagree.
# --commands: `lanes help` on stdin as the markdown table of the commands
if [ "$1" = "--commands" ]; then
	printf '| command | what |\n|---|---|\n'
	sed -n 's/^  \([a-z-]*\)  *\(.*\)$/| `\1` | \2 |/p'
	exit 0
fi
BIN=${LANES_BIN:-build/lanes}
DOC=${1:-docs/cli.md}
# fill BEGIN END FILE: the lines between the markers BEGIN and END become FILE's
fill() {
	awk -v b="$1" -v e="$2" -v gen="$3" '
		$0 == b { print; while ((getline l < gen) > 0) print l; skip = 1; next }
		$0 == e { skip = 0 }
		!skip' "$DOC" > "$DOC.new" && mv "$DOC.new" "$DOC"
}
"$BIN" help | sh "$(dirname "$0")/cli-doc.sh" --commands > "$DOC.gen" || exit 1
fill '<!-- BEGIN lanes help (scripts/cli-doc.sh writes this table) -->' '<!-- END lanes help -->' "$DOC.gen"
"$BIN" help --markdown > "$DOC.gen" || exit 1
fill '<!-- BEGIN lanes help --markdown (scripts/cli-doc.sh writes this part) -->' '<!-- END lanes help --markdown -->' "$DOC.gen"
rm -f "$DOC.gen"
