// Package gatewaycert serves gateways' credentialName certificates from
// Kubernetes Secrets of the spoke's own cluster (docs/gateways.md,
// decision 038): a gateway's private keys are read in its cluster and
// reach only its pod, never the hub.
//
// A gateway's nave-agent asks for the secrets its Envoy names (Envoy's SDS,
// SecretDiscoveryService.StreamSecrets, on the registration authority's
// listener) with its service-account token, as it asks for its workload
// certificate. For each stream the Server authenticates the token (the
// RA's TokenReview) and, for each requested name, resolves the Secret
// (Name), authorizes it by Istio's rules (Authorizer), watches exactly that
// Secret (one single-object watch per requested Secret, shared by the
// streams asking for it, dropped with the last one) and streams it as an
// Envoy secret whenever it changes, so a rotated Secret reaches the
// gateway without a restart. A name it cannot serve is left out of the
// answer (Envoy's listener keeps warming, as with Istio), and its reason is
// logged once, counted (nave_spoke_gateway_credential_refusals_total) and
// shown in /debug/gateway-credentials.
package gatewaycert
