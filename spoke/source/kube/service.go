package kube

import (
	"slices"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	"github.com/navemesh/nave/shared/typeurl"
)

// origin is every object's Origin.
const origin = "kubernetes"

// The registry kinds the source produces.
var (
	serviceKind  = registryKind(&meshconfigv1.Service{})
	workloadKind = registryKind(&meshconfigv1.Workload{})
)

func registryKind(spec proto.Message) *meshconfig.Kind {
	k, ok := meshconfig.KindByTypeURL(typeurl.Prefix + string(spec.ProtoReflect().Descriptor().FullName()))
	if !ok {
		panic("kube: no meshconfig kind for " + string(spec.ProtoReflect().Descriptor().FullName()))
	}
	return k
}

// hostname is a service's name in the mesh: name.namespace.svc.<domain>.
func hostname(name, namespace, domain string) string {
	return name + "." + namespace + ".svc." + domain
}

// externalAddresses are the addresses a Service is reachable at from
// outside the cluster, as Istio reads an east-west gateway's: its load
// balancer's ingress (an IP, else a hostname), then spec.externalIPs;
// each once.
func externalAddresses(svc *corev1.Service) []string {
	var out []string
	add := func(a string) {
		if a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			add(in.IP)
		} else {
			add(in.Hostname)
		}
	}
	for _, ip := range svc.Spec.ExternalIPs {
		add(ip)
	}
	return out
}

// serviceObject normalizes a Kubernetes Service (headless and
// ExternalName ones too) into a registry Service. UDP and SCTP ports are
// left out: the mesh carries TCP only. A target port is kept as a number
// or as a name (which WorkloadEntries the service selects map through
// their ports). The version is not set.
func serviceObject(svc *corev1.Service, domain string) *meshconfig.Object {
	spec := &meshconfigv1.Service{
		Hostname:     hostname(svc.Name, svc.Namespace, domain),
		ExternalName: svc.Spec.ExternalName,
		Selector:     svc.Spec.Selector,
	}
	for _, p := range svc.Spec.Ports {
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			continue
		}
		sp := &meshconfigv1.ServicePort{
			Name:     p.Name,
			Number:   uint32(p.Port),
			Protocol: portProtocol(p.Name, p.AppProtocol),
		}
		switch {
		case p.TargetPort.Type == intstr.Int && p.TargetPort.IntVal > 0:
			sp.TargetPort = uint32(p.TargetPort.IntVal)
		case p.TargetPort.Type == intstr.String:
			sp.TargetPortName = p.TargetPort.StrVal
		}
		spec.Ports = append(spec.Ports, sp)
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, ip := range ips {
		if ip != "" && ip != corev1.ClusterIPNone {
			spec.Addresses = append(spec.Addresses, ip)
		}
	}
	spec.ExternalAddresses = externalAddresses(svc)
	return &meshconfig.Object{
		Kind:         serviceKind,
		Name:         svc.Name,
		Namespace:    svc.Namespace,
		Labels:       svc.Labels,
		Annotations:  svc.Annotations,
		CreationTime: svc.CreationTimestamp.Time,
		Spec:         spec,
		Origin:       origin,
	}
}
