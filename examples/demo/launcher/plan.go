package main

import (
	"path/filepath"
)

// clientTarget is the service the demo client calls, as the demo config declares it.
const clientTarget = "xds:///echo.demo.svc.cluster.local:7070"

// The demo client's workload identity. Its namespace is the demo config's (and the client's
// default --namespace, which the hub checks against the certificate); its trust domain is
// the one the hub is given for the mesh.
const (
	trustDomain          = "cluster.local"
	clientNamespace      = "demo"
	clientServiceAccount = "demo-client"
)

// backend is one echo instance; its address is the one its WorkloadEntry in the demo
// config names.
type backend struct{ name, addr string }

// demoBackends returns the echo instances of the demo config.
func demoBackends() []backend {
	return []backend{
		{"echo-v1", "127.0.0.1:17071"},
		{"echo-v2", "127.0.0.1:17072"},
		{"echo-v3", "127.0.0.1:17073"},
	}
}

// plan is every process of the demo, how to tell that the control plane is ready, and
// where the state of the secure flow goes (the enrollment steps between the hub and the
// spoke, unless the demo runs in plaintext).
type plan struct {
	hub        spec   // started first, with the backends; output to log files
	backends   []spec //
	spoke      spec   // started once the hub is ready (and the spoke has a join token)
	client     spec   // started once the spoke is ready (and has a certificate); output to the terminal
	hubProbe   probe
	spokeProbe probe
	state      *security
	plaintext  bool // no TLS, no enrollment: navectl is not run
}

// security is where the secure flow keeps its files, all under the work directory, and the
// navectl that makes them.
type security struct {
	navectl     string
	hubState    string // the hub's --state.dir: mesh CAs, serving CA, enrollment state
	spokeState  string // the spoke's --hub.state-dir: its credentials once enrolled
	tokenFile   string // the spoke's one-time join token
	hubCA       string // the hub's serving CA, which the spoke pins and the client trusts
	clientCerts string // the client's workload certificate (navectl cert issue --out)
}

// stateDirs are the directories and files of s that one run makes and the next removes.
func (s *security) stateDirs() []string {
	return []string{s.hubState, s.spokeState, s.tokenFile, s.clientCerts}
}

// makePlan lays out the demo's processes from the options; configDir is absolute.
func makePlan(o options, configDir string) plan {
	bin := func(name string) string { return filepath.Join(o.bin, name) }
	logFile := func(name string) string { return filepath.Join(o.work, name+".log") }
	sec := &security{
		navectl:     bin("navectl"),
		hubState:    filepath.Join(o.work, "hub-state"),
		spokeState:  filepath.Join(o.work, "spoke-state"),
		tokenFile:   filepath.Join(o.work, "join-token"),
		clientCerts: filepath.Join(o.work, "client-certs"),
	}
	// The hub keeps its serving CA as the CA store of a mesh named "hub" in
	// <state.dir>/serving-ca.
	sec.hubCA = filepath.Join(sec.hubState, "serving-ca", "hub", "root-cert.pem")

	hub := spec{
		name: "hub",
		path: bin("nave-hub"),
		args: []string{
			"--admin.listen", o.hubAdmin,
			"--spokes.listen", o.hubSpokes,
			"--xds.listen", o.hubXDS,
			"--state.dir", sec.hubState,
			"--ca.meshes", o.mesh + "=" + trustDomain,
		},
		logPath: logFile("hub"),
	}
	spoke := spec{
		name: "spoke",
		path: bin("nave-spoke"),
		args: []string{
			"--source", "fs://" + configDir,
			"--mesh", o.mesh,
			"--cluster", o.cluster,
			"--hub.address", o.hubSpokes,
			"--hub.state-dir", sec.spokeState,
			"--admin.listen", o.spokeAdmin,
		},
		logPath: logFile("spoke"),
	}
	client := spec{
		name: "client",
		path: bin("nave-demo-client"),
		args: []string{
			"--target", clientTarget,
			"--hub", o.hubXDS,
			"--node-id", o.nodeID,
			"--mesh", o.mesh,
			"--namespace", clientNamespace,
		},
	}
	if o.plaintext {
		hub.args = append(hub.args, "--tls.plaintext")
		spoke.args = append(spoke.args, "--hub.plaintext")
	} else {
		// The spoke's --hub.ca-hash is added once navectl has computed it.
		spoke.args = append(spoke.args, "--hub.token-file", sec.tokenFile)
		client.args = append(client.args, "--xds-cert-dir", sec.clientCerts, "--xds-ca-file", sec.hubCA)
	}
	client.args = append(client.args, o.clientArgs...)

	p := plan{
		hub:        hub,
		spoke:      spoke,
		client:     client,
		hubProbe:   probe{name: hub.name, url: "http://" + o.hubAdmin + "/healthz/ready", where: "log: " + hub.logPath},
		spokeProbe: probe{name: spoke.name, url: "http://" + o.spokeAdmin + "/healthz/ready", where: "log: " + spoke.logPath},
		state:      sec,
		plaintext:  o.plaintext,
	}
	for _, b := range demoBackends() {
		p.backends = append(p.backends, spec{
			name:    b.name,
			path:    bin("nave-demo-backend"),
			args:    []string{"--listen", b.addr, "--name", b.name},
			logPath: logFile(b.name),
		})
	}
	return p
}
