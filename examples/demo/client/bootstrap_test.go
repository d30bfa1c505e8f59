package main

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/internal/x509test"
)

func TestMakeBootstrap(t *testing.T) {
	b, err := makeBootstrap("127.0.0.1:15010", "demo-client.demo", "default", "demo", nil)
	if err != nil {
		t.Fatal(err)
	}
	var got any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	var want any
	if err := json.Unmarshal([]byte(`{
		"xds_servers": [{"server_uri": "127.0.0.1:15010", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "demo-client.demo", "metadata": {"MESH": "default", "NAMESPACE": "demo"}}
	}`), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("bootstrap %s", b)
	}
}

func TestMakeBootstrapTLS(t *testing.T) {
	b, err := makeBootstrap("127.0.0.1:15010", "demo-client.demo", "default", "demo",
		&tlsFiles{CACertificateFile: "/hub/ca.pem", CertificateFile: "/c/cert-chain.pem", PrivateKeyFile: "/c/key.pem"})
	if err != nil {
		t.Fatal(err)
	}
	var got any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	var want any
	if err := json.Unmarshal([]byte(`{
		"xds_servers": [{"server_uri": "127.0.0.1:15010", "server_features": ["xds_v3"], "channel_creds": [{"type": "tls", "config": {
			"ca_certificate_file": "/hub/ca.pem", "certificate_file": "/c/cert-chain.pem", "private_key_file": "/c/key.pem"}}]}],
		"node": {"id": "demo-client.demo", "metadata": {"MESH": "default", "NAMESPACE": "demo"}},
		"certificate_providers": {"default": {"plugin_name": "file_watcher", "config": {
			"certificate_file": "/c/cert-chain.pem", "private_key_file": "/c/key.pem", "ca_certificate_file": "/c/root-cert.pem", "refresh_interval": "60s"}}}
	}`), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("bootstrap %s", b)
	}
}

