#!/bin/sh
# Rewrites the generated part of docs/cli.md (every command's synopsis, options, defaults and
# ranges) from `lanes help --markdown`; tests/script/cli.sh fails while the two disagree.
BIN=${LANES_BIN:-build/lanes}
DOC=${1:-docs/cli.md}
BEGIN='<!-- BEGIN lanes help --markdown (scripts/cli-doc.sh writes this part) -->'
END='<!-- END lanes help --markdown -->'
"$BIN" help --markdown > "$DOC.gen" || exit 1
awk -v b="$BEGIN" -v e="$END" -v gen="$DOC.gen" '
	$0 == b { print; while ((getline l < gen) > 0) print l; skip = 1; next }
	$0 == e { skip = 0 }
	!skip' "$DOC" > "$DOC.new" && mv "$DOC.new" "$DOC"
rm -f "$DOC.gen"
