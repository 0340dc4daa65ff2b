package engine

import (
	"context"
	"net"
	"time"
)

// Identity is who a session's client is: what its startup sets.
type Identity struct {
	PID           uint32
	User, DB, App string
	Admin         bool
	Connected     time.Time
}

// Attach registers a session of conn with identity id without running
// its startup (its PID is id.PID, replacing a session of that PID): a
// console in a fixed state for the proxy's golden tests of the console's
// answers. A server's sessions are made by NewSession and Run.
func (r *Registry) Attach(gen *GenerationEnv, host *HostEnv, conn net.Conn, id Identity) *Session {
	s := NewSession(gen, host, conn)
	s.pid, s.user, s.db, s.app, s.admin, s.connected = id.PID, id.User, id.DB, id.App, id.Admin, id.Connected
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.sessions[s.pid]; old != nil {
		r.nclients--
		if old.admin {
			r.nadmin--
		}
	}
	r.sessions[s.pid] = s
	r.nclients++
	if s.admin {
		r.nadmin++
	}
	return s
}

// ConsoleQuery answers one console query string for s, an admin session,
// as its client would get the answer (without the ReadyForQuery).
func (s *Session) ConsoleQuery(ctx context.Context, sql string) []byte {
	s.cc.out = s.cc.out[:0]
	after := s.console.query(ctx, &s.cc, s.host, ConsoleCaller{User: s.user, Log: s.log}, sql)
	answer := append([]byte(nil), s.cc.out...)
	if after != nil {
		after()
	}
	return answer
}
