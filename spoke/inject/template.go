package inject

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/navemesh/nave/shared/settings"
	"github.com/navemesh/nave/spoke/agentconfig"
	"github.com/navemesh/nave/spoke/capture"
)

// The pod layout both sides of the agent contract agree on
// (spoke/agentconfig's defaults).
const (
	agentBinary     = "nave-agent"
	runDir          = "/var/run/nave"
	podInfoDir      = "/etc/nave/pod"
	tokenDir        = "/var/run/secrets/tokens"
	tokenFile       = "istio-token"
	tokenAudience   = "istio-ca"
	tokenExpiry     = 43200 // seconds; the kubelet refreshes it at 80 %
	grpcBootstrap   = runDir + "/grpc-bootstrap.json"
	statusPort      = 15021
	envoyAdminPort  = 15000
	envoyReadyPort  = 15020 // the agent's envoy.readyPort: Envoy's readiness listener
	readyPath       = "/healthz/ready"
	grpcBootstrapEV = "GRPC_XDS_BOOTSTRAP"
	// modes of the agent.
	modeEnvoy = "envoy"
	modeGRPC  = "grpc"
)

// built is what a template adds to a pod.
type built struct {
	initContainers []corev1.Container // put first, in this order
	volumes        []corev1.Volume
	// appEnv and appMount are added to every app container (grpc-agent);
	// the injector adds the CSM observability environment to appEnv
	// (csmEnv).
	appEnv   []corev1.EnvVar
	appMount *corev1.VolumeMount
	// gateway is what the gateway template makes of the pod's istio-proxy
	// container (fillGateway); nil for the other templates.
	gateway *corev1.Container
}

// build makes the containers and volumes of s for a pod of the spoke's
// mesh, with trust.
func (in *Injector) build(s *podSettings, trust Trust) built {
	var b built
	mode := modeEnvoy
	if s.template == TemplateGRPCAgent {
		mode = modeGRPC
	}
	agent := corev1.Container{
		Name:            ProxyContainer,
		Image:           s.image,
		ImagePullPolicy: in.opts.PullPolicy,
		Command:         []string{agentBinary},
		Args:            []string{"run"},
		Env:             in.agentEnv(mode, trust, s),
		Ports:           []corev1.ContainerPort{{Name: "nave-status", ContainerPort: statusPort, Protocol: corev1.ProtocolTCP}},
		Resources:       s.resources,
		VolumeMounts: []corev1.VolumeMount{
			{Name: VolumeRun, MountPath: runDir},
			{Name: VolumePodInfo, MountPath: podInfoDir, ReadOnly: true},
			{Name: VolumeToken, MountPath: tokenDir, ReadOnly: true},
		},
		// The app starts only once the agent has a certificate and has
		// written the bootstrap (and Envoy is ready, in envoy mode).
		StartupProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: readyPath, Port: intstr.FromInt32(statusPort)}},
			PeriodSeconds:    1,
			TimeoutSeconds:   3,
			FailureThreshold: 600,
		},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: readyPath, Port: intstr.FromInt32(statusPort)}},
			PeriodSeconds:    15,
			TimeoutSeconds:   3,
			FailureThreshold: 4,
		},
		RestartPolicy:            ptr.To(corev1.ContainerRestartPolicyAlways),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr.To[int64](capture.DefaultProxyUID),
			RunAsGroup:               ptr.To[int64](capture.DefaultProxyUID),
			RunAsNonRoot:             ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Privileged:               ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	switch s.template {
	case TemplateGateway:
		// Envoy is the pod's application: nothing waits for the agent
		// to start, and the container is an ordinary one.
		agent.StartupProbe, agent.RestartPolicy = nil, nil
		b.gateway = &agent
	case TemplateSidecar:
		b.initContainers = append(b.initContainers, corev1.Container{
			Name:            CaptureContainer,
			Image:           s.image,
			ImagePullPolicy: in.opts.PullPolicy,
			Command:         []string{agentBinary},
			Args:            append([]string{"capture"}, s.capture.Args()...),
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: defaultCaptureCPU, corev1.ResourceMemory: defaultCaptureMemory},
			},
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			// iptables needs root with NET_ADMIN and NET_RAW in the pod's
			// network namespace, nothing more.
			SecurityContext: &corev1.SecurityContext{
				RunAsUser:                ptr.To[int64](0),
				RunAsGroup:               ptr.To[int64](0),
				RunAsNonRoot:             ptr.To(false),
				AllowPrivilegeEscalation: ptr.To(false),
				ReadOnlyRootFilesystem:   ptr.To(false),
				Privileged:               ptr.To(false),
				Capabilities: &corev1.Capabilities{
					Add:  []corev1.Capability{"NET_ADMIN", "NET_RAW"},
					Drop: []corev1.Capability{"ALL"},
				},
			},
		})
	default:
		b.appEnv = []corev1.EnvVar{{Name: grpcBootstrapEV, Value: grpcBootstrap}}
		b.appMount = &corev1.VolumeMount{Name: VolumeRun, MountPath: runDir, ReadOnly: true}
	}
	if b.gateway == nil {
		b.initContainers = append(b.initContainers, agent)
	}
	b.volumes = []corev1.Volume{
		{Name: VolumeRun, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{Name: VolumePodInfo, VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}},
		}}}},
		{Name: VolumeToken, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: tokenAudience, ExpirationSeconds: ptr.To[int64](tokenExpiry), Path: tokenFile}},
		}}}},
	}
	return b
}

