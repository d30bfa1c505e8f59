package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	ndsv1 "github.com/navemesh/nave/shared/nds/v1"
	"github.com/navemesh/nave/shared/retry"
	"github.com/navemesh/nave/shared/tlsconfig"
	"github.com/navemesh/nave/shared/typeurl"
)

// NameTableOptions configure a NameTableStream. A plain value.
type NameTableOptions struct {
	// Address is the hub's xDS listener; ServerName the name its
	// certificate must be valid for; Roots its serving CA.
	Address, ServerName string
	Roots               *x509.CertPool
	// Certificate is the workload certificate presented to the hub.
	Certificate tlsconfig.Certificate
	// Node is the node the stream speaks as: its Envoy's.
	Node *corev3.Node
	// Apply puts a received table in place; it is called from the
	// stream's goroutine only.
	Apply   func(nt *ndsv1.NameTable, version string)
	Backoff retry.Policy
	Log     *slog.Logger
}

// NameTableStream is the agent's own ADS stream to the hub for the name
// table (typeurl.NameTable), beside its Envoy's: state of the world, one
// wildcard subscription, each answer ACKed when its table is put in place
// and NACKed (the last good table kept) when it does not decode. A new
// stream after a failure starts from the last good version; the table in
// place stays until a new one arrives. Run it once; View is safe from any
// goroutine.
type NameTableStream struct {
	o    NameTableOptions
	conn *grpc.ClientConn

	mu        sync.Mutex
	connected bool
	version   string
	lastErr   string
	acks      int
	nacks     int
}

// NewNameTableStream makes the stream's client; nothing is dialled before
// Run.
func NewNameTableStream(o NameTableOptions) (*NameTableStream, error) {
	conf := tlsconfig.MutualClient(o.Roots, o.ServerName, o.Certificate)
	conn, err := grpc.NewClient(o.Address, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	if err != nil {
		return nil, fmt.Errorf("name table: xds address %q: %w", o.Address, err)
	}
	return &NameTableStream{o: o, conn: conn}, nil
}

// Run keeps a stream open until ctx ends, retrying with backoff; it
// returns nil then.
func (n *NameTableStream) Run(ctx context.Context) error {
	defer n.conn.Close()
	b := n.o.Backoff.New()
	for {
		answered, err := n.stream(ctx)
		n.mu.Lock()
		n.connected = false
		if err != nil {
			n.lastErr = err.Error()
		}
		n.mu.Unlock()
		if ctx.Err() != nil {
			return nil
		}
		if answered {
			b.Reset()
		}
		wait := b.NextBackOff()
		n.o.Log.Warn("name table: the stream to the hub ended; retrying", "error", err, "retry_in", wait.Round(time.Millisecond))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// stream runs one ADS stream; answered says whether the hub answered.
func (n *NameTableStream) stream(ctx context.Context) (answered bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(n.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, fmt.Errorf("open: %w", err)
	}
	n.mu.Lock()
	accepted := n.version
	n.mu.Unlock()
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: n.o.Node, TypeUrl: typeurl.NameTable, VersionInfo: accepted}); err != nil {
		return false, fmt.Errorf("send: %w", err)
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			if ctx.Err() != nil || status.Code(err) == codes.Canceled {
				return answered, nil
			}
			return answered, fmt.Errorf("receive: %w", err)
		}
		answered = true
		if resp.GetTypeUrl() != typeurl.NameTable {
			continue // not asked for: nothing to acknowledge
		}
		req := &discoveryv3.DiscoveryRequest{TypeUrl: typeurl.NameTable, ResponseNonce: resp.GetNonce()}
		nt, derr := decodeNameTable(resp)
		n.mu.Lock()
		n.connected = true
		if derr != nil {
			n.nacks++
			n.lastErr = derr.Error()
			req.VersionInfo = n.version
			req.ErrorDetail = status.New(codes.InvalidArgument, derr.Error()).Proto()
		} else {
			n.acks++
			n.version = resp.GetVersionInfo()
			req.VersionInfo = n.version
		}
		n.mu.Unlock()
		if derr != nil {
			n.o.Log.Warn("name table: the hub's answer is refused (NACK); the last good table stays", "version", resp.GetVersionInfo(), "error", derr)
		} else {
			n.o.Apply(nt, resp.GetVersionInfo())
		}
		if err := st.Send(req); err != nil {
			return answered, fmt.Errorf("send: %w", err)
		}
	}
}

// decodeNameTable is the table of an answer: its resources merged (the hub
// sends one; its name does not matter), none being an empty table.
func decodeNameTable(resp *discoveryv3.DiscoveryResponse) (*ndsv1.NameTable, error) {
	out := &ndsv1.NameTable{Table: map[string]*ndsv1.NameTable_NameInfo{}}
	for i, a := range resp.GetResources() {
		nt := &ndsv1.NameTable{}
		if a.GetTypeUrl() != typeurl.NameTable {
			return nil, fmt.Errorf("resource %d is a %s, not a name table", i, a.GetTypeUrl())
		}
		if err := proto.Unmarshal(a.GetValue(), nt); err != nil {
			return nil, fmt.Errorf("resource %d: %w", i, err)
		}
		for h, info := range nt.GetTable() {
			if _, dup := out.Table[h]; dup {
				return nil, fmt.Errorf("host %q is in two resources", h)
			}
			out.Table[h] = info
		}
	}
	return out, nil
}

// NameTableStreamView is the stream's state for /debug/dns.
type NameTableStreamView struct {
	Address   string `json:"address"`
	Connected bool   `json:"connected"`
	Version   string `json:"version,omitempty"`
	ACKs      int    `json:"acks"`
	NACKs     int    `json:"nacks"`
	LastError string `json:"lastError,omitempty"`
}

// View is the stream's state.
func (n *NameTableStream) View() NameTableStreamView {
	n.mu.Lock()
	defer n.mu.Unlock()
	return NameTableStreamView{Address: n.o.Address, Connected: n.connected, Version: n.version, ACKs: n.acks, NACKs: n.nacks, LastError: n.lastErr}
}

// bootstrapNode is the node of an Envoy bootstrap (JSON): the agent's
// stream speaks as its Envoy.
func bootstrapNode(boot []byte) (*corev3.Node, error) {
	var doc struct {
		Node json.RawMessage `json:"node"`
	}
	if err := json.Unmarshal(boot, &doc); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	if len(doc.Node) == 0 {
		return nil, errors.New("bootstrap: no node")
	}
	node := &corev3.Node{}
	if err := protojson.Unmarshal(doc.Node, node); err != nil {
		return nil, fmt.Errorf("bootstrap node: %w", err)
	}
	return node, nil
}

// keeperCertificate presents the keeper's current workload certificate.
func keeperCertificate(k *Keeper) tlsconfig.Certificate {
	return func() (*tls.Certificate, error) {
		cur, _, err := k.Current()
		if cur == nil {
			if err == nil {
				err = errors.New("no workload certificate yet")
			}
			return nil, err
		}
		c, err := tls.X509KeyPair(cur.ChainPEM, cur.KeyPEM)
		if err != nil {
			return nil, fmt.Errorf("workload certificate: %w", err)
		}
		return &c, nil
	}
}
