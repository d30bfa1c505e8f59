package routes

import (
	"fmt"
	"strings"

	commonfaultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	networking "istio.io/api/networking/v1alpha3"
)

func fault(f *networking.HTTPFaultInjection) *faultv3.HTTPFault {
	out := &faultv3.HTTPFault{}
	if d := f.GetDelay(); d != nil && d.GetFixedDelay() != nil {
		//lint:ignore SA1019 Istio still honours the deprecated integer percent when percentage is unset
		legacy := d.GetPercent()
		out.Delay = &commonfaultv3.FaultDelay{
			FaultDelaySecifier: &commonfaultv3.FaultDelay_FixedDelay{FixedDelay: d.GetFixedDelay()},
			Percentage:         percent(d.GetPercentage(), legacy),
		}
	}
	if a := f.GetAbort(); a != nil {
		fa := &faultv3.FaultAbort{Percentage: percent(a.GetPercentage(), 0)}
		switch e := a.GetErrorType().(type) {
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			fa.ErrorType = &faultv3.FaultAbort_HttpStatus{HttpStatus: uint32(e.HttpStatus)}
		case *networking.HTTPFaultInjection_Abort_GrpcStatus:
			fa.ErrorType = &faultv3.FaultAbort_GrpcStatus{GrpcStatus: grpcCode(e.GrpcStatus)}
		}
		if fa.ErrorType != nil {
			out.Abort = fa
		}
	}
	return out
}

// percent converts Istio's percentage (0–100, fractional) to Envoy's,
// with millionths precision. Istio: an unset percentage means 100%.
func percent(p *networking.Percent, legacy int32) *typev3.FractionalPercent {
	v := 100.0
	switch {
	case p != nil:
		v = p.GetValue()
	case legacy != 0:
		v = float64(legacy)
	}
	return &typev3.FractionalPercent{Numerator: uint32(v * 10000), Denominator: typev3.FractionalPercent_MILLION}
}

var grpcCodes = map[string]uint32{
	"OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5,
	"ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9, "ABORTED": 10,
	"OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14, "DATA_LOSS": 15, "UNAUTHENTICATED": 16,
}

func grpcCode(s string) uint32 {
	if c, ok := grpcCodes[strings.ToUpper(s)]; ok {
		return c
	}
	var n uint32
	if _, err := fmt.Sscan(s, &n); err == nil {
		return n
	}
	return 14 // UNAVAILABLE
}
