// A dashboard check: the rendered dashboards decoded by the Grafana Foundation SDK's dashboard
// model (generated from Grafana's own dashboard schema), strictly, and validated.
module supercluster.dev/tools/grafana

go 1.24.0

require github.com/grafana/grafana-foundation-sdk/go v0.0.18
