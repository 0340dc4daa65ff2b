package engine

import (
	"context"
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

// reader returns the reader the transaction holds on shard i, or nil.
func (s *Session) reader(i int) *backend.Conn {
	if i < len(s.readers) {
		return s.readers[i]
	}
	return nil
}

// hasReaders reports whether the transaction holds any reader.
func (s *Session) hasReaders() bool { return s.nreaders > 0 }

// addReader records bc as the transaction's reader on shard i.
func (s *Session) addReader(i int, bc *backend.Conn) {
	if s.readers == nil {
		s.readers = make([]*backend.Conn, len(s.gen.Pools))
	}
	s.mu.Lock()
	if s.readers[i] == nil {
		s.nreaders++
	}
	s.readers[i] = bc
	s.mu.Unlock()
}

// takeReader removes and returns the reader on shard i (nil if none).
func (s *Session) takeReader(i int) *backend.Conn {
	bc := s.reader(i)
	if bc != nil {
		s.mu.Lock()
		s.readers[i] = nil
		s.nreaders--
		s.mu.Unlock()
	}
	return bc
}

// endReaders rolls back every reader and returns it to its pool (a broken
// one is discarded): one write to each, then each reply is read.
func (s *Session) endReaders() {
	if s.nreaders == 0 {
		return
	}
	var live []*backend.Conn
	for i := range s.readers {
		bc := s.takeReader(i)
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
		_ = bc.NetConn.SetReadDeadline(time.Now().Add(s.gen.Config.PoolTimeout))
		ok := true
		for {
			typ, msg, err := bc.Reader.Next()
			if err != nil {
				ok = false
				break
			}
			if typ == 'Z' {
				ok = pgwire.ReadyStatus(msg) == 'I'
				break
			}
		}
		_ = bc.NetConn.SetReadDeadline(time.Time{})
		if ok {
			bc.Pool.Release(bc)
		} else {
			bc.Pool.Discard(bc)
		}
	}
}

// discardReaders drops every reader without a word (the session ends).
func (s *Session) discardReaders() {
	for i := range s.readers {
		if bc := s.takeReader(i); bc != nil {
			bc.Pool.Discard(bc)
		}
	}
}

// setFanning records the connections a fan-out is using (for cancel).
func (s *Session) setFanning(streams []*fanStream) {
	s.mu.Lock()
	s.fanning = s.fanning[:0]
	for _, st := range streams {
		s.fanning = append(s.fanning, st.bc)
	}
	s.mu.Unlock()
}

// srvCtx is the context of the proxy's own statements outside a client's
// exchange (bounded by PoolTimeout where used).
func (s *Session) srvCtx() context.Context { return context.Background() }
