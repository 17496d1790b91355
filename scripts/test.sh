#!/usr/bin/env bash
# Runs every test of egbe-edge on a fresh machine: installs what the tests
# need (Debian chromium, redis-server and coturn, the npm packages under web/, Go
# modules), then vet, gofmt, the race-enabled test suite, and a short run of
# every native fuzz test.
#
#   scripts/test.sh                 everything
#   FUZZTIME=0 scripts/test.sh      skip the fuzz pass
#   FUZZTIME=30s scripts/test.sh    fuzz each target longer
#
# The default fuzz budget is a count of executions, not a duration: with a
# duration, Go's fuzz engine can report its own "context deadline exceeded"
# as a failure when a slow input is in flight at the deadline.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZTIME=${FUZZTIME:-3000x}
export GOFLAGS=${GOFLAGS:-}

step() { printf '\n== %s\n' "$*"; }

step "system packages"
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v turnserver >/dev/null 2>&1 || need+=(coturn)
command -v node >/dev/null 2>&1 || need+=(nodejs npm)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
# The browser, Redis and coturn tests fail loudly without these; say so early.
for bin in chromium redis-server turnserver node; do
  command -v "$bin" >/dev/null 2>&1 || { echo "missing $bin after install" >&2; exit 1; }
done
chromium --version || true
redis-server --version

step "npm packages (web/)"
(cd web && npm ci --no-audit --no-fund --loglevel=error)

step "Go modules"
go mod download
go mod verify

step "go vet"
go vet ./...

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './web/node_modules/*'))
if [ -n "$unformatted" ]; then echo "gofmt would change:"; echo "$unformatted"; exit 1; fi

step "go test -race"
mkdir -p artifacts
go test -race -count=1 -timeout 25m ./... 2>&1 | tee artifacts/test.log
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
  # The log's tail is often one goroutine dump; repeat what failed, and a
  # timed-out package's running tests, where a reader of the tail sees it.
  step "what failed (full log: artifacts/test.log)"
  grep -E -A3 '^(--- FAIL|FAIL|panic: )|running tests:' artifacts/test.log | grep -v '^\s*$' | head -80 || true
  exit "$status"
fi

if [ "$FUZZTIME" != "0" ]; then
  step "fuzz (each target: $FUZZTIME)"
  for pkg in $(go list ./...); do
    for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
      echo "-- $pkg $target"
      go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg"
    done
  done
fi
echo
echo "all tests passed"
