package hubconfig

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/shared/debounce"
	"github.com/navemesh/nave/shared/settings"
)

func TestDefaultsValidate(t *testing.T) {
	var cfg Config
	if err := settings.Load(Program, &cfg, nil, &bytes.Buffer{}); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	checks := map[string]bool{
		"log.level":                     cfg.Log.Level == "info",
		"log.format":                    cfg.Log.Format == "text",
		"admin.listen":                  cfg.Admin.Listen == "127.0.0.1:15014",
		"admin.operatorListen":          cfg.Admin.OperatorListen == "",
		"spokes.listen":                 cfg.Spokes.Listen == "127.0.0.1:15012",
		"spokes.maxMessageBytes":        cfg.Spokes.MaxMessageBytes == 16<<20,
		"spokes.poll":                   len(cfg.Spokes.Poll) == 0,
		"spokes.pollBackoffInitial":     cfg.Spokes.PollBackoffInitial == 250*time.Millisecond,
		"spokes.pollBackoffMax":         cfg.Spokes.PollBackoffMax == 15*time.Second,
		"xds.listen":                    cfg.XDS.Listen == "127.0.0.1:15010",
		"xds.defaultMesh":               cfg.XDS.DefaultMesh == "default",
		"xds.sendTimeout":               cfg.XDS.SendTimeout == 30*time.Second,
		"xds.admissionRate":             cfg.XDS.AdmissionRate == 500,
		"xds.admissionBurst":            cfg.XDS.AdmissionBurst == 100,
		"xds.maxInflightBytes":          cfg.XDS.MaxInflightBytes == 64<<20,
		"ingest.staleGracePeriod":       cfg.Ingest.StaleGracePeriod == 10*time.Minute,
		"ingest.startupGrace":           cfg.Ingest.StartupGrace == 30*time.Second,
		"push.debounceQuiet":            cfg.Push.DebounceQuiet == 100*time.Millisecond,
		"push.debounceMax":              cfg.Push.DebounceMax == time.Second,
		"push.debounceEdge":             cfg.Push.DebounceEdge == debounce.Leading,
		"push.verifyIncremental":        !cfg.Push.VerifyIncremental,
		"push.adaptive":                 !cfg.Push.Adaptive,
		"push.maxConcurrentGenerations": cfg.Push.MaxConcurrentGenerations == 0,
		"state.dir":                     cfg.State.Dir == "nave-hub-state",
		"state.store":                   cfg.State.Store == StoreDir,
		"state.namespace":               cfg.State.Namespace == "nave-system",
		"state.kubeconfig":              cfg.State.Kubeconfig == "",
		"state.meshRefreshInterval":     cfg.State.MeshRefreshInterval == 2*time.Second,
		"tls.plaintext":                 !cfg.TLS.Plaintext,
		"tls.hosts":                     strings.Join(cfg.TLS.Hosts, ",") == "localhost,127.0.0.1,::1",
		"tls.handshakeTimeout":          cfg.TLS.HandshakeTimeout == 10*time.Second,
		"ca.meshes":                     strings.Join(cfg.CA.Meshes, ",") == "default=cluster.local",
		"ca.workloadCertTTL":            cfg.CA.WorkloadCertTTL == 24*time.Hour,
		"ca.refreshInterval":            cfg.CA.RefreshInterval == 30*time.Second,
		"ca.clusterCertTTL":             cfg.CA.ClusterCertTTL == 24*time.Hour,
		"ca.store":                      cfg.CA.Store == StoreDir,
		"ca.namespace":                  cfg.CA.Namespace == "nave-system",
		"ca.kubeconfig":                 cfg.CA.Kubeconfig == "",
		"replicas.id":                   cfg.Replicas.ID == "",
		"replicas.join":                 len(cfg.Replicas.Join) == 0 && !cfg.Replicas.Enabled(),
		"replicas.bindAddress":          cfg.Replicas.BindAddress == "0.0.0.0",
		"replicas.bindPort":             cfg.Replicas.BindPort == 7946,
		"replicas.advertiseAddress":     cfg.Replicas.AdvertiseAddress == "",
		"replicas.relayListen":          cfg.Replicas.RelayListen == "0.0.0.0:15016",
		"replicas.keyringFile":          cfg.Replicas.KeyringFile == "",
		"replicas.insecureGossip":       !cfg.Replicas.InsecureGossip,
		"replicas.readyTimeout":         cfg.Replicas.ReadyTimeout == time.Minute,
		"replicas.rejoinInterval":       cfg.Replicas.RejoinInterval == 10*time.Second,
		"replicas.shedRate":             cfg.Replicas.ShedRate == 5,
		"replicas.shedTolerance":        cfg.Replicas.ShedTolerance == 0.1,
		"replicas.spokeShedRate":        cfg.Replicas.SpokeShedRate == 0.2,
		"replicas.spokeMinAge":          cfg.Replicas.SpokeMinAge == time.Minute,
		"replicas.spokeAddress":         cfg.Replicas.SpokeAddress == "",
		"xds.maxConnectionAge":          cfg.XDS.MaxConnectionAge == 0,
		"sds.mintKeys":                  !cfg.SDS.MintKeys,
		"limits.objectsPerKind":         cfg.Limits.ObjectsPerKind == 20000,
		"limits.proxies":                cfg.Limits.Proxies == 10000,
		"limits.spokes":                 cfg.Limits.Spokes == 500,
		"limits.pushesPerSecond":        cfg.Limits.PushesPerSecond == 50,
		"memory.idleRelease":            cfg.Memory.IdleRelease == 30*time.Second,
	}
	if got := cfg.CA.ParsedMeshes(); len(got) != 1 || got[0] != (Mesh{"default", "cluster.local"}) {
		t.Errorf("ParsedMeshes() = %v", got)
	}
	for key, ok := range checks {
		if !ok {
			t.Errorf("%s has the wrong default: %+v", key, cfg)
		}
	}
	if n := len(settings.Reference(Program, cfg)); n != len(checks) {
		t.Errorf("%d keys, the test checks %d", n, len(checks))
	}
}

