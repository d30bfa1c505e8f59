package meshconfig

import (
	"testing"
	"time"

	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
)

func TestProtoDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0.000000000s"},
		{30 * time.Millisecond, "0.030000000s"},
		{90 * time.Minute, "5400.000000000s"},
		{-1500 * time.Millisecond, "-1.500000000s"},
		{time.Nanosecond, "0.000000001s"},
	}
	for _, tt := range tests {
		if got := protoDuration(tt.d); got != tt.want {
			t.Errorf("protoDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestDecodeGoStyleDurations(t *testing.T) {
	o := decodeOne(t, vsHTTP(`- timeout: 1h30m
  retries: {attempts: 3, perTryTimeout: 250ms}
  fault: {delay: {fixedDelay: 7s, percentage: {value: 5}}}
  route: [{destination: {host: r}}]`), "d.yaml")
	r := o.Spec.(*networkingv1alpha3.VirtualService).GetHttp()[0]
	for name, got := range map[string]time.Duration{
		"timeout":       r.GetTimeout().AsDuration(),
		"perTryTimeout": r.GetRetries().GetPerTryTimeout().AsDuration(),
		"fixedDelay":    r.GetFault().GetDelay().GetFixedDelay().AsDuration(),
	} {
		want := map[string]time.Duration{"timeout": 90 * time.Minute, "perTryTimeout": 250 * time.Millisecond, "fixedDelay": 7 * time.Second}[name]
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// Durations inside lists and maps of messages are found too.
	dr := decodeOne(t, object(net, "DestinationRule", `host: r
trafficPolicy:
  portLevelSettings: [{port: {number: 80}, outlierDetection: {interval: 2m}}]`), "d.yaml")
	if got := dr.Spec.(*networkingv1alpha3.DestinationRule).GetTrafficPolicy().GetPortLevelSettings()[0].GetOutlierDetection().GetInterval().AsDuration(); got != 2*time.Minute {
		t.Errorf("interval = %v, want 2m", got)
	}
}
