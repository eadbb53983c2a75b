#!/usr/bin/env bash
# Go bbolt's own tx.Check into .cache/bin/bbolt-check, run by the tests on every meta.db they
# write (boltfile/src/testing.rs); see scripts/setup-bbolt-tool.sh.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/setup-bbolt-tool.sh" check