func TestBadValuesAreRefused(t *testing.T) {
	tests := []struct {
		args   []string
		key    string
		reason string
	}{
		{[]string{"--log.level=loud"}, "log.level", "must be debug, info, warn or error"},
		{[]string{"--log.format=xml"}, "log.format", "must be text or json"},
		{[]string{"--admin.listen=15014"}, "admin.listen", "must be host:port"},
		{[]string{"--admin.operator-listen=15015"}, "admin.operatorListen", "must be host:port"},
		{[]string{"--admin.operator-listen=127.0.0.1:15015", "--tls.plaintext"}, "admin.operatorListen", "needs TLS"},
		{[]string{"--spokes.listen=localhost:http"}, "spokes.listen", "must be host:port"},
		{[]string{"--spokes.max-message-bytes=1023"}, "spokes.maxMessageBytes", "must be at least 1024"},
		{[]string{"--spokes.poll=default/a"}, "spokes.poll", `"default/a": want MESH/CLUSTER=HOST:PORT`},
		{[]string{"--spokes.poll=a=127.0.0.1:1"}, "spokes.poll", `"a" is not MESH/CLUSTER`},
		{[]string{"--spokes.poll=default/Cluster_A=127.0.0.1:1"}, "spokes.poll", `cluster "Cluster_A"`},
		{[]string{"--spokes.poll=default/a=15030"}, "spokes.poll", `address "15030" is not HOST:PORT`},
		{[]string{"--spokes.poll=default/a=h:1,default/a=h:2"}, "spokes.poll", "default/a is listed twice (h:1 and h:2)"},
		{[]string{"--spokes.poll=default/a=h:1,default/b=h:1"}, "spokes.poll", "h:1 is the address of default/a and of default/b"},
		{[]string{"--spokes.poll=acme/a=h:1"}, "spokes.poll", `mesh "acme" of acme/a is not a mesh of ca.meshes (default)`},
		{[]string{"--spokes.poll-backoff-initial=0s"}, "spokes.pollBackoffInitial", "must be greater than 0"},
		{[]string{"--spokes.poll-backoff-max=100ms"}, "spokes.pollBackoffMax", "must be at least pollBackoffInitial"},
		{[]string{"--xds.listen=:99999"}, "xds.listen", "must be host:port"},
		{[]string{"--xds.default-mesh="}, "xds.defaultMesh", "is required"},
		{[]string{"--ingest.stale-grace-period=0s"}, "ingest.staleGracePeriod", "must be greater than 0"},
		{[]string{"--ingest.startup-grace=-1s"}, "ingest.startupGrace", "must not be negative"},
		{[]string{"--push.debounce-quiet=0s"}, "push.debounceQuiet", "must be greater than 0"},
		{[]string{"--push.debounce-quiet=2s", "--push.debounce-max=1s"}, "push.debounceMax", "must be at least debounceQuiet"},
		{[]string{"--push.debounce-edge=middle"}, "push.debounceEdge", `must be leading or trailing, got "middle"`},
		{[]string{"--limits.objects-per-kind=0"}, "limits.objectsPerKind", "must be greater than 0"},
		{[]string{"--limits.pushes-per-second=-1"}, "limits.pushesPerSecond", "must be greater than 0"},
		{[]string{"--memory.idle-release=-1s"}, "memory.idleRelease", "must be 0 (never) or more"},
		{[]string{"--tls.hosts=hub.example.com,under_score"}, "tls.hosts", `"under_score" is neither an IP address nor a DNS name`},
		{[]string{"--tls.handshake-timeout=0s"}, "tls.handshakeTimeout", "must be greater than 0"},
		{[]string{"--ca.meshes=acme"}, "ca.meshes", `"acme": want MESH=TRUSTDOMAIN`},
		{[]string{"--ca.meshes=Acme=acme.example"}, "ca.meshes", "mesh name"},
		{[]string{"--ca.meshes=acme=acme..example"}, "ca.meshes", "trust domain"},
		{[]string{"--ca.meshes=a=x.example,a=y.example"}, "ca.meshes", `mesh "a" is listed twice`},
		{[]string{"--ca.meshes=a=x.example,b=x.example"}, "ca.meshes", `trust domain "x.example" is listed for two meshes`},
		{[]string{"--ca.cluster-cert-ttl=30s"}, "ca.clusterCertTTL", "must be at least 1m"},
		{[]string{"--ca.store=etcd"}, "ca.store", `must be dir or kubernetes, got "etcd"`},
		{[]string{"--ca.store=kubernetes", "--ca.namespace=Nave_System"}, "ca.namespace", `"Nave_System" is not a namespace name`},
		{[]string{"--ca.store=kubernetes", "--ca.namespace="}, "ca.namespace", `"" is not a namespace name`},
		{[]string{"--ca.kubeconfig=/etc/kubeconfig"}, "ca.kubeconfig", "is used only with ca.store=kubernetes, but ca.store is dir"},
		{[]string{"--state.store=etcd"}, "state.store", `must be dir or kubernetes, got "etcd"`},
		{[]string{"--state.store=kubernetes", "--state.namespace=Nave_System"}, "state.namespace", `"Nave_System" is not a namespace name`},
		{[]string{"--state.kubeconfig=/etc/kubeconfig", "--ca.store=kubernetes"}, "state.kubeconfig", "is used only with state.store=kubernetes, but state.store is dir"},
		{[]string{"--replicas.join=hub-0"}, "replicas.keyringFile", "name the gossip keyring file"},
		{[]string{"--replicas.join=hub-0", "--replicas.insecure-gossip", "--replicas.id=Hub_0"}, "replicas.id", `"Hub_0" is not a DNS label`},
		{[]string{"--replicas.join=hub-0", "--replicas.insecure-gossip", "--replicas.bind-address=any"}, "replicas.bindAddress", `"any" is not an IP address`},
		{[]string{"--replicas.join=hub-0", "--replicas.insecure-gossip", "--replicas.bind-port=0"}, "replicas.bindPort", "must be a port"},
		{[]string{"--replicas.join=hub-0", "--replicas.insecure-gossip", "--replicas.relay-listen=15016"}, "replicas.relayListen", "must be host:port"},
		{[]string{"--replicas.join=hub-0", "--replicas.insecure-gossip", "--replicas.ready-timeout=0s"}, "replicas.readyTimeout", "must be greater than 0"},
		{[]string{"--replicas.join=hub-0", "--replicas.insecure-gossip", "--replicas.shed-rate=-1"}, "replicas.shedRate", "must be 0 (never shed) or more"},
		{[]string{"--replicas.join=hub-0", "--replicas.insecure-gossip", "--replicas.spoke-shed-rate=-0.5"}, "replicas.spokeShedRate", "must be 0 (never move a spoke) or more"},
		{[]string{"--replicas.join=hub-0", "--replicas.insecure-gossip", "--replicas.spoke-min-age=-1s"}, "replicas.spokeMinAge", "must not be negative"},
		{[]string{"--replicas.join=hub-0", "--replicas.insecure-gossip", "--replicas.spoke-address=hub-0"}, "replicas.spokeAddress", "must be host:port"},
		{[]string{"--xds.max-connection-age=-1s"}, "xds.maxConnectionAge", "must not be negative"},
		{[]string{"--tls.plaintext", "--ca.meshes=acme=acme.example,beta=beta.example"}, "xds.defaultMesh", `with tls.plaintext it must be a mesh of ca.meshes (acme, beta), got "default"`},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			var cfg Config
			err := settings.Load(Program, &cfg, tc.args, &bytes.Buffer{})
			var ke *settings.KeyError
			if !errors.As(err, &ke) || ke.Key != tc.key || !strings.Contains(ke.Reason, tc.reason) {
				t.Fatalf("got %v, want %s: %s", err, tc.key, tc.reason)
			}
		})
	}
}

