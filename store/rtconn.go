package store

import (
	"net"
	"sync/atomic"
)

// Round trips are counted on the wire, not assumed: every connection of a
// Store's pool is wrapped in a countingConn, which counts one round trip
// each time the client writes after it has read (or writes for the first
// time). A pipelined batch — many messages, one Write, then reading all
// the replies — is one round trip; n statements each awaiting its reply
// are n. Connection setup (startup, authentication) is not counted:
// counting starts when the pool hands the connection out the first time.
//
//	client  ──Write──▶ server     round trip 1 starts
//	client  ◀──Read──  server
//	client  ◀──Read──  server     (more replies, same round trip)
//	client  ──Write──▶ server     round trip 2 starts
type countingConn struct {
	net.Conn
	counter   *atomic.Uint64 // the Store's total
	active    atomic.Bool    // counting enabled (after setup)
	readSince atomic.Bool    // a Read happened since the last Write
	writes    atomic.Uint64  // Write calls, counted or not
}

func newCountingConn(c net.Conn, counter *atomic.Uint64) *countingConn {
	cc := &countingConn{Conn: c, counter: counter}
	cc.readSince.Store(true) // the first write starts a round trip
	return cc
}

// Write counts a round trip when it follows a read.
func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	if c.readSince.Swap(false) && c.active.Load() {
		c.counter.Add(1)
	}
	return c.Conn.Write(p)
}

// Read notes that the server answered.
func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.readSince.Store(true)
	}
	return n, err
}

// start begins counting (called once the connection is set up).
func (c *countingConn) start() {
	c.readSince.Store(true)
	c.active.Store(true)
}
