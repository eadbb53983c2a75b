#!/usr/bin/env bash
# Puts a results file of the real-node suite (target/real-kubelet/results.md, written by
# cli/tests/real_kubelet.rs) into docs/lab.md, between the markers of a block, so that the
# tables there are the suite's own output, never a hand copy:
#
#   scripts/lab-results-to-docs.sh BLOCK [RESULTS] [NOTE]
#
# BLOCK names the markers `<!-- lab-results:BLOCK -->` … `<!-- /lab-results:BLOCK -->` (both
# must be in docs/lab.md already); RESULTS defaults to target/real-kubelet/results.md under
# $CARGO_TARGET_DIR's parent checkout (the suite writes it beside the workspace's target/);
# NOTE, one line put above the tables (what was run, when).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
block="${1:?usage: lab-results-to-docs.sh BLOCK [RESULTS] [NOTE]}"
results="${2:-$here/target/real-kubelet/results.md}"
note="${3:-}"
doc="$here/docs/lab.md"
[ -s "$results" ] || { echo "lab-results-to-docs: no results in $results" >&2; exit 1; }
open="<!-- lab-results:$block -->"
close="<!-- /lab-results:$block -->"
grep -qxF "$open" "$doc" && grep -qxF "$close" "$doc" ||
    { echo "lab-results-to-docs: docs/lab.md has no block $block ($open … $close)" >&2; exit 1; }
tmp="$(mktemp "$doc.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
awk -v mopen="$open" -v mclose="$close" -v results="$results" -v note="$note" '
    $0 == mopen { print; if (note != "") { print note; print "" } while ((getline line < results) > 0) print line; skip = 1; next }
    $0 == mclose { skip = 0 }
    !skip { print }
' "$doc" > "$tmp"
mv "$tmp" "$doc"
echo "lab-results-to-docs: docs/lab.md block $block from $results"
