package e2e

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/internal/manifests"
	"github.com/navemesh/nave/internal/testwait"
)

// TestManifestsStartTheBinaries starts the real nave-hub and nave-spoke
// exactly as the workloads of deploy/examples/vendor-hub, acme-east and
// globex-west start them (the hub's StatefulSet, the spokes' Deployments) (and those of the bases, deploy/hub and
// deploy/spoke), against a real API server the rendered objects
// were applied to: the image's binary (no command: the entrypoint), the
// container's args, its environment (downward-API values resolved) and
// its ConfigMap's config file, each process with the credentials of its
// pod's service account (RBAC as deploy/ grants it), each spoke on an API
// server of its own (its cluster). Both spokes enroll
// with join tokens navectl made and become ready (a spoke's pod replaced
// comes back without a token: its credentials are in a Secret), their injectors serve
// (/debug/inject: the configured proxy image, ready), and the hub holds
// their clusters (both tenants' in the examples), as its operator
// listener shows a vendor operator certificate navectl issued, while its
// plain admin port serves no debug views. So a flag, key or path the binaries no longer take,
// a config that does not validate, RBAC that is missing or a probe the
// binary does not serve fails here, not in a cluster.
//
// What a pod has and a test process cannot is stood in for, minimally
// (launchContainer): each volume mount is a temp dir (ConfigMap files
// written there, the join token written into the Secret's), every other
// absolute path in the config file or args goes under a temp dir standing
// for the read-only root file system (which must stay empty), every
// *.listen and *.*Listen address becomes a free loopback port, the in-cluster
// credentials are a kubeconfig in $KUBECONFIG; for the spokes hub.address
// becomes the hub's loopback spokes port with the name it dialled kept as
// hub.serverName (so the hub's tls.hosts must hold it), and hub.caHash the
// pin navectl prints, as the operator fills in.
func TestManifestsStartTheBinaries(t *testing.T) {
	t.Run("examples", func(t *testing.T) {
		startFromManifests(t, "examples/vendor-hub", "examples/acme-east", "examples/globex-west")
	})
	t.Run("bases", func(t *testing.T) { startFromManifests(t, "hub", "spoke") })
}

