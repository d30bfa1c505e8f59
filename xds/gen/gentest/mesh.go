package gentest

// Mesh is one representative mesh: two namespaces of services with
// routing and traffic policy, a Sidecar resource, an egress ServiceEntry,
// an ingress gateway, a mesh gateway (AUTO_PASSTHROUGH, ISTIO_MUTUAL and
// OPTIONAL_MUTUAL servers), and security: STRICT mTLS in shop, auto-mTLS to
// ratings (one endpoint injected), ISTIO_MUTUAL to frontend, JWT
// authentication and an ALLOW policy for reviews, and a mesh-wide DENY.
// The golden files are generated against it (xds/gen/golden_test.go).
const Mesh = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews.shop.svc.cluster.local]
  addresses: [10.96.0.10]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints:
  - {address: 10.1.0.1, labels: {app: reviews, version: v1}, locality: us-east/a}
  - {address: 10.1.0.2, labels: {app: reviews, version: v2}, locality: us-east/b}
  - {address: 10.1.0.3, labels: {app: reviews, version: v2}, locality: us-west/a, weight: 2}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  addresses: [10.96.0.11]
  ports: [{number: 9080, name: http, protocol: HTTP}, {number: 5432, name: tcp-db, protocol: TCP}]
  location: MESH_INTERNAL
  resolution: STATIC
  endpoints:
  - {address: 10.1.1.1, labels: {app: ratings, security.istio.io/tlsMode: istio}, locality: us-east/a}
  - {address: 10.1.1.2, labels: {app: ratings}, locality: us-east/a}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: frontend, namespace: web}
spec:
  hosts: [frontend.web.svc.cluster.local]
  addresses: [10.96.1.10]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints:
  - {address: 10.2.0.1, labels: {app: frontend}, locality: us-east/a}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: payments-api, namespace: shop}
spec:
  hosts: [api.payments.example]
  ports: [{number: 443, name: tls, protocol: TLS}]
  location: MESH_EXTERNAL
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews
  trafficPolicy:
    loadBalancer: {simple: LEAST_REQUEST}
    connectionPool: {tcp: {maxConnections: 100}, http: {http2MaxRequests: 1000}}
    outlierDetection: {consecutive5xxErrors: 5, interval: 10s, baseEjectionTime: 30s}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}, trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews]
  http:
  - name: beta
    match: [{headers: {x-user: {exact: beta}}, uri: {prefix: /api}}]
    route: [{destination: {host: reviews, subset: v2}}]
    retries: {attempts: 3, perTryTimeout: 2s, retryOn: 5xx}
    fault: {delay: {fixedDelay: 100ms, percentage: {value: 10}}}
  - name: split
    route:
    - {destination: {host: reviews, subset: v1}, weight: 90}
    - {destination: {host: reviews, subset: v2}, weight: 10}
    timeout: 5s
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: web}
spec:
  egress: [{hosts: [./*, shop/reviews.shop.svc.cluster.local]}]
  outboundTrafficPolicy: {mode: REGISTRY_ONLY}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: public, namespace: web}
spec:
  selector: {istio: ingressgateway}
  servers:
  - {port: {number: 80, name: http, protocol: HTTP}, hosts: [shop.example.com], tls: {httpsRedirect: true}}
  - {port: {number: 443, name: https, protocol: HTTPS}, hosts: [shop.example.com], tls: {mode: SIMPLE, credentialName: shop-cert}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: public, namespace: web}
spec:
  hosts: [shop.example.com]
  gateways: [public]
  http:
  - match: [{uri: {prefix: /reviews}}]
    rewrite: {uri: /}
    route: [{destination: {host: reviews.shop.svc.cluster.local, port: {number: 9080}}}]
  - route: [{destination: {host: frontend.web.svc.cluster.local}}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: mesh-edge, namespace: istio-system}
spec:
  selector: {istio: eastwestgateway}
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    hosts: ["*.local"]
    tls: {mode: AUTO_PASSTHROUGH}
  - port: {number: 8443, name: https-mesh, protocol: HTTPS}
    hosts: [internal.shop.example]
    tls: {mode: ISTIO_MUTUAL}
  - port: {number: 8443, name: https-partner, protocol: HTTPS}
    hosts: [partner.shop.example]
    tls: {mode: OPTIONAL_MUTUAL, credentialName: partner-cert}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: internal, namespace: shop}
spec:
  hosts: [internal.shop.example, partner.shop.example]
  gateways: [istio-system/mesh-edge]
  http: [{route: [{destination: {host: ratings.shop.svc.cluster.local, port: {number: 9080}}}]}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: frontend, namespace: web}
spec:
  host: frontend.web.svc.cluster.local
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: shop}
spec: {mtls: {mode: STRICT}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: reviews-viewer, namespace: shop}
spec:
  selector: {matchLabels: {app: reviews}}
  rules:
  - from: [{source: {namespaces: [web]}}]
    to: [{operation: {methods: [GET], paths: ["/reviews*"]}}]
  - from: [{source: {requestPrincipals: [https://accounts.example.com/admin]}}]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: reviews-jwt, namespace: shop}
spec:
  selector: {matchLabels: {app: reviews}}
  jwtRules:
  - issuer: https://accounts.example.com
    audiences: [reviews]
    jwks: '{"keys":[{"kty":"RSA","kid":"k1","e":"AQAB","n":"sXch"}]}'
    fromHeaders: [{name: authorization, prefix: "Bearer "}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-blocked, namespace: istio-system}
spec:
  action: DENY
  rules: [{from: [{source: {ipBlocks: [203.0.113.0/24]}}]}]
`
