package meshconfig

// validateGatewayAPI checks a Gateway API object's spec. Decoding it into
// its Go type already refused unknown and mistyped fields; the rules the
// API server's CRD schema enforces on the Kubernetes path are checked
// here for the files path and the webhook.
func validateGatewayAPI(c *checker, p path, o *Object) {
	if _, err := GatewayAPISpec(o); err != nil {
		c.fail(p, "%v", err)
	}
}
