# tests/script: what every shell test shares — a C locale, a temporary folder $TMP (set by
# the caller, removed on exit), the pass/fail counters and the ok/bad/same checks.
export LC_ALL=C
mkdir -p "$TMP" || exit 1
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
same() { if [ "$1" = "$2" ]; then ok; else bad "$3: got '$1', want '$2'"; fi; }
