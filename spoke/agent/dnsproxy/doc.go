// Package dnsproxy is nave-agent's DNS proxy (Istio's DNS proxying,
// ISTIO_META_DNS_CAPTURE; docs/dns.md): it answers A and AAAA queries for
// the mesh's names from the name table the hub sends (shared/nds/v1) —
// including the short forms and search-path completions a pod's stub
// resolver asks for — and forwards every other query to the pod's
// upstream resolvers (/etc/resolv.conf). The sidecar capture
// (spoke/capture) redirects the pod's port 53 traffic to it.
//
// It never fails a lookup it cannot answer: an unknown name goes
// upstream, and an upstream's answer is passed on as it is; only when no
// upstream answers does the proxy answer SERVFAIL (decision 046).
package dnsproxy
