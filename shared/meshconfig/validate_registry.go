package meshconfig

import (
	"strings"

	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

func validateRegistryService(c *checker, p path, s *meshconfigv1.Service) {
	if s.GetHostname() == "" {
		c.fail(p.field("hostname"), "hostname is required")
	} else if reason := checkHost(s.GetHostname(), hostRules{}); reason != "" {
		c.fail(p.field("hostname"), "%s", reason)
	}
	for i, port := range s.GetPorts() {
		checkPort(c, p.field("ports").index(i).field("number"), port.GetNumber())
		if t := port.GetTargetPort(); t != 0 {
			checkPort(c, p.field("ports").index(i).field("targetPort"), t)
			if port.GetTargetPortName() != "" {
				c.fail(p.field("ports").index(i).field("targetPortName"), "targetPortName and targetPort are exclusive")
			}
		}
	}
	for i, a := range s.GetExternalAddresses() {
		if reason := checkHost(a, hostRules{}); reason != "" || strings.HasPrefix(a, "*") {
			c.fail(p.field("externalAddresses").index(i), "%q is neither an IP address nor a host name", a)
		}
	}
}

func validateRegistryWorkload(c *checker, p path, w *meshconfigv1.Workload) {
	if w.GetAddress() == "" {
		c.fail(p.field("address"), "address is required")
	}
	for _, name := range sortedMapKeys(w.GetPorts()) {
		checkPort(c, p.field("ports").key(name), w.GetPorts()[name])
	}
}
