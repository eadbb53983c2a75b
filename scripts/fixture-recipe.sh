# Sourced by the node fixture generators (make-node-fixture.sh, make-docker-node-fixture.sh).
#
#   write_regenerate OUT_DIR DESCRIPTION COMMAND [ARG...]
#
# Writes OUT_DIR/regenerate.sh: the exact command (run from the repository's root) that made
# the node, so its recipe is committed beside it and the node is that command's cached output.
# The generators remove and rewrite the whole directory, so they write this file last.
write_regenerate() {
    local out="$1" what="$2"
    shift 2
    {
        echo '#!/usr/bin/env bash'
        echo "# $what."
        echo '# What it needs and how close a rerun comes: fixtures/README.md, "Regenerating".'
        echo '# Needs root; removes and rewrites this directory.'
        echo 'set -euo pipefail'
        # shellcheck disable=SC2016 # written for the script, expanded when it runs
        echo 'cd "$(dirname "${BASH_SOURCE[0]}")/../../.."'
        printf 'exec'
        printf ' %q' "$@"
        printf '\n'
    } > "$out/regenerate.sh"
    chmod 0755 "$out/regenerate.sh"
}
