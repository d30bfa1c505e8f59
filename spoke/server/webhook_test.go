package server

import (
	"testing"

	"github.com/navemesh/nave/spoke/spokeconfig"
)

func TestRALoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		listen, address string
		want            bool
	}{
		{"127.0.0.1:15023", "nave-spoke-ra.nave-system.svc:15023", true},
		{"", "nave-spoke-ra.nave-system.svc:15023", true},
		{"0.0.0.0:15023", "nave-spoke-ra.nave-system.svc:15023", false},
		{":15023", "nave-spoke-ra.nave-system.svc:15023", false},
		{"127.0.0.1:15023", "127.0.0.1:15023", false}, // tests: pods on the same host
		{"[::1]:15023", "10.0.0.1:15023", true},
	} {
		var cfg spokeconfig.Config
		cfg.RA.Listen, cfg.Inject.RAAddress = tc.listen, tc.address
		if got := raLoopbackOnly(cfg); got != tc.want {
			t.Errorf("ra.listen %q, inject.raAddress %q: %v, want %v", tc.listen, tc.address, got, tc.want)
		}
	}
}
