package sandbox

import "os"

// init dispatches the helpers before the rest of the binary initializes:
// a node's packages (NATS server, metrics, the tool registry) take several
// milliseconds to initialize, which every sandboxed call would pay for
// nothing. Package initialization follows import paths, and this package
// imports little, so it runs early; Main dispatches the same way for a
// binary where it does not.
func init() {
	if len(os.Args) >= 2 && (os.Args[1] == NamespaceArg || os.Args[1] == SpawnerArg || os.Args[1] == HelperArg || os.Args[1] == noopArg || os.Args[1] == protocolArg || os.Args[1] == ReaperArg) {
		dispatch()
	}
}
