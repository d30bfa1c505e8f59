package kubenode

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	listersv1 "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
)

// The service proxy's iptables chains (table nat), jumped to from PREROUTING and OUTPUT
// (Service addresses to endpoints) and POSTROUTING (masquerade of a pod's own network's
// traffic that was translated, so the reply comes back through the host to be untranslated).
const (
	servicesChain = "NAVENODE-SERVICES"
	postChain     = "NAVENODE-POSTROUTING"
)

// proxyJumps are the rules linking the built-in chains to the proxy's.
var proxyJumps = [][]string{
	{"PREROUTING", "-j", servicesChain},
	{"OUTPUT", "-j", servicesChain},
	{"POSTROUTING", "-j", postChain},
}

// serviceProxy writes the DNAT rules of every Service's ClusterIP ports to their ready
// endpoints, as kube-proxy's iptables mode does (a random choice per connection), and the
// default/kubernetes Service to kube-apiserver on the gateway.
type serviceProxy struct {
	services  listersv1.ServiceLister
	slices    discoverylisters.EndpointSliceLister
	apiserver int // kube-apiserver's port
}

// installProxyChains creates the chains and the jumps to them.
func installProxyChains(ctx context.Context) error {
	if err := removeProxyRules(ctx); err != nil {
		return err
	}
	for _, c := range []string{servicesChain, postChain} {
		if err := run(ctx, "iptables", "-w", "-t", "nat", "-N", c); err != nil {
			return err
		}
	}
	for _, j := range proxyJumps {
		if err := run(ctx, "iptables", append([]string{"-w", "-t", "nat", "-I"}, j...)...); err != nil {
			return err
		}
	}
	return nil
}

// removeProxyRules removes the jumps and the chains, those that exist.
func removeProxyRules(ctx context.Context) error {
	for _, j := range proxyJumps {
		for run(ctx, "iptables", append([]string{"-w", "-t", "nat", "-C"}, j...)...) == nil {
			if err := run(ctx, "iptables", append([]string{"-w", "-t", "nat", "-D"}, j...)...); err != nil {
				return err
			}
		}
	}
	for _, c := range []string{servicesChain, postChain} {
		if run(ctx, "iptables", "-w", "-t", "nat", "-L", c, "-n") != nil {
			continue
		}
		if err := run(ctx, "iptables", "-w", "-t", "nat", "-F", c); err != nil {
			return err
		}
		if err := run(ctx, "iptables", "-w", "-t", "nat", "-X", c); err != nil {
			return err
		}
	}
	return nil
}

// sync rewrites both chains from the Services and EndpointSlices seen.
func (p *serviceProxy) sync(ctx context.Context) error {
	svcs, err := p.services.List(labels.Everything())
	if err != nil {
		return err
	}
	sort.Slice(svcs, func(i, j int) bool {
		return svcs[i].Namespace+"/"+svcs[i].Name < svcs[j].Namespace+"/"+svcs[j].Name
	})
	var b bytes.Buffer
	fmt.Fprintf(&b, "*nat\n:%s - [0:0]\n:%s - [0:0]\n", servicesChain, postChain)
	fmt.Fprintf(&b, "-A %s -s %s -d %s -m conntrack --ctstate DNAT -j MASQUERADE\n", postChain, PodCIDR, PodCIDR)
	for _, svc := range svcs {
		ip := svc.Spec.ClusterIP
		if ip == "" || ip == corev1.ClusterIPNone {
			continue
		}
		for _, port := range svc.Spec.Ports {
			if port.Protocol != corev1.ProtocolTCP && port.Protocol != "" {
				continue
			}
			var dests []string
			if svc.Namespace == "default" && svc.Name == "kubernetes" {
				dests = []string{Gateway + ":" + strconv.Itoa(p.apiserver)}
			} else {
				dests = p.endpoints(svc, port)
			}
			match := fmt.Sprintf("-A %s -d %s/32 -p tcp --dport %d", servicesChain, ip, port.Port)
			// No ready endpoint: no rule; the connection goes to the bridge, unanswered.
			for i, d := range dests {
				prob := ""
				if left := len(dests) - i; left > 1 {
					prob = fmt.Sprintf(" -m statistic --mode random --probability %.5f", 1/float64(left))
				}
				fmt.Fprintf(&b, "%s%s -j DNAT --to-destination %s\n", match, prob, d)
			}
		}
	}
	b.WriteString("COMMIT\n")
	cmd := exec.CommandContext(ctx, "iptables-restore", "-w", "--noflush")
	cmd.Stdin = &b
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore: %w: %s\n%s", err, out, b.String())
	}
	return nil
}

// endpoints are the ready addresses:ports of the Service's port, from its EndpointSlices.
func (p *serviceProxy) endpoints(svc *corev1.Service, port corev1.ServicePort) []string {
	slices, err := p.slices.EndpointSlices(svc.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name}))
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range slices {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		var target int32 = -1
		for _, sp := range s.Ports {
			if sp.Name != nil && *sp.Name == port.Name && sp.Port != nil {
				target = *sp.Port
			}
		}
		if target < 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				out = append(out, a+":"+strconv.Itoa(int(target)))
			}
		}
	}
	sort.Strings(out)
	return out
}
