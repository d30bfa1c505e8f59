package gen

import (
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// jwtFilter is the workload's JWT authentication filter; nil when no
// RequestAuthentication applies.
func (v *View) jwtFilter() *hcmv3.HttpFilter {
	return nil
}
