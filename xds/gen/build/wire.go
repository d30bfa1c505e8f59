package build

import (
	"bytes"
	"sync"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Encoder marshals route configurations without encoding a sub-message
// that consecutive routes share (by pointer) again for each: protobuf's
// wire form of a message is the concatenation of its fields' encodings,
// and a message field is its tag, length and the sub-message's own
// encoding. One retry policy, timeout or match serves many routes.
//
// The fields route configurations are made of (a configuration's name,
// virtual hosts and validate_clusters; a virtual host's name, domains and
// routes; a route's match, decorator, name and route action; a route
// action's cluster or weighted clusters, prefix rewrite, timeout, retry
// policy and hash policies) are written here; a message with any other
// field set is marshalled by protobuf-go whole. The result is byte for
// byte what proto.MarshalOptions{Deterministic: true} gives for the
// message (fields in protobuf-go's order: by number, a oneof's after the
// others); the tests hold it to that, for every field of these messages.
//
// The messages given must not change while the Encoder is in use, since
// it remembers encodings by pointer. An Encoder belongs to one goroutine;
// the zero value is ready to use.
type Encoder struct {
	// The shared sub-messages met last, by field.
	match, timeout, retry leaf
}

// scratch holds buffers configurations are encoded in before they are
// copied out at their size (the encoding grows its buffer as it goes).
var scratch = sync.Pool{New: func() any { return new([]byte) }}

// leaf is the sub-message of one field met last and, once it has been
// met twice in a row, its encoding.
type leaf struct {
	m proto.Message
	b []byte
}

// deterministic is how every resource is marshalled (resource.Prepare).
var deterministic = proto.MarshalOptions{Deterministic: true}

// Field numbers of what the Encoder writes itself.
const (
	rcNameField             = 1
	rcVirtualHostsField     = 2
	rcValidateClustersField = 7
	vhNameField             = 1
	vhDomainsField          = 2
	vhRoutesField           = 3
	routeMatchField         = 1
	routeRouteField         = 2
	routeNameField          = 14
	routeDecoratorField     = 5
	actionClusterField      = 1
	actionWeightedField     = 3
	actionPrefixRewrite     = 5
	actionTimeoutField      = 8
	actionRetryPolicyField  = 9
	actionHashPolicyField   = 15
)

// Marshal returns m's deterministic encoding.
func (e *Encoder) Marshal(m proto.Message) ([]byte, error) {
	rc, ok := m.(*routev3.RouteConfiguration)
	if !ok || rc == nil || !plainRouteConfiguration(rc) {
		return deterministic.Marshal(m)
	}
	buf := scratch.Get().(*[]byte)
	defer scratch.Put(buf)
	b := (*buf)[:0]
	if rc.Name != "" {
		b = appendString(b, rcNameField, rc.Name)
	}
	var err error
	for _, vh := range rc.VirtualHosts {
		at := openField(&b, rcVirtualHostsField)
		if b, err = e.appendVirtualHost(b, vh); err != nil {
			return nil, err
		}
		b = closeField(b, at)
	}
	if rc.ValidateClusters != nil {
		if b, err = appendMessage(b, rcValidateClustersField, rc.ValidateClusters); err != nil {
			return nil, err
		}
	}
	*buf = b
	return bytes.Clone(b), nil
}

func (e *Encoder) appendVirtualHost(b []byte, vh *routev3.VirtualHost) ([]byte, error) {
	if vh == nil || !plainVirtualHost(vh) {
		return deterministic.MarshalAppend(b, vh)
	}
	if vh.Name != "" {
		b = appendString(b, vhNameField, vh.Name)
	}
	for _, d := range vh.Domains {
		b = appendString(b, vhDomainsField, d)
	}
	var err error
	for _, r := range vh.Routes {
		at := openField(&b, vhRoutesField)
		if b, err = e.appendRoute(b, r); err != nil {
			return nil, err
		}
		b = closeField(b, at)
	}
	return b, nil
}

func (e *Encoder) appendRoute(b []byte, r *routev3.Route) ([]byte, error) {
	if r == nil || !plainRoute(r) {
		return deterministic.MarshalAppend(b, r)
	}
	action, ok := r.Action.(*routev3.Route_Route)
	if !ok || action.Route == nil {
		return deterministic.MarshalAppend(b, r)
	}
	var err error
	if r.Match != nil {
		if b, err = e.match.append(b, routeMatchField, r.Match); err != nil {
			return nil, err
		}
	}
	if r.Decorator != nil {
		if b, err = appendMessage(b, routeDecoratorField, r.Decorator); err != nil {
			return nil, err
		}
	}
	if r.Name != "" {
		b = appendString(b, routeNameField, r.Name)
	}
	at := openField(&b, routeRouteField) // the oneof: last
	if b, err = e.appendRouteAction(b, action.Route); err != nil {
		return nil, err
	}
	return closeField(b, at), nil
}

func (e *Encoder) appendRouteAction(b []byte, a *routev3.RouteAction) ([]byte, error) {
	if !plainRouteAction(a) {
		return deterministic.MarshalAppend(b, a)
	}
	if a.PrefixRewrite != "" {
		b = appendString(b, actionPrefixRewrite, a.PrefixRewrite)
	}
	var err error
	if a.Timeout != nil {
		if b, err = e.timeout.append(b, actionTimeoutField, a.Timeout); err != nil {
			return nil, err
		}
	}
	if a.RetryPolicy != nil {
		if b, err = e.retry.append(b, actionRetryPolicyField, a.RetryPolicy); err != nil {
			return nil, err
		}
	}
	for _, h := range a.HashPolicy {
		if b, err = appendMessage(b, actionHashPolicyField, h); err != nil {
			return nil, err
		}
	}
	// The cluster specifier is a oneof: last.
	switch c := a.ClusterSpecifier.(type) {
	case nil:
	case *routev3.RouteAction_Cluster:
		b = appendString(b, actionClusterField, c.Cluster)
	case *routev3.RouteAction_WeightedClusters:
		if b, err = appendMessage(b, actionWeightedField, c.WeightedClusters); err != nil {
			return nil, err
		}
	default:
		panic("build: plainRouteAction let through a cluster specifier it does not write")
	}
	return b, nil
}

// append appends m as field num: from its encoding if m is the message
// met last (encoded once it is met twice in a row), else marshalled in
// place.
func (l *leaf) append(b []byte, num protowire.Number, m proto.Message) ([]byte, error) {
	if m == l.m {
		if l.b == nil {
			var err error
			if l.b, err = deterministic.Marshal(m); err != nil {
				return nil, err
			}
		}
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendBytes(b, l.b), nil
	}
	l.m, l.b = m, nil
	return appendMessage(b, num, m)
}

// appendMessage appends m, marshalled by protobuf-go, as field num.
func appendMessage(b []byte, num protowire.Number, m proto.Message) ([]byte, error) {
	at := openField(&b, num)
	b, err := deterministic.MarshalAppend(b, m)
	if err != nil {
		return nil, err
	}
	return closeField(b, at), nil
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// openField appends the tag of length-delimited field num and one byte
// for its length, returning where that byte is: the value follows, then
// closeField.
func openField(b *[]byte, num protowire.Number) int {
	*b = protowire.AppendTag(*b, num, protowire.BytesType)
	*b = append(*b, 0)
	return len(*b) - 1
}

// closeField writes the length of the value after at (openField), moving
// the value up if its length takes more than one byte.
func closeField(b []byte, at int) []byte {
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	k := protowire.SizeVarint(uint64(n))
	var pad [9]byte
	b = append(b, pad[:k-1]...)
	copy(b[at+k:], b[at+1:at+1+n])
	protowire.AppendVarint(b[at:at], uint64(n))
	return b
}
