package engine

import (
	"time"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// Readers: the backend transactions a client transaction holds on shards
// other than its own backend's (s.bc), opened by key-less reads inside the
// transaction (fanout.go). A reader only ever runs reads; it replays the
// transaction's start (BEGIN, SET LOCAL, SAVEPOINT..., the settings
// preamble) when opened, so it reads with the client's settings and
// isolation. Readers end with the transaction: COMMIT or ROLLBACK (the
// client's, or the proxy's when the transaction fails) rolls them back and
// returns them to their pools. A reader whose replayed start no longer
// matches the transaction (a SET LOCAL or savepoint command since) is
// ended too and reopened by the next read. While the transaction has no
// backend yet, its first keyed statement takes the reader of its shard as
// that backend.

// readerSet is a transaction's readers, by shard. Only the session's
// goroutine uses it (a cancel reaches the connections a fan-out reads
// through Session.fanning).
type readerSet struct {
	// conns are the readers by shard (nil: none on that shard); made at
	// the first reader, one slot per shard.
	conns []*backend.Conn
	// n counts them.
	n int
}

// get returns the reader on shard i, or nil.
func (r *readerSet) get(i int) *backend.Conn {
	if i < len(r.conns) {
		return r.conns[i]
	}
	return nil
}

// any reports whether the transaction holds any reader.
func (r *readerSet) any() bool { return r.n > 0 }

// add records bc as the reader on shard i of a map of nshards.
func (r *readerSet) add(i int, bc *backend.Conn, nshards int) {
	if r.conns == nil {
		r.conns = make([]*backend.Conn, nshards)
	}
	if r.conns[i] == nil {
		r.n++
	}
	r.conns[i] = bc
}

// take removes and returns the reader on shard i (nil if none).
func (r *readerSet) take(i int) *backend.Conn {
	bc := r.get(i)
	if bc != nil {
		r.conns[i] = nil
		r.n--
	}
	return bc
}

// end rolls back every reader and returns it to its pool (a broken one
// is discarded): one write to each, then each reply is read, bounded by
// its pool's timeout.
func (r *readerSet) end() {
	if r.n == 0 {
		return
	}
	var live []*backend.Conn
	for i := range r.conns {
		bc := r.take(i)
		if bc == nil {
			continue
		}
		if bc.Broken || bc.Write([]byte{'Q', 0, 0, 0, 13, 'R', 'O', 'L', 'L', 'B', 'A', 'C', 'K', 0}) != nil {
			bc.Pool.Discard(bc)
			continue
		}
		live = append(live, bc)
	}
	for _, bc := range live {
		if rollbackRead(bc) {
			bc.Pool.Release(bc)
		} else {
			bc.Pool.Discard(bc)
		}
	}
}

// rollbackRead reads a reader's answer to its ROLLBACK up to
// ReadyForQuery; it reports whether the reader is clean (idle).
func rollbackRead(bc *backend.Conn) bool {
	_ = bc.NetConn.SetReadDeadline(time.Now().Add(bc.Pool.Env().PoolTimeout))
	defer bc.NetConn.SetReadDeadline(time.Time{})
	for {
		typ, msg, err := bc.Reader.Next()
		if err != nil {
			return false
		}
		if typ == 'Z' {
			return pgwire.ReadyStatus(msg) == 'I'
		}
	}
}

// discard drops every reader without a word (the session ends).
func (r *readerSet) discard() {
	for i := range r.conns {
		if bc := r.take(i); bc != nil {
			bc.Pool.Discard(bc)
		}
	}
}
