package main

import (
	"path/filepath"
)

// clientTarget is the service the demo client calls, as the demo config declares it.
const clientTarget = "xds:///echo.demo.svc.cluster.local:7070"

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

// plan is every process of the demo and how to tell that the control plane is ready.
type plan struct {
	services []spec // hub, spoke, backends: started first, output to log files
	client   spec   // started once the probes pass, output to the terminal
	probes   []probe
}

// makePlan lays out the demo's processes from the options; configDir is absolute.
func makePlan(o options, configDir string) plan {
	bin := func(name string) string { return filepath.Join(o.bin, name) }
	logFile := func(name string) string { return filepath.Join(o.work, name+".log") }

	hub := spec{
		name: "hub",
		path: bin("nave-hub"),
		args: []string{
			"--admin.listen", o.hubAdmin,
			"--spokes.listen", o.hubSpokes,
			"--xds.listen", o.hubXDS,
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
			"--admin.listen", o.spokeAdmin,
		},
		logPath: logFile("spoke"),
	}
	p := plan{
		services: []spec{hub, spoke},
		client: spec{
			name: "client",
			path: bin("nave-demo-client"),
			args: append([]string{
				"--target", clientTarget,
				"--hub", o.hubXDS,
				"--node-id", o.nodeID,
				"--mesh", o.mesh,
			}, o.clientArgs...),
		},
		probes: []probe{
			{name: hub.name, url: "http://" + o.hubAdmin + "/healthz/ready", where: "log: " + hub.logPath},
			{name: spoke.name, url: "http://" + o.spokeAdmin + "/healthz/ready", where: "log: " + spoke.logPath},
		},
	}
	for _, b := range demoBackends() {
		p.services = append(p.services, spec{
			name:    b.name,
			path:    bin("nave-demo-backend"),
			args:    []string{"--listen", b.addr, "--name", b.name},
			logPath: logFile(b.name),
		})
	}
	return p
}
