package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"reflect"
	"sync"

	"golang.org/x/sys/unix"
)

// The node and the namespace helper talk over a stream socket (fdControl):
// each message is a frame, a 4-byte big-endian length and that many bytes
// of JSON, the descriptors it carries (SCM_RIGHTS) on its first byte. A
// stream rather than a datagram socket, so that no message size (a call's
// environment, a long shell command) is refused by the socket's buffer.

// maxFrame bounds a frame the helper accepts: more than argv and the
// environment can hold together (the kernel's limit is a quarter of the
// stack limit, 2 MiB by default).
const maxFrame = 16 << 20

// helperProtocol names the node-helper protocol; protocolID adds the shape
// of its messages, so that a helper binary built from other sources than
// the node's refuses to run rather than misread a message. Change it when
// the meaning of a message changes without its shape.
const helperProtocol = "2"

// protocolID is helperProtocol with a hash of the messages' fields.
var protocolID = sync.OnceValue(func() string {
	h := fnv.New64a()
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		fmt.Fprintf(h, "%s{", t)
		if t.Kind() == reflect.Struct && t.PkgPath() == reflect.TypeFor[nsPrep]().PkgPath() && !seen[t] {
			seen[t] = true
			for f := range t.Fields() {
				fmt.Fprintf(h, "%s %q ", f.Name, f.Tag)
				walk(f.Type)
			}
		}
		if t.Kind() == reflect.Slice {
			walk(t.Elem())
		}
		fmt.Fprint(h, "}")
	}
	for _, t := range []reflect.Type{reflect.TypeFor[nsPrep](), reflect.TypeFor[nsCall](), reflect.TypeFor[probeResult](), reflect.TypeFor[spawnRequest](), reflect.TypeFor[spawnNotice]()} {
		walk(t)
	}
	return fmt.Sprintf("%s.%x", helperProtocol, h.Sum64())
})

// sendFrame writes msg as one frame on the stream socket fd, with fds
// attached to its first byte. It blocks until the peer has taken what its
// buffer cannot hold, and fails (EPIPE, never SIGPIPE) once the peer is
// gone.
func sendFrame(fd int, msg []byte, fds []int) error {
	buf := make([]byte, 4+len(msg))
	binary.BigEndian.PutUint32(buf, uint32(len(msg)))
	copy(buf[4:], msg)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	for len(buf) > 0 {
		n, err := unix.SendmsgN(fd, buf, oob, nil, unix.MSG_NOSIGNAL)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		buf, oob = buf[n:], nil
	}
	return nil
}

// recvFrame reads one frame from the stream socket fd, and at most maxFDs
// descriptors that came with it (close-on-exec); any more are closed, and
// so are they all on an error.
func recvFrame(fd, maxFDs int) (msg []byte, fds []int, err error) {
	defer func() {
		if err != nil {
			closeAll(fds)
			fds = nil
		}
	}()
	oob := make([]byte, unix.CmsgSpace(4*max(maxFDs, 1)))
	var head [4]byte
	got := 0
	read := func(dst []byte) (int, error) {
		for {
			n, oobn, flags, _, err := unix.Recvmsg(fd, dst, oob, unix.MSG_CMSG_CLOEXEC)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return 0, err
			}
			if oobn > 0 {
				fds = append(fds, parseRights(oob[:oobn])...)
			}
			if flags&unix.MSG_CTRUNC != 0 {
				return 0, errors.New("more descriptors than expected came with the message")
			}
			if n == 0 {
				return 0, io.ErrUnexpectedEOF
			}
			return n, nil
		}
	}
	for got < len(head) {
		n, err := read(head[got:])
		if err != nil {
			return nil, fds, err
		}
		got += n
	}
	size := binary.BigEndian.Uint32(head[:])
	if size > maxFrame {
		return nil, fds, fmt.Errorf("a message of %d bytes, more than %d", size, maxFrame)
	}
	msg = make([]byte, size)
	for off := 0; off < len(msg); {
		n, err := read(msg[off:])
		if err != nil {
			return nil, fds, err
		}
		off += n
	}
	if len(fds) > maxFDs {
		closeAll(fds[maxFDs:])
		fds = fds[:maxFDs]
	}
	return msg, fds, nil
}

// parseRights returns the descriptors of the SCM_RIGHTS messages in oob.
func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if r, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}
