package inject

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/navemesh/nave/spoke/admission"
	"github.com/navemesh/nave/spoke/appprobe"
)

// AnnotationRewriteProbes (pod annotation) = "false" keeps the app
// containers' probes as they are; they are rewritten by default, as
// Istio's global default does.
const AnnotationRewriteProbes = "sidecar.istio.io/rewriteAppHTTPProbers"

// probeRewrite is one app container probe pointed at the agent.
type probeRewrite struct {
	path  string // JSON pointer of the probe in the pod
	probe corev1.Probe
}

// rewriteProbes rewrites every httpGet, grpc and tcpSocket probe of the
// app containers to httpGet on the agent's status port at
// appprobe.Path(container, kind), keeping their timing (decision 032).
// It returns the rewrites, the original probes for the agent (resolved:
// named ports as numbers), and a warning for each probe left alone: a
// host other than the pod, a port name the container does not declare.
// Exec probes and probes already on the status port are left alone
// silently.
func rewriteProbes(pod *corev1.Pod) ([]probeRewrite, appprobe.Probers, []string) {
	var rewrites []probeRewrite
	probers := appprobe.Probers{}
	var warnings []string
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		for _, pr := range []struct {
			field, kind string
			probe       *corev1.Probe
		}{
			{"livenessProbe", appprobe.Liveness, c.LivenessProbe},
			{"readinessProbe", appprobe.Readiness, c.ReadinessProbe},
			{"startupProbe", appprobe.Startup, c.StartupProbe},
		} {
			if pr.probe == nil {
				continue
			}
			original, why := originalProbe(c, pr.probe)
			if why != "" {
				warnings = append(warnings, fmt.Sprintf("container %s: %s is not rewritten to the agent: %s", c.Name, pr.field, why))
				continue
			}
			if original == nil {
				continue
			}
			path := appprobe.Path(c.Name, pr.kind)
			if _, _, ok := appprobe.SplitPath(path); !ok {
				warnings = append(warnings, fmt.Sprintf("container %s: %s is not rewritten to the agent: the container's name is not a DNS label", admission.Clip(c.Name), pr.field))
				continue
			}
			original.TimeoutSeconds = pr.probe.TimeoutSeconds
			probers[path] = original
			p := *pr.probe
			p.ProbeHandler = corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(statusPort), Scheme: corev1.URISchemeHTTP}}
			rewrites = append(rewrites, probeRewrite{path: fmt.Sprintf("/spec/containers/%d/%s", i, pr.field), probe: p})
		}
	}
	return rewrites, probers, warnings
}

// originalProbe is what the agent runs for p of container c: nil (and no
// reason) for a probe it does not take over, nil and why for one it cannot.
func originalProbe(c *corev1.Container, p *corev1.Probe) (*appprobe.Prober, string) {
	switch {
	case p.HTTPGet != nil:
		h := p.HTTPGet
		if !appprobe.IsLoopbackHost(h.Host) {
			return nil, fmt.Sprintf("httpGet.host %q is not the pod (the agent probes only its own pod)", admission.Clip(h.Host))
		}
		port, why := resolvePort(c, h.Port)
		if why != "" || port == statusPort {
			return nil, why
		}
		g := &appprobe.HTTPGet{Path: h.Path, Port: port, Host: h.Host, Scheme: string(h.Scheme)}
		if g.Scheme == "" {
			g.Scheme = appprobe.SchemeHTTP
		}
		for _, hd := range h.HTTPHeaders {
			g.HTTPHeaders = append(g.HTTPHeaders, appprobe.Header{Name: hd.Name, Value: hd.Value})
		}
		pr := &appprobe.Prober{HTTPGet: g}
		// What the agent would refuse (a path or header the API server
		// would refuse too) is left to the kubelet.
		if err := pr.Validate(); err != nil {
			return nil, err.Error()
		}
		return pr, ""
	case p.GRPC != nil:
		port := int(p.GRPC.Port)
		if port < 1 || port > 65535 {
			return nil, fmt.Sprintf("grpc.port %d is not a port number", port)
		}
		if port == statusPort {
			return nil, ""
		}
		return &appprobe.Prober{GRPC: &appprobe.GRPC{Port: port, Service: p.GRPC.Service}}, ""
	case p.TCPSocket != nil:
		if !appprobe.IsLoopbackHost(p.TCPSocket.Host) {
			return nil, fmt.Sprintf("tcpSocket.host %q is not the pod (the agent probes only its own pod)", admission.Clip(p.TCPSocket.Host))
		}
		port, why := resolvePort(c, p.TCPSocket.Port)
		if why != "" || port == statusPort {
			return nil, why
		}
		return &appprobe.Prober{TCPSocket: &appprobe.TCPSocket{Port: port, Host: p.TCPSocket.Host}}, ""
	}
	return nil, "" // exec, or no handler: nothing goes through the network
}

// resolvePort is port as a number: a named port is looked up in the
// container's ports, as the kubelet does.
func resolvePort(c *corev1.Container, port intstr.IntOrString) (int, string) {
	if port.Type == intstr.String {
		for _, p := range c.Ports {
			if p.Name == port.StrVal {
				return int(p.ContainerPort), ""
			}
		}
		return 0, fmt.Sprintf("port %q names no port of the container", admission.Clip(port.StrVal))
	}
	if port.IntVal < 1 || port.IntVal > 65535 {
		return 0, fmt.Sprintf("port %d is not a port number", port.IntVal)
	}
	return int(port.IntVal), ""
}

// rewriteProbesWanted reads AnnotationRewriteProbes: absent is def.
func rewriteProbesWanted(ann map[string]string, def bool) (bool, *refusal) {
	v, ok := ann[AnnotationRewriteProbes]
	if !ok {
		return def, nil
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return false, refuse(AnnotationRewriteProbes, "%q is not true or false", admission.Clip(v))
	}
	return b, nil
}
