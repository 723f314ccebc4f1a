#!/usr/bin/env bash
# The main job: with bin/tandem built by `make build`, show what it offers.
# Later steps index the sample collection in testdata/ and search it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
"$ROOT/bin/tandem" --help
"$ROOT/bin/tandem" version