// startFromManifests renders the hub's and the spokes' kustomizations
// (paths under deploy/), applies them to a new API server, starts the hub
// and each spoke as their workloads would, and waits until every spoke
// is ready and synced at the hub.
func startFromManifests(t *testing.T, hubDir string, spokeDirs ...string) {
	objs := map[string][]byte{}
	for _, d := range append([]string{hubDir}, spokeDirs...) {
		b, err := manifests.Render(filepath.Join(harness.ModuleRoot(), "deploy", d))
		if err != nil {
			t.Fatal(err)
		}
		objs[d] = b
	}
	// The hub's cluster, and one of its own for each spoke (their
	// objects share names, as in real clusters: Secret
	// nave-system/nave-spoke-credentials, for one).
	crds, err := os.ReadFile(filepath.Join(harness.ModuleRoot(), "deploy", "spoke", "istio-crds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	k := kubetest.Start(t, kubetest.Options{})
	k.Apply(t, crds, objs[hubDir])
	spokeKube := map[string]*kubetest.Cluster{}
	for _, d := range spokeDirs {
		spokeKube[d] = kubetest.Start(t, kubetest.Options{})
		spokeKube[d].Apply(t, crds, objs[d])
	}

	hubC := container(t, objs[hubDir], "nave-hub")
	hubKubeconfig := saKubeconfig(t, k, hubC)
	// Every replica the StatefulSet asks for, each joining the first's
	// gossip port (the headless Service's DNS name stands for them all)
	// with the keyring the operator puts in Secret nave-hub-gossip, each
	// named as the StatefulSet names its pods.
	replicas := workloadReplicas(t, objs[hubDir], "nave-hub")
	keyring := make([]byte, 32)
	if _, err := rand.Read(keyring); err != nil {
		t.Fatal(err)
	}
	var hubHosts []any
	var hubProcs []*launched
	firstGossip := 0
	for i := range replicas {
		gossip := harness.FreePort(t)
		if i == 0 {
			firstGossip = gossip
		}
		p := launchContainer(t, fmt.Sprintf("nave-hub-%d", i), hubC, hubKubeconfig, func(cfg map[string]any) {
			hubHosts, _ = cfg["tls"].(map[string]any)["hosts"].([]any)
			if r, ok := cfg["replicas"].(map[string]any); ok && r["join"] != nil {
				r["bindAddress"], r["bindPort"] = "127.0.0.1", gossip
				r["join"] = []any{addr(firstGossip)}
			}
		}, func(mounts map[string]string) {
			if dir, ok := mounts["/etc/nave-gossip"]; ok {
				if err := os.WriteFile(filepath.Join(dir, "keyring"), []byte(base64.StdEncoding.EncodeToString(keyring)+"\n"), 0o400); err != nil {
					t.Fatal(err)
				}
			}
		}, fmt.Sprintf("NAVE_REPLICAS_ID=nave-hub-%d", i))
		hubProcs = append(hubProcs, p)
	}
	hubProc := hubProcs[0]
	h := &hub{t: t, admin: hubProc.port(t, "admin.listen"), spokes: hubProc.port(t, "spokes.listen"), xds: hubProc.port(t, "xds.listen"),
		navectlState: []string{"--state-store", "kubernetes", "--kubeconfig", hubKubeconfig}, proc: hubProc.Proc}
	for _, p := range hubProcs {
		p.waitReady(t, 60*time.Second)
	}
	pin := h.pin(t)

	var spokes []*launched
	var ids, injects []string       // mesh/cluster and inject.proxyImage ("": no injection) of each spoke
	var relaunch []func() *launched // each spoke's pod again: new volumes, no join token
	for _, d := range spokeDirs {
		c := container(t, objs[d], "nave-spoke")
		var mesh, cluster, proxyImage string
		edit := func(cfg map[string]any) {
			mesh, cluster = cfg["mesh"].(string), cfg["cluster"].(string)
			if inj, ok := cfg["inject"].(map[string]any); ok && inj["enabled"] == true {
				proxyImage, _ = inj["proxyImage"].(string)
			}
			hubCfg := cfg["hub"].(map[string]any)
			host, _, err := net.SplitHostPort(hubCfg["address"].(string))
			if err != nil {
				t.Fatalf("%s: hub.address: %v", d, err)
			}
			hubCfg["address"] = addr(h.spokes)
			if hubCfg["serverName"] == nil || hubCfg["serverName"] == "" {
				hubCfg["serverName"] = host
			}
			hubCfg["caHash"] = pin
		}
		kubeconfig := saKubeconfig(t, spokeKube[d], c)
		s := launchContainer(t, "nave-spoke-"+filepath.Base(d), c, kubeconfig, edit, func(mounts map[string]string) {
			// the Secret nave-spoke-join the operator creates, key token
			tok := h.token(t, mesh, cluster, "10m")
			if err := os.WriteFile(filepath.Join(mounts["/var/run/secrets/nave/join"], "token"), []byte(tok), 0o400); err != nil {
				t.Fatal(err)
			}
		})
		relaunch = append(relaunch, func() *launched {
			return launchContainer(t, "nave-spoke-"+filepath.Base(d)+"-again", c, kubeconfig, edit, func(map[string]string) {})
		})
		spokes = append(spokes, s)
		ids = append(ids, mesh+"/"+cluster)
		injects = append(injects, proxyImage)
	}
	for i, s := range spokes {
		s.waitReady(t, 60*time.Second)
		if injects[i] == "" {
			continue
		}
		// the injector the MutatingWebhookConfiguration calls serves, with trust material
		testwait.For(t, 30*time.Second, func() error {
			var v struct {
				ProxyImage string `json:"proxyImage"`
				NotReady   string `json:"notReady"`
			}
			url := fmt.Sprintf("http://%s/debug/inject", addr(s.port(t, "admin.listen")))
			if err := harness.GetJSON(url, &v); err != nil {
				return err
			}
			if v.ProxyImage != injects[i] || v.NotReady != "" {
				return fmt.Errorf("%s: %+v; want proxyImage %s and ready", url, v, injects[i])
			}
			return nil
		})
	}
	// The hub's debug views are on its operator listener, to operator
	// certificates: the vendor's sees every mesh's clusters.
	if len(hubHosts) == 0 {
		t.Fatal("the hub's config lists no tls.hosts")
	}
	vendor := operatorDeployed(t, h, hubProc.port(t, "admin.operatorListen"), hubHosts[0].(string), "--vendor", "--name", "ops")
	for _, id := range ids {
		testwait.For(t, 30*time.Second, func() error {
			var list []ingest.ClusterStatus
			if err := json.Unmarshal([]byte(vendor("/debug/spokes")), &list); err != nil {
				return err
			}
			for _, c := range list {
				if c.ClusterIdentity.String() == id && c.Connected && c.Synced {
					return nil
				}
			}
			return fmt.Errorf("%s not connected and synced: %+v", id, list)
		})
	}
	if replicas > 1 {
		// the replicas found each other, and every one holds every cluster
		for _, p := range hubProcs {
			op := operatorDeployed(t, h, p.port(t, "admin.operatorListen"), hubHosts[0].(string), "--vendor", "--name", "ops")
			testwait.For(t, 30*time.Second, func() error {
				var v struct {
					Members []struct {
						ID string `json:"id"`
					} `json:"members"`
					Clusters []struct {
						Synced bool `json:"synced"`
					} `json:"clusters"`
				}
				if err := json.Unmarshal([]byte(op("/debug/replicas")), &v); err != nil {
					return err
				}
				synced := 0
				for _, c := range v.Clusters {
					if c.Synced {
						synced++
					}
				}
				if len(v.Members) != replicas || synced != len(ids) {
					return fmt.Errorf("%s: %d members, %d synced clusters; want %d and %d", p.Name, len(v.Members), synced, replicas, len(ids))
				}
				return nil
			})
		}
	}
	// A spoke's pod replaced (new emptyDir, the join token gone, as after
	// the operator deleted Secret nave-spoke-join): it comes back with the
	// credentials it keeps in Secret nave-spoke-credentials and syncs again.
	spokes[0].Stop(10 * time.Second)
	again := relaunch[0]()
	again.waitReady(t, 60*time.Second)
	testwait.For(t, 30*time.Second, func() error {
		var list []ingest.ClusterStatus
		if err := json.Unmarshal([]byte(vendor("/debug/spokes")), &list); err != nil {
			return err
		}
		for _, c := range list {
			if c.ClusterIdentity.String() == ids[0] && c.Connected && c.Synced {
				return nil
			}
		}
		return fmt.Errorf("%s not connected and synced again: %+v", ids[0], list)
	})
	spokes[0] = again
	if code, _, err := get(http.DefaultClient, h.url("/debug/spokes")); err != nil || code != http.StatusNotFound {
		t.Errorf("the plain admin port's /debug/spokes: %d %v; want 404 (debug views only on the operator listener)", code, err)
	}
	for _, l := range append(spokes, hubProcs...) {
		l.checkRootFS(t)
	}
}

// operatorDeployed issues an operator certificate of scope with navectl
// on h's Secrets and returns a getter of paths of the operator listener on
// port, which verifies the hub's certificate (CA from navectl's out dir)
// for serverName, one of its tls.hosts. A failed request returns its
// error text, which no JSON decodes.
func operatorDeployed(t *testing.T, h *hub, port int, serverName string, scope ...string) func(path string) string {
	t.Helper()
	dir := t.TempDir()
	mustNavectl(t, append(append([]string{"operator", "issue", "--out", dir}, h.stateFlags()...), scope...)...)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert-chain.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "hub-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatal("navectl operator issue wrote no hub-ca.pem")
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: serverName, Certificates: []tls.Certificate{cert}}}}
	return func(path string) string {
		code, body, err := get(c, fmt.Sprintf("https://%s%s", addr(port), path))
		if err != nil || code != http.StatusOK {
			return fmt.Sprintf("%s: %d %v %s", path, code, err, body)
		}
		return body
	}
}

