#!/usr/bin/env bash
# The README's first two commands, as a newcomer types them on a fresh clone, read from the
# README itself so they cannot drift: the first (the demo plan on bundled data) is run verbatim
# and must print the plan and exit 4 (one container of the demo node restarts whatever we do);
# the second (every test) must be exactly what .ci/run runs. scripts/test.sh calls this.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The first fenced block of README.md, comments after the command stripped.
mapfile -t cmds < <(awk '/^```/{n++; next} n==1{print}' README.md | sed 's/[[:space:]]*#.*$//' | grep -v '^[[:space:]]*$')
[ "${#cmds[@]}" -eq 2 ] || { echo "readme-commands: README.md's first block holds ${#cmds[@]} commands, not 2" >&2; exit 1; }
demo="${cmds[0]}"
tests="${cmds[1]}"

echo "readme-commands: running README command 1 verbatim: $demo"
set +e
out="$(bash -c "$demo" 2>&1)"
code=$?
set -e
printf '%s\n' "$out"
if [ "$code" -ne 4 ]; then
    echo "readme-commands: README command 1 exited $code, not 4 (the plan with one container that restarts anyway)" >&2
    exit 1
fi
for want in "rewrite" "1.31"; do
    grep -q -- "$want" <<<"$out" || { echo "readme-commands: README command 1 printed no plan ('$want' missing)" >&2; exit 1; }
done

# .ci/run runs exactly README command 2.
grep -qxF "exec $tests" .ci/run || { echo "readme-commands: .ci/run does not run README command 2 ('$tests')" >&2; exit 1; }
echo "readme-commands: README command 1 printed the plan (exit 4); .ci/run runs README command 2 ($tests)"