func TestPlaintextDefaultMeshAmongTheMeshes(t *testing.T) {
	var cfg Config
	args := []string{"--tls.plaintext", "--ca.meshes=acme=acme.example,beta=beta.example", "--xds.default-mesh=beta"}
	if err := settings.Load(Program, &cfg, args, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.CA.MeshNames(), ","); got != "acme,beta" {
		t.Errorf("MeshNames() = %s, want acme,beta", got)
	}
	// With TLS the certificate decides a proxy's mesh: the default is not checked.
	if err := settings.Load(Program, &cfg, []string{"--ca.meshes=acme=acme.example"}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
}

func TestKubernetesStoreAccepted(t *testing.T) {
	var cfg Config
	args := []string{"--ca.store=kubernetes", "--ca.namespace=nave-hub", "--ca.kubeconfig=/etc/kubeconfig"}
	if err := settings.Load(Program, &cfg, args, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if cfg.CA.Store != StoreKubernetes || cfg.CA.Namespace != "nave-hub" || cfg.CA.Kubeconfig != "/etc/kubeconfig" {
		t.Errorf("got %+v", cfg.CA)
	}
	args = []string{"--state.store=kubernetes", "--state.namespace=nave-hub", "--state.kubeconfig=/etc/kubeconfig"}
	if err := settings.Load(Program, &cfg, args, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if cfg.State.Store != StoreKubernetes || cfg.State.Namespace != "nave-hub" || cfg.State.Kubeconfig != "/etc/kubeconfig" {
		t.Errorf("got %+v", cfg.State)
	}
}
