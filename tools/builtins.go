package tools

import "github.com/callsheet/callsheet/tool"

// Builtins returns the built-in tools this package provides, in the order
// read, write, shell. Each call builds new tools; they are safe for
// concurrent use. The error, which only a broken build could produce, is
// the first tool's *tool.RegistrationError.
func Builtins() ([]*tool.Tool, error) {
	var out []*tool.Tool
	for _, build := range []func() (*tool.Tool, error){newRead, newWrite, newShell} {
		t, err := build()
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}