func TestBootstrapEnv(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(file, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	content, err := makeBootstrap("hub:1", "n1", "default", "demo", nil)
	if err != nil {
		t.Fatal(err)
	}
	const xdsTarget = "xds:///echo.demo.svc.cluster.local:7070"
	hubCA, meshCA := x509test.NewAuthority("hub serving CA"), x509test.NewAuthority("mesh root")
	hubCAFile := filepath.Join(t.TempDir(), "hub-ca.pem")
	if err := os.WriteFile(hubCAFile, hubCA.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	certDir := writeCertDir(t, meshCA, "spiffe://cluster.local/ns/demo/sa/demo-client", time.Hour)
	expiredDir := writeCertDir(t, meshCA, "spiffe://cluster.local/ns/demo/sa/demo-client", -time.Minute)
	tlsContent, err := makeBootstrap("hub:1", "n1", "default", "demo", &tlsFiles{CACertificateFile: hubCAFile,
		CertificateFile: filepath.Join(certDir, certChainFile), PrivateKeyFile: filepath.Join(certDir, keyFile)})
	if err != nil {
		t.Fatal(err)
	}
	withTLS := func(o options, dir, ca string) options {
		o.xdsCertDir, o.xdsCAFile = dir, ca
		return o
	}
	hubOpts := options{target: xdsTarget, hub: "hub:1", nodeID: "n1", mesh: "default", namespace: "demo"}
	otherNS := hubOpts
	otherNS.namespace = "prod"

	for _, tc := range []struct {
		name    string
		opts    options
		env     map[string]string
		want    *envVar
		wantErr string
	}{
		{
			name: "bootstrap file, not yet in the environment",
			opts: options{target: xdsTarget, bootstrap: file},
			want: &envVar{bootstrapFileEnv, file},
		},
		{
			name: "bootstrap file, already in the environment",
			opts: options{target: xdsTarget, bootstrap: file},
			env:  map[string]string{bootstrapFileEnv: file},
		},
		{
			name:    "bootstrap file that does not exist",
			opts:    options{target: xdsTarget, bootstrap: file + ".missing"},
			wantErr: "--bootstrap",
		},
		{
			name: "hub and node id",
			opts: options{target: xdsTarget, hub: "hub:1", nodeID: "n1", mesh: "default", namespace: "demo"},
			want: &envVar{bootstrapContentEnv, string(content)},
		},
		{
			name: "hub and node id, already in the environment",
			opts: options{target: xdsTarget, hub: "hub:1", nodeID: "n1", mesh: "default", namespace: "demo"},
			env:  map[string]string{bootstrapContentEnv: string(content)},
		},
		{
			name: "hub and node id, but a bootstrap file set too would win",
			opts: options{target: xdsTarget, hub: "hub:1", nodeID: "n1", mesh: "default", namespace: "demo"},
			env:  map[string]string{bootstrapContentEnv: string(content), bootstrapFileEnv: file},
			want: &envVar{bootstrapContentEnv, string(content)},
		},
		{
			name: "hub and node id over mTLS",
			opts: withTLS(hubOpts, certDir, hubCAFile),
			want: &envVar{bootstrapContentEnv, string(tlsContent)},
		},
		{
			name:    "mTLS certificate of another namespace than --namespace",
			opts:    withTLS(otherNS, certDir, hubCAFile),
			wantErr: "does not match the certificate's namespace demo",
		},
		{
			name:    "mTLS without a certificate in the directory",
			opts:    withTLS(hubOpts, t.TempDir(), hubCAFile),
			wantErr: "--xds-cert-dir",
		},
		{
			name:    "mTLS with an expired certificate",
			opts:    withTLS(hubOpts, expiredDir, hubCAFile),
			wantErr: "expired",
		},
		{
			name:    "mTLS with a CA file that holds no certificate",
			opts:    withTLS(hubOpts, certDir, filepath.Join(certDir, keyFile)),
			wantErr: "--xds-ca-file",
		},
		{
			name:    "hub without node id",
			opts:    options{target: xdsTarget, hub: "hub:1"},
			wantErr: "together",
		},
		{
			name:    "xds target and no bootstrap anywhere",
			opts:    options{target: xdsTarget},
			wantErr: "needs an xDS bootstrap",
		},
		{
			name: "xds target and a bootstrap from the environment",
			opts: options{target: xdsTarget},
			env:  map[string]string{bootstrapFileEnv: file},
		},
		{
			name: "direct target needs none",
			opts: options{target: "127.0.0.1:17071"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bootstrapEnv(tc.opts, func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// writeCertDir writes a workload certificate for the SPIFFE ID uri, issued by ca and valid
// for ttl more (expired when negative), as navectl cert issue does: cert-chain.pem (leaf,
// then root) and key.pem.
func writeCertDir(t *testing.T, ca *x509test.Authority, uri string, ttl time.Duration) string {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	cert := ca.ClientCert(ttl, u)
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), ca.PEM()...)
	if err := os.WriteFile(filepath.Join(dir, certChainFile), chain, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, keyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDeclaresCertificates(t *testing.T) {
	dir := t.TempDir()
	plain, err := makeBootstrap("127.0.0.1:15010", "c", "default", "demo", nil)
	if err != nil {
		t.Fatal(err)
	}
	withCerts, err := makeBootstrap("127.0.0.1:15010", "c", "default", "demo", &tlsFiles{CACertificateFile: "ca", CertificateFile: "/d/cert-chain.pem", PrivateKeyFile: "/d/key.pem"})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		data []byte
		want bool
	}{"plain": {plain, false}, "certs": {withCerts, true}, "garbage": {[]byte("{"), false}} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, c.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if got := declaresCertificates(path); got != c.want {
			t.Errorf("%s: declaresCertificates = %v, want %v", name, got, c.want)
		}
	}
	if declaresCertificates("") || declaresCertificates(filepath.Join(dir, "missing")) {
		t.Error("no bootstrap declares certificates")
	}
}
