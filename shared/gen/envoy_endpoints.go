package gen

// Endpoints generates the proxy's endpoints (work in progress: see issue 5).
func (v *View) Endpoints() []Resource {
	return nil
}
