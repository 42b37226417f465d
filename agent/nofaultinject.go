//go:build !faultinject

package agent

// crash is a point where an agent built with -tags faultinject can be
// killed (faultinject.go); the shipped agent does nothing here.
func (a *Agent) crash(string) {}
