// Package observability holds the checks of nave's Grafana dashboard and Prometheus alert rules
// (deploy/observability): its test parses every PromQL expression with Prometheus's own parser
// and checks that each metric it names is one docs/metrics.md documents, used as its type allows.
// Nothing imports it.
package observability
