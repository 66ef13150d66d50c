#!/usr/bin/env bash
# Builds promtool, prometheus, amtool, alertmanager and dashboard-check (tests/tools/go/grafana) from their Go
# modules, at the versions tests/tools/go/*/go.mod pin
# (the Prometheus and Alertmanager releases infra/addons/images.py runs), and prints the folder
# that holds them. Debian's promtool is built without Kubernetes service discovery, so it cannot
# check the rendered scrape configuration; this one can. prometheus and alertmanager run the Prometheus
# shards and Alertmanager in the cluster in a box (tests/e2e/prometheus.py, tests/e2e/alertmanager.py).
#
# Cached by content like scripts/build-binaries.sh: the folder's name hashes the Go modules and
# the Go version, under ${SUPERCLUSTER_CACHE:-~/.cache/supercluster}/bin, so only the first run on
# a machine pays the build (docs/monitoring.md gives the time). GOTOOLCHAIN=local; nothing but
# modules from the Go module proxy is downloaded.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cache-folder.sh"
cd "$(dirname "${BASH_SOURCE[0]}")/../tests/tools/go"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false"
command -v go >/dev/null || { echo "build-monitoring-tools: the Go toolchain is missing (https://go.dev/doc/install)" >&2; exit 1; }

cache=${SUPERCLUSTER_CACHE:-$HOME/.cache/supercluster}/bin
key=$( { echo monitoring-tools; go env GOVERSION; find prometheus alertmanager grafana -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) -print0 \
          | sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-16)
out="$cache/$key"
claim_cache_folder "$out"
started=$(date +%s)
echo "build-monitoring-tools: building promtool, prometheus, amtool, alertmanager and dashboard-check into $out" >&2
(cd prometheus && go build -trimpath -ldflags "-s -w" -o "$out/" \
   github.com/prometheus/prometheus/cmd/promtool github.com/prometheus/prometheus/cmd/prometheus)
(cd alertmanager && go build -trimpath -ldflags "-s -w" -o "$out/" \
   github.com/prometheus/alertmanager/cmd/amtool github.com/prometheus/alertmanager/cmd/alertmanager)
(cd grafana && go build -trimpath -ldflags "-s -w" -o "$out/dashboard-check" ./cmd/dashboard-check)
echo "build-monitoring-tools: built in $(( $(date +%s) - started )) s" >&2
touch "$out/.complete"
echo "$out"
