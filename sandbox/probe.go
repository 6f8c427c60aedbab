package sandbox

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"

	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// ABI versions at which Landlock learnt to restrict what the sandbox uses.
const (
	// abiRefer (Linux 5.19) lets a command rename and link files between
	// directories it may write; below it Landlock refuses every such
	// rename, even inside the workspace.
	abiRefer = 2
	// abiNetwork (Linux 6.7) restricts TCP connect and bind.
	abiNetwork = 4
	// abiScoped (Linux 6.12) restricts signals and abstract UNIX sockets
	// across the sandbox boundary.
	abiScoped = 6
	// abiUDP restricts UDP bind, connect and send.
	abiUDP = 10
)

// Status is what Landlock can do on this kernel, as Probe found it.
type Status struct {
	// ABI is the Landlock ABI version the sandbox enforces: the kernel's,
	// lowered to 5 when the kernel lacks the fix for signal scoping (as
	// go-landlock does), capped at the newest version go-landlock knows.
	// 0 means Landlock is unavailable.
	ABI int
	// Reason says why Landlock is unavailable; empty when it is available.
	Reason string
	// FS reports that writes outside the writable directories are
	// refused (ABI 1 and later).
	FS bool
	// Network reports that TCP connect and bind can be refused (ABI 4 and
	// later). Without it, a sandboxed command reaches the network whatever
	// Spec.Network says.
	Network bool
	// UDP reports that UDP can be refused as well (ABI 10 and later).
	UDP bool
	// IPC reports that signals to processes outside the sandbox, and
	// connections to abstract UNIX sockets made outside it, are refused
	// (ABI 6 and later).
	IPC bool
}

// Available reports whether commands can be sandboxed at all.
func (s Status) Available() bool { return s.ABI > 0 }

// String describes the status in one line, for the node's start-up log:
// "Landlock ABI 7: restricts file writes, TCP, signals and abstract UNIX
// sockets; cannot restrict UDP (needs ABI 10)".
func (s Status) String() string {
	if !s.Available() {
		return "Landlock unavailable: " + s.Reason
	}
	var can, cannot []string
	add := func(ok bool, what string, abi int) {
		if ok {
			can = append(can, what)
		} else {
			cannot = append(cannot, fmt.Sprintf("%s (needs ABI %d)", what, abi))
		}
	}
	add(s.FS, "file writes", 1)
	add(s.Network, "TCP", abiNetwork)
	add(s.UDP, "UDP", abiUDP)
	add(s.IPC, "signals and abstract UNIX sockets", abiScoped)
	out := fmt.Sprintf("Landlock ABI %d: restricts %s", s.ABI, strings.Join(can, ", "))
	if len(cannot) > 0 {
		out += "; cannot restrict " + strings.Join(cannot, ", ")
	}
	return out
}

// Probe reports whether this kernel has Landlock, which ABI version the
// sandbox will enforce and what that version restricts. The kernel is asked
// once; later calls return the same Status. Safe for concurrent use.
func Probe() Status { return probe() }

var probe = sync.OnceValue(func() Status {
	abi, err := llsyscall.LandlockGetABIVersion()
	if err == nil && abi >= abiScoped {
		// go-landlock enforces ABI 5 at most on a kernel without the
		// signal-scoping fix (erratum 2); report what it will enforce.
		if errata, err := llsyscall.LandlockGetErrata(); err != nil || errata&0x2 == 0 {
			abi = 5
		}
	}
	return statusFor(abi, err)
})

// statusFor builds the Status of a kernel whose Landlock ABI query returned
// abi and err.
func statusFor(abi int, err error) Status {
	switch {
	case errors.Is(err, syscall.EOPNOTSUPP):
		return Status{Reason: "the kernel has Landlock but it was not enabled at boot (add landlock to the lsm= kernel parameter)"}
	case err != nil:
		return Status{Reason: fmt.Sprintf("the kernel does not support Landlock (Linux 5.13 or later built with CONFIG_SECURITY_LANDLOCK): %v", err)}
	case abi < 1:
		return Status{Reason: fmt.Sprintf("the kernel reports Landlock ABI version %d", abi)}
	}
	abi = min(abi, len(presets)-1)
	return Status{
		ABI:     abi,
		FS:      true,
		Network: abi >= abiNetwork,
		UDP:     abi >= abiUDP,
		IPC:     abi >= abiScoped,
	}
}
