package kubenode

import (
	"context"
	"net"
	"strings"
	"sync"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	listersv1 "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
)

// dnsTTL is the time to live of every answer, in seconds: short, Services change in tests.
const dnsTTL = 5

// dnsServer answers A queries for <service>.<namespace>.svc.cluster.local (the ClusterIP, or the
// ready endpoints of a headless Service), for <hostname>.<service>.<namespace>.svc.cluster.local
// (the ready endpoint of that hostname, as a StatefulSet's pods have under its serviceName; none:
// the name does not exist, as with CoreDNS) and for the aliases a test added (AddHost), on the
// gateway's port 53; every other name does not exist. The pods' resolv.conf names it
// (the kubelet's clusterDNS). Its methods may be called from any goroutine.
type dnsServer struct {
	services listersv1.ServiceLister
	slices   discoverylisters.EndpointSliceLister

	mu      sync.Mutex
	aliases map[string]string // FQDN (with the final dot) -> namespace/service
}

// serve answers on udp and tcp until ctx ends.
func (d *dnsServer) serve(ctx context.Context, wg *sync.WaitGroup) error {
	addr := net.JoinHostPort(Gateway, "53")
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return err
	}
	servers := []*dns.Server{{PacketConn: pc, Handler: d}, {Listener: l, Handler: d}}
	for _, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.ActivateAndServe()
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		for _, s := range servers {
			_ = s.Shutdown()
		}
	}()
	return nil
}

// ServeDNS implements dns.Handler.
func (d *dnsServer) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	if len(req.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	ips, known := d.lookup(strings.ToLower(q.Name))
	switch {
	case !known:
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeA:
		for _, ip := range ips {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: dnsTTL},
				A:   ip,
			})
		}
	}
	_ = w.WriteMsg(m)
}

// lookup returns the addresses of name and whether the name exists.
func (d *dnsServer) lookup(name string) ([]net.IP, bool) {
	d.mu.Lock()
	target, ok := d.aliases[name]
	d.mu.Unlock()
	var ns, svcName, hostname string
	if ok {
		ns, svcName, _ = strings.Cut(target, "/")
	} else {
		rest, found := strings.CutSuffix(name, ".svc."+ClusterDomain+".")
		if !found {
			return nil, false
		}
		parts := strings.Split(rest, ".")
		switch len(parts) {
		case 2:
			svcName, ns = parts[0], parts[1]
		case 3:
			hostname, svcName, ns = parts[0], parts[1], parts[2]
		default:
			return nil, false
		}
	}
	svc, err := d.services.Services(ns).Get(svcName)
	if err != nil {
		return nil, false
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		if hostname != "" {
			return nil, false
		}
		ip := net.ParseIP(svc.Spec.ClusterIP)
		if ip == nil {
			return nil, true
		}
		return []net.IP{ip}, true
	}
	slices, err := d.slices.EndpointSlices(ns).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svcName}))
	if err != nil {
		return nil, true
	}
	var ips []net.IP
	for _, s := range slices {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			if hostname != "" && (e.Hostname == nil || *e.Hostname != hostname) {
				continue
			}
			for _, a := range e.Addresses {
				if ip := net.ParseIP(a).To4(); ip != nil {
					ips = append(ips, ip)
				}
			}
		}
	}
	if hostname != "" && len(ips) == 0 {
		return nil, false
	}
	return ips, true
}

// addAlias makes name answer as Service namespace/service does.
func (d *dnsServer) addAlias(name, namespace, service string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.aliases == nil {
		d.aliases = map[string]string{}
	}
	d.aliases[dns.Fqdn(strings.ToLower(name))] = namespace + "/" + service
}
