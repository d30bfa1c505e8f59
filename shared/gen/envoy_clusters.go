package gen

// Clusters generates the proxy's clusters (work in progress: see issue 5).
func (v *View) Clusters() []Resource {
	return nil
}
