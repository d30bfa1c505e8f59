package gen

// Routes generates the proxy's routes (work in progress: see issue 5).
func (v *View) Routes() []Resource {
	return nil
}
