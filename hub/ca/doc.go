// Package ca is the hub's certificate authority: one root of trust per
// mesh, the signing of workload (and, later, spoke) certificates under it,
// and Istio's certificate service (istio.v1.auth.IstioCertificateService)
// in front of it.
//
// # Roots of trust
//
// Each mesh has its own trust domain and its own CA, loaded by
// Authority.Load from a Store (DirStore: a directory per mesh; a Store on a
// Kubernetes Secret can implement the same two-method interface and be
// shared by hub replicas). A mesh's CA is, in order of preference:
//
//   - a plugged-in CA in Istio's cacerts layout (ca-cert.pem, ca-key.pem,
//     cert-chain.pem, root-cert.pem): the operator's intermediate signs,
//     after the Authority has checked that its key matches and that it
//     chains to root-cert.pem through cert-chain.pem;
//   - a root the hub generated earlier (root-cert.pem, root-key.pem);
//   - a root generated now: ECDSA P-256, CA:TRUE, ten years, subject
//     "CN=nave mesh root CA, OU=mesh <mesh>, O=<trust domain>", stored
//     with create-if-absent semantics so that concurrent starts end with
//     one root and every restart finds the same one.
//
// # Rotating a root
//
// A mesh's bundle holds several roots while a root is rotated in three
// steps (rotate.go, decision 031): AddRoot stores a new CA beside the
// current one (both roots trusted), SwitchRoot makes it sign (the old
// roots still trusted), DropRoot removes the old roots once their
// certificates expired. Each step is a compare-and-swap on the Store
// (Replacer: DirStore under its lock, SecretStore guarded by the Secret's
// resourceVersion); Refresh, which every replica runs periodically, swaps
// in a changed CA. The CA API answers the whole bundle as its last entry,
// as Istio's does, so agents learn a new root with their next certificate.
//
// # Certificates
//
// Authority.Sign checks a CSR strictly (certreq.Parse), allows only the SPIFFE
// IDs its caller was granted (spiffe://<td>/ns/<ns>/sa/<sa>, see ID), and
// issues a leaf for serverAuth and clientAuth with a short lifetime
// (24 h by default). Its chain is returned leaf first and root last, which
// is the order of Istio's CreateCertificate answer. Renewal (a
// shared/renewal Policy) says when the hub's own holders ask again.
//
// # Serving
//
// Server answers CreateCertificate for callers an Authorizer admits;
// PeerCertificateAuthorizer admits a workload renewing its own identity
// with the certificate it holds. Refusals are errors that say what and
// why, gRPC codes that say whose fault, a log line, and
// nave_hub_ca_refusals_total{reason}; issued certificates count in
// nave_hub_ca_certificates_issued_total.
package ca
