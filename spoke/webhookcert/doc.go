// Package webhookcert gives the spoke's admission webhooks their serving
// certificate with no manual step (istiod's "Chiron" role), and keeps the
// caBundle of exactly the spoke's own webhook configurations current.
//
// The certificates come from a CA of the spoke's own, kept in one Secret
// of the spoke's namespace (webhook.caSecret), never from the hub or a
// mesh's CA: see docs/decisions/012-webhook-certificates.md for the trust
// argument. Every spoke replica runs a Manager:
//
//   - The first replica to find no Secret creates it with a new CA;
//     replicas racing to create it are ordered by the API server (one
//     Create succeeds, the others get AlreadyExists and use the winner's
//     CA).
//   - Each replica signs its own serving certificate (its key never leaves
//     the process) and renews it after half its validity
//     (webhook.certValidity).
//   - After half of its validity (webhook.caValidity) a CA gets a
//     successor, written by one replica (an Update conditioned on the
//     Secret's resourceVersion, so racers do not both rotate). The
//     successor is put in every caBundle at once but signs only after a
//     fifth of its span, and a CA stays in the bundle until it expires, so
//     every certificate any replica serves verifies against the bundle the
//     API server holds.
//   - The caBundle of each webhook configuration named in
//     Options.ValidatingConfigurations and Options.MutatingConfigurations
//     (the validation webhook's and the injector's) is set to the CAs of
//     the Secret that have not expired. The configuration carries the newest CA's
//     generation (annotation nave.io/webhook-ca-generation); a replica
//     whose view of the Secret is older never writes over a newer bundle,
//     and a new CA always takes a generation above the configuration's,
//     even after the Secret was deleted or corrupted.
//
// A restart loads the CA from the Secret and signs a new certificate; the
// caBundle does not change.
package webhookcert
