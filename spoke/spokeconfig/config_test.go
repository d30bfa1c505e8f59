package spokeconfig

import (
	"bytes"
	"errors"
	"slices"
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
		"log.level":                       cfg.Log.Level == "info",
		"log.format":                      cfg.Log.Format == "text",
		"admin.listen":                    cfg.Admin.Listen == "127.0.0.1:15024",
		"source":                          cfg.Source == "fs://examples" && cfg.SourcePath() == "examples",
		"mesh":                            cfg.Mesh == "default",
		"cluster":                         cfg.Cluster == "cluster-1",
		"network":                         cfg.Network == "",
		"hub.address":                     cfg.Hub.Address == "127.0.0.1:15012",
		"hub.backoffInitial":              cfg.Hub.BackoffInitial == 250*time.Millisecond,
		"hub.backoffMax":                  cfg.Hub.BackoffMax == 15*time.Second,
		"hub.maxMessageBytes":             cfg.Hub.MaxMessageBytes == 16<<20,
		"hub.plaintext":                   !cfg.Hub.Plaintext,
		"hub.tokenFile":                   cfg.Hub.TokenFile == "",
		"hub.caHash":                      cfg.Hub.CAHash == "",
		"hub.caFile":                      cfg.Hub.CAFile == "",
		"hub.stateDir":                    cfg.Hub.StateDir == "nave-spoke-state",
		"hub.credentialsSecret":           cfg.Hub.CredentialsSecret == "",
		"hub.serverName":                  cfg.Hub.ServerName == "",
		"hub.mode":                        cfg.Hub.Mode == ModePush,
		"hub.pollListen":                  cfg.Hub.PollListen == "0.0.0.0:15026",
		"files.debounce":                  cfg.Files.Debounce == 100*time.Millisecond,
		"files.debounceEdge":              cfg.Files.DebounceEdge == debounce.Leading,
		"files.maxFileBytes":              cfg.Files.MaxFileBytes == 4<<20,
		"kubernetes.kubeconfig":           cfg.Kube.Kubeconfig == "",
		"kubernetes.namespaceSelector":    cfg.Kube.NamespaceSelector == "",
		"domainSuffix":                    cfg.DomainSuffix == "cluster.local",
		"gcPercent":                       cfg.GCPercent == 50,
		"kubernetes.debounce":             cfg.Kube.Debounce == 100*time.Millisecond,
		"kubernetes.debounceEdge":         cfg.Kube.DebounceEdge == debounce.Leading,
		"kubernetes.crdPoll":              cfg.Kube.CRDPoll == 30*time.Second,
		"ra.listen":                       cfg.RA.Listen == "127.0.0.1:15023",
		"ra.audiences":                    strings.Join(cfg.RA.Audiences, ",") == "istio-ca",
		"webhook.listen":                  cfg.Webhook.Listen == "",
		"webhook.hosts":                   strings.Join(cfg.Webhook.Hosts, ",") == "nave-spoke.nave-system.svc",
		"webhook.namespace":               cfg.Webhook.Namespace == "nave-system",
		"webhook.caSecret":                cfg.Webhook.CASecret == "nave-spoke-webhook-ca",
		"webhook.validatingConfiguration": cfg.Webhook.ValidatingConfiguration == "nave-spoke-validation",
		"webhook.certValidity":            cfg.Webhook.CertValidity == 24*time.Hour,
		"webhook.caValidity":              cfg.Webhook.CAValidity == 10*365*24*time.Hour,
		"webhook.maxRequestBytes":         cfg.Webhook.MaxRequestBytes == 8<<20,
		"webhook.mutatingConfiguration":   cfg.Webhook.MutatingConfiguration == "nave-spoke-injection",
		"inject.enabled":                  !cfg.Inject.Enabled,
		"inject.revision":                 cfg.Inject.Revision == "default",
		"inject.proxyImage":               cfg.Inject.ProxyImage == "",
		"inject.pullPolicy":               cfg.Inject.PullPolicy == "",
		"inject.raAddress":                cfg.Inject.RAAddress == "nave-spoke-ra.nave-system.svc:15023",
		"inject.xdsAddress":               cfg.Inject.XDSAddress == "",
		"inject.xdsServerName":            cfg.Inject.XDSServerName == "",
		"inject.xdsFallbackAddress":       cfg.Inject.XDSFallbackAddress == "",
		"inject.xdsReplicas":              len(cfg.Inject.XDSReplicas) == 0,
		"inject.rewriteAppProbes":         cfg.Inject.RewriteAppProbes,
		"fallback.enabled":                !cfg.Fallback.Enabled,
		"fallback.listen":                 cfg.Fallback.Listen == ":15010",
		"fallback.after":                  cfg.Fallback.After == 5*time.Second,
		"fallback.handBackAfter":          cfg.Fallback.HandBackAfter == 30*time.Second,
		"fallback.drain":                  cfg.Fallback.Drain == 10*time.Second,
		"fallback.serverNames":            len(cfg.Fallback.ServerNames) == 0 && cfg.FallbackServerNames() == nil,
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
		{[]string{"--log.level=trace"}, "log.level", "must be debug, info, warn or error"},
		{[]string{"--admin.listen=nowhere"}, "admin.listen", "must be host:port"},
		{[]string{"--source=k8s://in-cluster"}, "source", `want "kubernetes" or fs://DIR`},
		{[]string{"--source=kubernetes", "--kubernetes.debounce=0s"}, "kubernetes.debounce", "greater than 0"},
		{[]string{"--source=kubernetes", "--kubernetes.crd-poll=-1s"}, "kubernetes.crdPoll", "greater than 0"},
		{[]string{"--source=kubernetes", "--kubernetes.debounce-edge=late"}, "kubernetes.debounceEdge", "must be leading or trailing"},
		{[]string{"--source=fs://"}, "source", "names no directory"},
		{[]string{"--source="}, "source", "is required"},
		{[]string{"--mesh=Prod"}, "mesh", "is not a DNS label"},
		{[]string{"--mesh="}, "mesh", "is required"},
		{[]string{"--cluster=" + strings.Repeat("c", 64)}, "cluster", "is not a DNS label"},
		{[]string{"--cluster=east-"}, "cluster", "is not a DNS label"},
		{[]string{"--network=net 1"}, "network", "is not a label value"},
		{[]string{"--gc-percent=-1"}, "gcPercent", "must be 0 (the Go default) or more"},
		{[]string{"--hub.address=hub"}, "hub.address", "must be host:port"},
		{[]string{"--hub.mode=pull"}, "hub.mode", `must be push or polled, got "pull"`},
		{[]string{"--hub.mode=polled", "--hub.poll-listen=15026"}, "hub.pollListen", "must be host:port"},
		{[]string{"--hub.backoff-initial=0s"}, "hub.backoffInitial", "must be greater than 0"},
		{[]string{"--hub.backoff-max=100ms"}, "hub.backoffMax", "must be at least backoffInitial"},
		{[]string{"--hub.max-message-bytes=10"}, "hub.maxMessageBytes", "must be at least 1024"},
		{[]string{"--hub.ca-hash=sha256:abc"}, "hub.caHash", "want sha256:<64 hex digits>, as printed by navectl ca-hash"},
		{[]string{"--hub.ca-hash=" + strings.Repeat("a", 64)}, "hub.caHash", "is not a CA hash"},
		{[]string{"--hub.ca-hash=" + pin, "--hub.ca-file=ca.pem"}, "hub.caFile", "set caHash or caFile, not both"},
		{[]string{"--hub.state-dir="}, "hub.stateDir", "is required unless plaintext is set"},
		{[]string{"--source=kubernetes", "--hub.credentials-secret=nave-spoke-credentials"}, "hub.credentialsSecret", "is not <namespace>/<name> of a Secret"},
		{[]string{"--source=kubernetes", "--hub.credentials-secret=nave-system/Creds"}, "hub.credentialsSecret", "is not <namespace>/<name> of a Secret"},
		{[]string{"--hub.credentials-secret=nave-system/creds"}, "hub.credentialsSecret", `a Secret needs source "kubernetes"`},
		{[]string{"--hub.server-name=hub.example:15012"}, "hub.serverName", `want the name alone ("hub.example")`},
		{[]string{"--webhook.listen=0.0.0.0:15017"}, "webhook.listen", `the webhooks need source "kubernetes"`},
		{[]string{"--source=kubernetes", "--webhook.listen=15017"}, "webhook.listen", "must be host:port"},
		{[]string{"--webhook.hosts="}, "webhook.hosts", "at least one"},
		{[]string{"--webhook.hosts=nave-spoke.nave-system.svc,Spoke_1"}, "webhook.hosts", `"Spoke_1" is neither an IP address nor a lowercase DNS name`},
		{[]string{"--webhook.namespace=nave.system"}, "webhook.namespace", "not a namespace name"},
		{[]string{"--webhook.ca-secret=CA"}, "webhook.caSecret", "not a Secret name"},
		{[]string{"--webhook.validating-configuration=a b"}, "webhook.validatingConfiguration", "not an object name"},
		{[]string{"--webhook.cert-validity=500ms"}, "webhook.certValidity", "at least 1s"},
		{[]string{"--webhook.cert-validity=1h", "--webhook.ca-validity=3h"}, "webhook.caValidity", "at least 4 times certValidity (4h0m0s)"},
		{[]string{"--webhook.max-request-bytes=1000"}, "webhook.maxRequestBytes", "at least 65536"},
		{[]string{"--ra.listen=15023"}, "ra.listen", "must be host:port"},
		{[]string{"--webhook.mutating-configuration=a b"}, "webhook.mutatingConfiguration", "not an object name"},
		{[]string{"--inject.enabled", "--inject.proxy-image=p", "--inject.xds-address=h:1"}, "inject.enabled", `the injector needs source "kubernetes"`},
		{[]string{"--source=kubernetes", "--inject.enabled", "--inject.proxy-image=p", "--inject.xds-address=h:1"}, "inject.enabled", "set webhook.listen"},
		{[]string{"--source=kubernetes", "--inject.enabled", "--inject.proxy-image=p", "--inject.xds-address=h:1", "--webhook.listen=:1", "--hub.plaintext"}, "inject.enabled", "unset hub.plaintext"},
		{[]string{"--inject.enabled", "--inject.xds-address=h:1"}, "inject.proxyImage", "is required with enabled"},
		{[]string{"--inject.enabled", "--inject.proxy-image=p"}, "inject.xdsAddress", "is required with enabled"},
		{[]string{"--inject.xds-address=hub"}, "inject.xdsAddress", "must be host:port"},
		{[]string{"--inject.ra-address=ra"}, "inject.raAddress", "must be host:port"},
		{[]string{"--inject.revision=a b"}, "inject.revision", "not a label value"},
		{[]string{"--inject.pull-policy=Sometimes"}, "inject.pullPolicy", "want Always, IfNotPresent or Never"},
		{[]string{"--inject.xds-server-name=hub:1"}, "inject.xdsServerName", "want the name alone"},
		{[]string{"--ra.audiences="}, "ra.audiences", "must name at least one audience"},
		{[]string{"--fallback.listen=15010"}, "fallback.listen", "must be host:port"},
		{[]string{"--inject.xds-fallback-address=spoke"}, "inject.xdsFallbackAddress", "must be host:port"},
		{[]string{"--inject.xds-replicas=nave-hub-0"}, "inject.xdsReplicas", "want NAME=HOST:PORT"},
		{[]string{"--fallback.after=0s"}, "fallback.after", "must be greater than 0"},
		{[]string{"--fallback.hand-back-after=-1s"}, "fallback.handBackAfter", "must not be negative"},
		{[]string{"--fallback.drain=-1s"}, "fallback.drain", "must not be negative"},
		{[]string{"--fallback.server-names=*.spoke.example"}, "fallback.serverNames", `"*.spoke.example" is neither an IP address nor a DNS name`},
		{[]string{"--fallback.server-names=a.example,b.example,c.example,d.example,10.0.0.1"}, "fallback.serverNames", "lists 5 names; a cluster certificate carries at most 4"},
		{[]string{"--hub.plaintext=maybe"}, "hub.plaintext", "not a boolean"},
		{[]string{"--files.debounce=-1s"}, "files.debounce", "must be greater than 0"},
		{[]string{"--files.debounce-edge=early"}, "files.debounceEdge", "must be leading or trailing"},
		{[]string{"--files.max-file-bytes=1000"}, "files.maxFileBytes", "must be at least 1024"},
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

// pin is a well-formed CA hash.
var pin = "sha256:" + strings.Repeat("0f", 32)

func TestHubTLSSettings(t *testing.T) {
	var cfg Config
	args := []string{"--hub.ca-hash=" + strings.ToUpper(pin), "--hub.token-file=/var/run/nave/token",
		"--hub.state-dir=/var/lib/nave-spoke", "--hub.server-name=hub.example"}
	if err := settings.Load(Program, &cfg, args, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if cfg.Hub.CAHash != pin {
		t.Errorf("caHash = %q, want it in lowercase: %q", cfg.Hub.CAHash, pin)
	}
	if cfg.Hub.TokenFile != "/var/run/nave/token" || cfg.Hub.StateDir != "/var/lib/nave-spoke" || cfg.Hub.ServerName != "hub.example" {
		t.Errorf("hub = %+v", cfg.Hub)
	}
	// An IPv6 literal is a name, not host:port.
	if err := settings.Load(Program, &cfg, []string{"--hub.server-name=::1"}, &bytes.Buffer{}); err != nil {
		t.Errorf("serverName ::1: %v", err)
	}
	// Plaintext needs none of the TLS settings.
	if err := settings.Load(Program, &cfg, []string{"--hub.plaintext", "--hub.state-dir="}, &bytes.Buffer{}); err != nil || !cfg.Hub.Plaintext {
		t.Errorf("plaintext without a state dir: %v (plaintext %v)", err, cfg.Hub.Plaintext)
	}
	// So does a file of the hub's CA.
	if err := settings.Load(Program, &cfg, []string{"--hub.ca-file=/etc/nave/hub-ca.pem"}, &bytes.Buffer{}); err != nil {
		t.Errorf("caFile: %v", err)
	}
}

func TestLongestLabelIsAccepted(t *testing.T) {
	var cfg Config
	args := []string{"--cluster=" + strings.Repeat("c", 63), "--mesh=m-1"}
	if err := settings.Load(Program, &cfg, args, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
}

func TestFallbackServerNames(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want []string
	}{
		{Config{Fallback: Fallback{Enabled: false, ServerNames: []string{"fb.example"}}}, nil},
		{Config{Fallback: Fallback{Enabled: true, ServerNames: []string{"fb.example", "10.0.0.1"}}, Inject: Inject{XDSFallbackAddress: "other.example:15010"}}, []string{"fb.example", "10.0.0.1"}},
		{Config{Fallback: Fallback{Enabled: true}, Inject: Inject{XDSFallbackAddress: "nave-spoke.nave-system.svc:15010"}}, []string{"nave-spoke.nave-system.svc"}},
		{Config{Fallback: Fallback{Enabled: true}}, nil},
	} {
		if got := tc.cfg.FallbackServerNames(); !slices.Equal(got, tc.want) {
			t.Errorf("FallbackServerNames(%+v, %+v) = %v, want %v", tc.cfg.Fallback, tc.cfg.Inject, got, tc.want)
		}
	}
}