// workloadReplicas is spec.replicas of the Deployment or StatefulSet
// nave-system/name in the rendered stream b (1 when unset, as the API
// server defaults it).
func workloadReplicas(t *testing.T, b []byte, name string) int {
	t.Helper()
	objs, err := manifests.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	w, err := manifests.FindWorkload(objs, "nave-system", name)
	if err != nil {
		t.Fatal(err)
	}
	return w.Replicas
}

// container is the one container of workload nave-system/name in the
// rendered stream b, which must start the image's entrypoint.
func container(t *testing.T, b []byte, name string) *manifests.Container {
	t.Helper()
	objs, err := manifests.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	c, err := manifests.ContainerOf(objs, "nave-system", name, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Command) != 0 {
		t.Fatalf("%s: command %q; the workloads run the image's entrypoint (make images), which this test stands in for with bin/%s", name, c.Command, c.Binary)
	}
	return c
}

// saKubeconfig is a kubeconfig acting as c's pod's service account.
func saKubeconfig(t *testing.T, k *kubetest.Cluster, c *manifests.Container) string {
	t.Helper()
	return k.Kubeconfig(t, "system:serviceaccount:nave-system:"+c.ServiceAccount,
		"system:serviceaccounts", "system:serviceaccounts:nave-system", "system:authenticated")
}

