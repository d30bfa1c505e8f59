package tlsconfig

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/navemesh/nave/internal/x509test"
)

// handshake runs one handshake over a pipe and returns the version agreed
// and the client's and the server's errors.
func handshake(t *testing.T, server, client *tls.Config) (uint16, error, error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	deadline := time.Now().Add(10 * time.Second)
	a.SetDeadline(deadline)
	b.SetDeadline(deadline)
	srv := tls.Server(a, server)
	serr := make(chan error, 1)
	go func() {
		err := srv.Handshake()
		if err != nil {
			a.Close() // let the client see the end
		}
		serr <- err
	}()
	cli := tls.Client(b, client)
	cerr := cli.Handshake()
	if cerr != nil {
		b.Close()
	} else {
		// In TLS 1.3 the server checks the client's certificate after the
		// client is done: read its alert, if it sends one.
		go io.Copy(io.Discard, cli)
	}
	return cli.ConnectionState().Version, cerr, <-serr
}

func TestMinimumsPerPeer(t *testing.T) {
	ca := x509test.NewAuthority("test")
	cert := Static(ca.ServerCert("hub.example"))
	old := Client(ca.Pool(), "hub.example")
	old.MinVersion, old.MaxVersion = tls.VersionTLS12, tls.VersionTLS12 // a foreign client: Envoy's default
	if _, cerr, serr := handshake(t, Server(Ours, cert), old); cerr == nil || serr == nil {
		t.Error("a server for our own clients accepted TLS 1.2")
	}
	if v, cerr, serr := handshake(t, Server(Foreign, cert), old); cerr != nil || serr != nil || v != tls.VersionTLS12 {
		t.Errorf("a server for foreign clients refused TLS 1.2: version %x, %v, %v", v, cerr, serr)
	}
	if v, cerr, serr := handshake(t, Server(Foreign, cert), Client(ca.Pool(), "hub.example")); cerr != nil || serr != nil || v != tls.VersionTLS13 {
		t.Errorf("our client and a foreign-facing server: version %x, %v, %v; want TLS 1.3", v, cerr, serr)
	}
	if _, cerr, _ := handshake(t, Server(Ours, cert), Client(ca.Pool(), "other.example")); cerr == nil {
		t.Error("the client accepted a certificate for another name")
	}
}

func TestMutual(t *testing.T) {
	ca := x509test.NewAuthority("test")
	serving := Static(ca.ServerCert("hub.example"))
	client := Static(ca.ClientCert(time.Hour))
	server := MutualServer(Ours, serving, tls.RequireAndVerifyClientCert, ca.Pool())
	if _, cerr, serr := handshake(t, server, MutualClient(ca.Pool(), "hub.example", client)); cerr != nil || serr != nil {
		t.Errorf("mutual handshake: %v, %v", cerr, serr)
	}
	if _, _, serr := handshake(t, server, Client(ca.Pool(), "hub.example")); serr == nil {
		t.Error("a server requiring a client certificate accepted none")
	}
	other := x509test.NewAuthority("other")
	if _, _, serr := handshake(t, server, MutualClient(ca.Pool(), "hub.example", Static(other.ClientCert(time.Hour)))); serr == nil {
		t.Error("a server accepted a client certificate of another CA")
	}
}

func TestVerifyingClient(t *testing.T) {
	ca := x509test.NewAuthority("test")
	server := Server(Ours, Static(ca.ServerCert("replica")))
	var saw int
	ok := VerifyingClient(func(cs tls.ConnectionState) error { saw = len(cs.PeerCertificates); return nil }, nil)
	if _, cerr, serr := handshake(t, server, ok); cerr != nil || serr != nil || saw == 0 {
		t.Errorf("verify saw %d certificates: %v, %v", saw, cerr, serr)
	}
	refuse := errors.New("not the replica")
	if _, cerr, _ := handshake(t, server, VerifyingClient(func(tls.ConnectionState) error { return refuse }, nil)); !errors.Is(cerr, refuse) {
		t.Errorf("a refusing verify: %v, want %v", cerr, refuse)
	}
	if _, cerr, _ := handshake(t, server, VerifyingClient(nil, nil)); !errors.Is(cerr, errNoVerify) {
		t.Errorf("no verify: %v, want %v", cerr, errNoVerify)
	}
}
