package enroll

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
)

// Store keeps a spoke's credentials between runs: a state dir (DirStore)
// or a Kubernetes Secret (SecretStore). The join token is single-use, so
// a spoke that loses its store must be given a new one.
type Store interface {
	// Load returns the stored credentials. Without any, its error wraps
	// ErrNotEnrolled; any other error is a store that holds credentials
	// it cannot use.
	Load(ctx context.Context) (*Credentials, error)
	// Save replaces the stored credentials with c, as a whole: a reader
	// sees the old credentials or the new, never a mix.
	Save(ctx context.Context, c *Credentials) error
	// String names the store in logs and errors.
	String() string
}

// DirStore is a state dir: identity.json, hub-ca.pem, trust-bundle.pem
// and credentials.pem (the key then the chain, 0600), written one by one
// atomically with the credentials last, so a dir with credentials is
// complete.
type DirStore string

// Load implements Store.
func (d DirStore) Load(context.Context) (*Credentials, error) { return Load(string(d)) }

// Save implements Store.
func (d DirStore) Save(_ context.Context, c *Credentials) error { return c.save(string(d)) }

func (d DirStore) String() string { return "state dir " + string(d) }

// blobs is c as the files of a state dir (or the keys of a Secret): name
// → content.
func (c *Credentials) blobs() (map[string][]byte, error) {
	id, err := json.MarshalIndent(identity{Mesh: c.Mesh, Cluster: c.Cluster, TrustDomain: c.TrustDomain}, "", "  ")
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.Certificate.PrivateKey)
	if err != nil {
		return nil, err
	}
	var creds bytes.Buffer
	_ = pem.Encode(&creds, &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	for _, der := range c.Certificate.Certificate {
		_ = pem.Encode(&creds, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	b := map[string][]byte{identityFile: append(id, '\n'), hubCAFile: c.HubCA, credentialsFile: creds.Bytes()}
	if len(c.TrustBundle) > 0 {
		b[trustBundleFile] = c.TrustBundle
	}
	return b, nil
}

// fromBlobs checks and assembles what blobs makes; where names the store
// in errors. Without credentials the error wraps ErrNotEnrolled.
func fromBlobs(b map[string][]byte, where string) (*Credentials, error) {
	if len(b[credentialsFile]) == 0 {
		return nil, fmt.Errorf("%s: %w (no %s)", where, ErrNotEnrolled, credentialsFile)
	}
	var id identity
	if err := json.Unmarshal(b[identityFile], &id); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", where, identityFile, err)
	}
	cert, err := tls.X509KeyPair(b[credentialsFile], b[credentialsFile])
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", where, credentialsFile, err)
	}
	c, err := newCredentials(id, cert, b[hubCAFile], b[trustBundleFile])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return c, nil
}
