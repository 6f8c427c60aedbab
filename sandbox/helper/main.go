// Command helper is the sandbox's first process, a small binary of its own
// so that a sandbox does not start the node's whole binary (docs/security.md
// "Sandbox", "The helper binary"): package sandbox and what it imports, no
// more. The node starts it with the arguments and descriptors the sandbox
// gives it; run by hand it prints its protocol and exits.
//
// A node finds it beside its own executable as callsheet-sandbox-helper (the
// Docker image puts it there), at $CALLSHEET_SANDBOX_HELPER, or builds it
// from its own sources with the go command when it runs from a checkout; else
// it starts its own binary as the helper.
//
//	go build -o callsheet-sandbox-helper ./sandbox/helper
package main

import (
	"fmt"
	"os"

	"github.com/callsheet/callsheet/sandbox"
)

func main() {
	sandbox.Main() // the helper's work; returns only when not started as one
	fmt.Fprintf(os.Stderr, "callsheet-sandbox-helper: protocol %s; the node starts this program, do not run it by hand\n", sandbox.HelperProtocol())
	os.Exit(2)
}
