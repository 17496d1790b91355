#!/usr/bin/env bash
# Regenerates the player page's bundle (web/pxplayer/player.js, its licence
# notice and bundle.json) from web/pxplayer/src with the npm packages that
# web/package-lock.json pins, building twice to prove the build
# reproducible. Commit the three files afterwards.
#
#   scripts/build-player.sh          rebuild and write
#   scripts/build-player.sh --check  fail unless the committed files are
#                                    exactly what a build makes now
set -euo pipefail
cd "$(dirname "$0")/../web"
[ -d node_modules/esbuild ] || npm ci --no-audit --no-fund --loglevel=error
exec node pxplayer/build.mjs "$@"
