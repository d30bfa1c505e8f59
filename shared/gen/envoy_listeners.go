package gen

// Listeners generates the proxy's listeners (work in progress: see issue 5).
func (v *View) Listeners() []Resource {
	return nil
}
