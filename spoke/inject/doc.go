// Package inject is the spoke's sidecar, proxyless and gateway injector: a
// mutating admission Reviewer (spoke/admission serves it at /inject) that
// adds nave-agent, and for the sidecar template Envoy and the traffic
// capture, to the pods the API server sends it — or, for the gateway
// template, makes the pod's istio-proxy container nave-agent running
// Envoy as a router — answering with a JSON patch. docs/injection.md is
// the user's reference: every label and annotation honoured, what is
// refused, the three templates.
//
// Selection is split as in Istio (docs/decisions/013-injection.md): the
// MutatingWebhookConfiguration's namespaceSelector and objectSelector
// decide from the namespace's labels (istio-injection=enabled,
// istio.io/rev=<revision>) and the pod's (sidecar.istio.io/inject), which
// the webhook never sees; the Injector re-checks what the pod and the
// request carry — the pod label and legacy annotation
// sidecar.istio.io/inject, istio.io/rev on the pod, the system namespaces,
// hostNetwork, an already injected pod — and leaves such a pod untouched
// (allowed, no patch). Re-injecting an injected pod is a no-op.
//
// The pod spec is the contract with nave-agent (spoke/agentconfig): its
// settings as NAVE_* environment variables, the downward-API volume, the
// projected token, the shared run directory.
package inject