// agentEnv is nave-agent's configuration (spoke/agentconfig's keys), with
// the app containers' original probes (JSON) when any were rewritten and
// the pod's ProxyConfig (drain duration, proxyMetadata — whose entries are
// also the agent's environment, and so Envoy's, as in Istio).
func (in *Injector) agentEnv(mode string, trust Trust, s *podSettings) []corev1.EnvVar {
	v := func(key, value string) corev1.EnvVar { return corev1.EnvVar{Name: settings.EnvName(key), Value: value} }
	field := func(key, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: settings.EnvName(key), ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	env := []corev1.EnvVar{
		v("mode", mode),
	}
	if s.template == TemplateGateway {
		env = append(env, v("proxyType", agentconfig.ProxyRouter))
	}
	env = append(env,
		v("mesh", in.opts.Mesh),
		v("cluster", in.opts.Cluster),
		v("trustDomain", trust.TrustDomain),
	)
	if s.network != "" {
		env = append(env, v("network", s.network))
	}
	if in.opts.DomainSuffix != "" {
		env = append(env, v("domainSuffix", in.opts.DomainSuffix))
	}
	env = append(env,
		field("pod.name", "metadata.name"),
		field("pod.namespace", "metadata.namespace"),
		field("pod.serviceAccount", "spec.serviceAccountName"),
		field("pod.ip", "status.podIP"),
		field("pod.node", "spec.nodeName"),
		v("pod.labelsFile", podInfoDir+"/labels"),
		v("pod.annotationsFile", podInfoDir+"/annotations"),
		v("ra.address", in.opts.RAAddress),
		v("ra.identity", "spiffe://"+trust.TrustDomain+"/nave/cluster/"+in.opts.Cluster),
		v("ra.tokenFile", tokenDir+"/"+tokenFile),
		v("trust.meshRoots", string(trust.MeshRoots)),
		v("trust.hubCA", string(trust.HubCA)),
		v("xds.address", in.opts.XDSAddress),
	)
	if in.opts.XDSServerName != "" {
		env = append(env, v("xds.serverName", in.opts.XDSServerName))
	}
	if in.opts.XDSFallbackAddress != "" {
		env = append(env, v("xds.fallbackAddress", in.opts.XDSFallbackAddress))
	}
	if len(in.opts.XDSReplicas) > 0 {
		env = append(env, v("xds.replicas", strings.Join(in.opts.XDSReplicas, ",")))
	}
	env = append(env, v("dir", runDir), v("status.listen", ":"+strconv.Itoa(statusPort)))
	if s.template == TemplateSidecar {
		env = append(env, v("proxyUID", strconv.Itoa(capture.DefaultProxyUID)))
	}
	if s.appProbes != "" {
		env = append(env, v("appProbes", s.appProbes))
	}
	if s.proxy.drainSet && mode == modeEnvoy {
		env = append(env, v("envoy.drainDuration", s.proxy.drain.String()))
	}
	if pm := s.proxy.metadataJSON(); pm != "" {
		env = append(env, v("proxyMetadata", pm))
		for _, k := range s.proxy.metadataNames() {
			env = append(env, corev1.EnvVar{Name: k, Value: s.proxy.metadata[k]})
		}
	}
	return env
}
