package ads

import (
	"context"
	"sort"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
)

// Secret discovery (SDS) over the ADS stream, for Envoy: the hub answers the
// two secrets the generated config names, "default" (the proxy's workload
// certificate and key) and "ROOTCA" (its mesh's roots), from the identity
// the stream authenticated with. The key is minted for the stream and never
// stored; a new certificate is minted and pushed when the current one is
// due for renewal. Other secret names (a gateway's credentialName) are not
// served by the hub: SotW leaves them out, delta reports them removed.

// Credential is a workload certificate minted for one stream.
type Credential struct {
	ChainPEM, KeyPEM, RootsPEM []byte
	// Serial names this certificate (the secrets' version); RenewAt is
	// when to mint the next one.
	Serial  string
	RenewAt time.Time
}

// SecretSource mints credentials for an authenticated identity. It must be
// safe for concurrent use.
type SecretSource interface {
	Mint(ctx context.Context, id WorkloadIdentity) (*Credential, error)
}

// sdsState is a stream's secrets: the credential and the renewal timer.
type sdsState struct {
	cred *Credential
	// secrets are cred's secrets by name, marshalled once per credential.
	secrets map[string]*anypb.Any
	timer   *time.Timer
	due     chan struct{} // capacity 1: a renewal is due
	ctx     context.Context
}

// secretsDue is signalled when the stream's certificate is due for
// renewal (its timer is armed only once the stream asked for secrets); nil
// (never ready) for a stream served none.
func (c *conn) secretsDue() <-chan struct{} {
	if c == nil || c.sds == nil {
		return nil
	}
	return c.sds.due
}

// credential returns the stream's credential, minting one if it has none or
// if renew is set.
func (c *conn) credential(renew bool) (*Credential, error) {
	if c.sds.cred != nil && !renew {
		return c.sds.cred, nil
	}
	cred, err := c.server.opts.Secrets.Mint(c.sds.ctx, c.identity)
	if err != nil {
		return nil, err
	}
	c.sds.cred, c.sds.secrets = cred, secretResources(cred)
	public := *cred
	public.KeyPEM = nil
	c.publicCred.Store(&public)
	if c.sds.timer != nil {
		c.sds.timer.Stop()
	}
	due := c.sds.due
	c.sds.timer = time.AfterFunc(time.Until(cred.RenewAt), func() {
		select {
		case due <- struct{}{}:
		default:
		}
	})
	c.server.log.Info("workload certificate minted for SDS", "conn", c.id, "identity", c.identity.Name, "serial", cred.Serial, "renew_at", cred.RenewAt.UTC().Format(time.RFC3339))
	return cred, nil
}

// secretResources are the secrets the hub serves, by name, for cred.
func secretResources(cred *Credential) map[string]*anypb.Any {
	inline := func(b []byte) *corev3.DataSource {
		return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
	}
	// A credential without a key (ProxyConfig's view) gives a secret
	// without one.
	tlsCert := &tlsv3.TlsCertificate{CertificateChain: inline(cred.ChainPEM)}
	if cred.KeyPEM != nil {
		tlsCert.PrivateKey = inline(cred.KeyPEM)
	}
	out := map[string]*anypb.Any{}
	for _, s := range []*tlsv3.Secret{
		{Name: build.WorkloadCertSecret, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: tlsCert}},
		{Name: build.RootCASecret, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: inline(cred.RootsPEM)}}},
	} {
		a, err := anypb.New(s)
		if err != nil {
			panic(err) // not reached: a Secret always marshals
		}
		out[s.GetName()] = a
	}
	return out
}

// secretsAvailable reports whether the stream can be served secrets: it
// authenticated an identity and the hub has a SecretSource.
func (c *conn) secretsAvailable() bool {
	if c.sds == nil {
		c.server.log.Debug("secrets requested, but the hub serves none to this stream (plaintext mode, or sds.mintKeys off): the proxy gets them from its agent (node metadata SDS_CLUSTER)", "conn", c.id)
		return false
	}
	return true
}

// handleSecrets answers a state-of-the-world SDS request.
func (c *conn) handleSecrets(stream sotwStream, req *discoveryv3.DiscoveryRequest) error {
	if !c.secretsAvailable() {
		return nil
	}
	c.mu.Lock()
	ts := c.secretState()
	if n := req.GetResponseNonce(); n != "" {
		if n != ts.nonce {
			c.mu.Unlock()
			return nil // stale
		}
		if e := req.GetErrorDetail(); e != nil {
			ts.nacked, ts.nackReason = ts.sentVersion, e.GetMessage()
			c.server.metrics.nacks.WithLabelValues(typeurl.Short(typeurl.Secret)).Inc()
			c.server.log.Warn("proxy rejected secrets", "conn", c.id, "version", ts.sentVersion, "reason", e.GetMessage())
		} else {
			ts.acked, ts.nacked, ts.nackReason = req.GetVersionInfo(), "", ""
		}
	}
	first := !ts.requested
	ts.requested = true
	changed := ts.subscribe(sharedNames, req.GetResourceNames(), first)
	c.mu.Unlock()
	if first || changed {
		return c.sendSecrets(stream, nil, false)
	}
	return nil
}

