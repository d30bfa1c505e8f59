// Package agent is nave's per-pod agent (docs/agent.md): it generates the
// workload's private key in the pod, obtains the workload certificate from
// the spoke's registration authority with the pod's service-account token,
// renews it before it expires, and hands it to the workload — by SDS over a
// Unix socket to an Envoy sidecar it runs as its child, or as grpc's
// file_watcher files for proxyless gRPC — together with the xDS bootstrap
// that points the workload at the hub. In envoy mode it also serves the
// other secrets Envoy names — a gateway's credentialName certificates —
// which it gets from the spoke (GatewayCredentials).
//
// The private key exists only in the agent's memory and, in grpc mode, in
// the pod's in-memory volume; it is never sent anywhere. A gateway's
// credentialName keys likewise stay in the agent's memory and its Envoy.
package agent