// launched is a binary started as a container would be.
type launched struct {
	*harness.Proc
	listen map[string]int // config key (admin.listen, ra.listen, ...) -> loopback port
	rootfs string
	kind   string // the workload's kind
}

func (l *launched) port(t *testing.T, key string) int {
	t.Helper()
	p, ok := l.listen[key]
	if !ok {
		t.Fatalf("%s: the config file sets no %s (it has %v)", l.Name, key, l.listen)
	}
	return p
}

// waitReady waits until l's /healthz/ready answers 200, failing at once
// if l exits.
func (l *launched) waitReady(t *testing.T, deadline time.Duration) {
	t.Helper()
	url := fmt.Sprintf("http://%s/healthz/ready", addr(l.port(t, "admin.listen")))
	testwait.For(t, deadline, func() error {
		select {
		case <-l.Done():
			t.Fatalf("%s exited with code %d before it was ready", l.Name, l.ExitCode())
		default:
		}
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
}

// checkRootFS fails the test if the process wrote outside its volumes
// (the pod's root file system is read-only).
func (l *launched) checkRootFS(t *testing.T) {
	t.Helper()
	var wrote []string
	filepath.WalkDir(l.rootfs, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != l.rootfs {
			wrote = append(wrote, strings.TrimPrefix(p, l.rootfs))
		}
		return nil
	})
	if len(wrote) > 0 {
		t.Errorf("%s wrote %v outside its volumes; its root file system is read-only in the %s", l.Name, wrote, l.kind)
	}
}

// launchContainer starts c's binary as its workload would, with the
// stand-ins TestManifestsStartTheBinaries lists: edit may change the
// parsed config file further, files may write into the volumes' dirs
// (mount path -> dir) before the start.
func launchContainer(t *testing.T, name string, c *manifests.Container, kubeconfig string, edit func(map[string]any), files func(map[string]string), extraEnv ...string) *launched {
	t.Helper()
	work := t.TempDir()
	l := &launched{listen: map[string]int{}, rootfs: filepath.Join(work, "rootfs"), kind: c.Kind}
	if err := os.MkdirAll(l.rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{}
	for mp, m := range c.Mounts {
		dir := filepath.Join(work, "volumes", m.Volume)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range m.Files {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		dirs[mp] = dir
	}
	local := func(p string) string {
		for _, mp := range c.MountPaths() {
			if p == mp || strings.HasPrefix(p, mp+"/") {
				return dirs[mp] + strings.TrimPrefix(p, mp)
			}
		}
		return filepath.Join(l.rootfs, p)
	}
	var args []string
	cfgPath := ""
	for _, a := range c.Args {
		if flag, val, ok := strings.Cut(a, "="); ok && strings.HasPrefix(val, "/") {
			if flag == "--config" {
				cfgPath = local(val)
			}
			a = flag + "=" + local(val)
		}
		args = append(args, a)
	}
	if cfgPath == "" {
		t.Fatalf("%s: args %q name no --config=/PATH", c.Workload, c.Args)
	}
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatalf("%s: --config: %v", c.Workload, err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("%s: %v", c.Workload, err)
	}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			switch v := v.(type) {
			case map[string]any:
				walk(prefix+k+".", v)
			case string:
				switch {
				case strings.HasSuffix(strings.ToLower(k), "listen") && v != "":
					p := harness.FreePort(t)
					l.listen[prefix+k] = p
					m[k] = addr(p)
				case strings.HasPrefix(v, "/"):
					m[k] = local(v)
				}
			}
		}
	}
	walk("", cfg)
	if edit != nil {
		edit(cfg)
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if files != nil {
		files(dirs)
	}
	env := append(append(append([]string{}, c.Env...), extraEnv...), "KUBECONFIG="+kubeconfig)
	l.Proc = harness.StartIn(t, name, l.rootfs, env, binary(c.Binary), args...)
	return l
}
