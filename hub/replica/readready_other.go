//go:build !unix

package replica

// readyState is unused where connections are not read when ready.
type readyState struct{}
