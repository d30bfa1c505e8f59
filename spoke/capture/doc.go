// Package capture is the traffic capture of the sidecar template: the
// iptables rules that send a pod's TCP traffic through its Envoy, the
// equivalent of Istio's istio-iptables in REDIRECT mode. The capture init
// container that spoke/inject adds to a pod runs `nave-agent capture
// FLAGS`, which calls Main; the flags are Config.Args.
//
// Rules (nat table, Config.Rules):
//   - inbound TCP (PREROUTING) goes to the inbound port (15006), but for
//     the excluded inbound ports and, unless every port is included, the
//     ports not listed;
//   - outbound TCP (OUTPUT) goes to the outbound port (15001), but for
//     traffic of the proxy's uid and gid (1337: Envoy and the agent's own
//     connections to the hub and the registration authority), traffic to
//     loopback, the excluded outbound ports and CIDRs and, unless every
//     range is included, the destinations outside the included CIDRs;
//   - the proxy's own connections over loopback to a non-loopback address
//     of the pod (an app calling itself through its pod IP, routed by
//     Envoy) go to the inbound port, as Istio's do.
//   - with DNS capture (--redirect-dns, on when the pod's proxyMetadata sets
//     ISTIO_META_DNS_CAPTURE), UDP and TCP queries to port 53 of the pod's
//     resolvers (every port 53 with --capture-all-dns) go to the agent's
//     DNS proxy (15053), but for the proxy's uid and gid — the agent's own
//     queries upstream — and the raw table keeps the two legs in conntrack
//     zones of their own, as Istio's istio-iptables does.
//
// Rules is a pure function; Main applies its output with iptables-restore
// (and ip6tables-restore for IPv6), atomically per table, leaving other
// chains alone (--noflush).
package capture
