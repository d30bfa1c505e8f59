package main

// Image is one image make images builds: a binary and what its container offers.
type Image struct {
	// Name is the binary's and the image repository's name (nave-hub); the workloads in
	// deploy/ name the image so, and the binary is the entrypoint /usr/local/bin/<Name>.
	Name string
	// Package is the main package, relative to the module root.
	Package string
	// Ports are the TCP ports the image exposes (its listeners in deploy/'s config).
	Ports []int
	// Binary is the binary's name in the image when it is not Name (nave-proxy holds nave-agent).
	Binary string
	// ProxyBase images are built on the base -proxy-base names (AssembleProxy), not from nothing.
	ProxyBase bool
	// OnlyNamed images are built only when named on the command line: the test node's pod
	// sandbox and the demo apps it runs (internal/kubenode), which nave does not ship.
	OnlyNamed bool
}

// Images are the images make images builds. Adding a binary is one line here; an image whose
// package is not in the tree (yet) is skipped with a note.
var Images = []Image{
	{Name: "nave-hub", Package: "./hub/cmd/nave-hub", Ports: []int{7946, 15010, 15012, 15014, 15015, 15016}},
	{Name: "nave-spoke", Package: "./spoke/cmd/nave-spoke", Ports: []int{15017, 15023, 15024}},
	{Name: "nave-agent", Package: "./spoke/cmd/nave-agent", Ports: []int{15020, 15021}},
	// the sidecar template's image: nave-agent on an Envoy base with iptables (-proxy-base)
	{Name: "nave-proxy", Package: "./spoke/cmd/nave-agent", Binary: "nave-agent", Ports: []int{15020, 15021}, ProxyBase: true},
	{Name: "nave-pause", Package: "./internal/kubenode/pause", OnlyNamed: true},
	{Name: "nave-demo-backend", Package: "./examples/demo/backend", OnlyNamed: true},
	{Name: "nave-demo-client", Package: "./examples/demo/client", OnlyNamed: true},
}
