package inject

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The gateway template, as Istio's: the pod (a gateway Deployment's)
// names its proxy container istio-proxy with image auto, and the
// injector fills that container in rather than adding a sidecar. Here it
// becomes nave-agent in envoy mode with proxyType router — the agent
// runs Envoy as its child and Envoy is the pod's application — with no
// capture init container, no inbound interception and no probe
// rewriting; the kubelet's readiness goes through the agent (status
// port 15021). docs/injection.md, "The gateway template", says what the
// pod keeps and what the injector owns.
const (
	// GatewayContainer is the container the gateway template fills
	// (Istio's name, so Istio's gateway manifests apply unchanged).
	GatewayContainer = istioProxy
	// gatewayImageAuto is the image a pod leaves for the injector.
	gatewayImageAuto = "auto"
)

// asksForGateway says whether the pod's templates annotation names the
// gateway template (alone or not: parseTemplates refuses a mix later).
func asksForGateway(ann map[string]string) bool {
	for n := range strings.SplitSeq(ann[AnnotationTemplates], ",") {
		if strings.TrimSpace(n) == TemplateGateway {
			return true
		}
	}
	return false
}

// fillGateway adds to p what makes the pod's istio-proxy container the
// gateway agent: the image, command and arguments, the agent's
// environment and mounts, the status port, and — where the pod sets none
// — the readiness probe, resources, security context and pull policy.
// The pod's own env, ports and mounts are kept beside the injector's.
func (in *Injector) fillGateway(p *patch, pod *corev1.Pod, agent *corev1.Container) ([]string, *refusal) {
	i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == GatewayContainer })
	if i < 0 {
		return nil, &refusal{field: "spec.containers", reason: fmt.Sprintf("template %s fills the pod's container named %s (image %s); the pod has none",
			TemplateGateway, GatewayContainer, gatewayImageAuto)}
	}
	c := &pod.Spec.Containers[i]
	field := "spec.containers[" + strconv.Itoa(i) + "]"
	base := "/spec/containers/" + strconv.Itoa(i)
	if c.Image != gatewayImageAuto {
		return nil, &refusal{field: field + ".image", reason: fmt.Sprintf("%q: template %s sets the proxy image, so the container's is %s (annotation %s chooses another)",
			c.Image, TemplateGateway, gatewayImageAuto, AnnotationProxyImage)}
	}
	if len(c.Command) > 0 || len(c.Args) > 0 {
		return nil, &refusal{field: field + ".command", reason: fmt.Sprintf("template %s runs %s in this container: leave command and args out", TemplateGateway, agentBinary)}
	}
	for _, e := range c.Env {
		if slices.ContainsFunc(agent.Env, func(a corev1.EnvVar) bool { return a.Name == e.Name }) {
			return nil, &refusal{field: field + ".env", reason: fmt.Sprintf("%s is set by template %s (the agent's configuration)", e.Name, TemplateGateway)}
		}
	}
	for _, m := range c.VolumeMounts {
		if slices.ContainsFunc(agent.VolumeMounts, func(a corev1.VolumeMount) bool { return a.MountPath == m.MountPath }) {
			return nil, &refusal{field: field + ".volumeMounts", reason: fmt.Sprintf("%s is where template %s mounts the agent's files", m.MountPath, TemplateGateway)}
		}
	}
	var warnings []string
	p.add(base+"/image", agent.Image)
	p.add(base+"/command", agent.Command)
	p.add(base+"/args", agent.Args)
	appendTo(p, base+"/env", len(c.Env), agent.Env)
	appendTo(p, base+"/volumeMounts", len(c.VolumeMounts), agent.VolumeMounts)
	if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.ContainerPort == statusPort }) {
		appendTo(p, base+"/ports", len(c.Ports), agent.Ports)
	}
	if c.ReadinessProbe == nil {
		p.add(base+"/readinessProbe", agent.ReadinessProbe)
	} else {
		warnings = append(warnings, fmt.Sprintf("container %s has a readiness probe of its own: kept (the agent's is /healthz/ready on port %d)", GatewayContainer, statusPort))
	}
	if len(c.Resources.Requests) == 0 && len(c.Resources.Limits) == 0 {
		p.add(base+"/resources", agent.Resources)
	}
	if c.SecurityContext == nil {
		p.add(base+"/securityContext", agent.SecurityContext)
	}
	if c.ImagePullPolicy == "" && agent.ImagePullPolicy != "" {
		p.add(base+"/imagePullPolicy", agent.ImagePullPolicy)
	}
	if c.TerminationMessagePolicy == "" {
		p.add(base+"/terminationMessagePolicy", agent.TerminationMessagePolicy)
	}
	return warnings, nil
}
