package actors

import (
	"fmt"
	"testing"

	"github.com/anthdm/hollywood/actor"
)

// deepWork stands for a session actor's turn: enough stack to make a fresh
// goroutine grow its stack (the decide path runs about 20 frames deep).
//
//go:noinline
func deepWork(n int) int {
	var pad [256]byte
	pad[n%256] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return deepWork(n-1) + int(pad[n%256])
}

type echo struct{ done chan int }

func (e *echo) Receive(c *actor.Context) {
	if n, ok := c.Message().(int); ok {
		e.done <- deepWork(n)
	}
}

// BenchmarkHandoff measures what one message to an idle session actor costs
// as hollywood 1.0.5 delivers it (a new goroutine for each burst of an idle
// actor's messages, whose stack grows again each time), against a goroutine
// kept between messages, blocked on a channel, whose stack stays grown (what
// Session.Receive gets from the node's goroutine pool, and Session.awaitEarly
// from its handoff). Each
// iteration is one message and one answer, the sender waiting for it (a
// call's outcome reaching its session actor); depth 24 has the receiver
// use about 7 KiB of stack, as a session actor's turn does, depth 0 none.
func BenchmarkHandoff(b *testing.B) {
	for _, depth := range []int{0, 24} {
		b.Run(fmt.Sprintf("depth%d", depth), func(b *testing.B) { benchHandoff(b, depth) })
	}
}

func benchHandoff(b *testing.B, depth int) {
	b.Run("hollywood", func(b *testing.B) {
		e, err := actor.NewEngine(actor.NewEngineConfig())
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan int, 1)
		pid := e.Spawn(func() actor.Receiver { return &echo{done: done} }, "echo")
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			e.Send(pid, depth)
			<-done
		}
		b.StopTimer()
		<-e.Poison(pid).Done()
	})
	b.Run("own-goroutine", func(b *testing.B) {
		inbox, done := make(chan int, 32), make(chan int, 1)
		go func() {
			for n := range inbox {
				done <- deepWork(n)
			}
		}()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			inbox <- depth
			<-done
		}
		b.StopTimer()
		close(inbox)
	})
}