// handleSecretsDelta answers a delta SDS request.
func (c *conn) handleSecretsDelta(stream deltaStream, req *discoveryv3.DeltaDiscoveryRequest) error {
	if !c.secretsAvailable() {
		return nil
	}
	c.mu.Lock()
	ts := c.secretState()
	first := !ts.requested
	ts.requested = true
	if n := req.GetResponseNonce(); n != "" {
		c.settle(ts, typeurl.Secret, n, req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil)
	}
	changed := ts.subscribeDelta(sharedNames, req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe(), first)
	c.mu.Unlock()
	if first || changed {
		return c.sendSecrets(nil, stream, false)
	}
	return nil
}

// secretState is the stream's typeState for secrets (c.mu held).
func (c *conn) secretState() *typeState {
	ts := c.types[typeurl.Secret]
	if ts == nil {
		ts = &typeState{names: map[string]bool{}, sentHashes: map[string]string{}, pending: map[string]pendingResponse{}, absent: map[string]bool{}}
		c.types[typeurl.Secret] = ts
	}
	return ts
}

// sendSecrets sends the subscribed secrets on whichever stream is set:
// SotW all of them, delta those the proxy does not hold in this version
// (and, once, subscribed names the hub does not serve, as removed).
func (c *conn) sendSecrets(sotw sotwStream, delta deltaStream, renew bool) error {
	cred, err := c.credential(renew)
	if err != nil {
		c.server.log.Error("cannot mint a workload certificate for SDS; the proxy waits", "conn", c.id, "identity", c.identity.Name, "err", err)
		return nil
	}
	all := c.sds.secrets
	c.mu.Lock()
	ts := c.secretState()
	var names, removed []string
	for n := range all {
		if ts.wildcard || ts.names[n] {
			if delta == nil || ts.sentHashes[n] != cred.Serial {
				names = append(names, n)
			}
		}
	}
	if delta != nil {
		for n := range ts.names {
			if _, ok := all[n]; !ok && !ts.absent[n] {
				removed = append(removed, n)
				ts.absent[n] = true
			}
		}
		if len(names) == 0 && len(removed) == 0 && ts.answered {
			c.mu.Unlock()
			return nil
		}
		for _, n := range names {
			ts.sentHashes[n] = cred.Serial
		}
		ts.answered = true
	}
	sort.Strings(names)
	sort.Strings(removed)
	c.nonce++
	nonce := strconv.FormatUint(c.nonce, 10)
	ts.nonce, ts.sentVersion, ts.sentAt = nonce, cred.Serial, time.Now()
	if delta != nil {
		ts.pending[nonce] = pendingResponse{version: cred.Serial}
	}
	c.mu.Unlock()

	size := 0
	if delta != nil {
		resources := make([]*discoveryv3.Resource, len(names))
		for i, n := range names {
			resources[i] = &discoveryv3.Resource{Name: n, Version: cred.Serial, Resource: all[n]}
			size += proto.Size(all[n])
		}
		if _, err := delta.Send(&deltaResponse{DeltaDiscoveryResponse: &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: cred.Serial,
			Resources: resources, RemovedResources: removed, TypeUrl: typeurl.Secret, Nonce: nonce}}); err != nil {
			return err
		}
	} else {
		resources := make([]*anypb.Any, len(names))
		for i, n := range names {
			resources[i] = all[n]
			size += proto.Size(all[n])
		}
		if _, err := sotw.Send(&sotwResponse{DiscoveryResponse: &discoveryv3.DiscoveryResponse{VersionInfo: cred.Serial, Resources: resources, TypeUrl: typeurl.Secret, Nonce: nonce}}); err != nil {
			return err
		}
	}
	trig := "request"
	if renew {
		trig = "renewal"
	}
	c.server.metrics.pushes.WithLabelValues(typeurl.Short(typeurl.Secret), trig).Inc()
	c.server.metrics.bytes.WithLabelValues(typeurl.Short(typeurl.Secret)).Add(float64(size))
	return nil
}

// stopSecrets stops the renewal timer (the stream ended).
func (c *conn) stopSecrets() {
	if c.sds != nil && c.sds.timer != nil {
		c.sds.timer.Stop()
	}
}
