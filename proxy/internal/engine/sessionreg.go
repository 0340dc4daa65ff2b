package engine

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"slices"
	"sync"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/obs"
)

// Registry is a server's register of its client sessions, by the
// process ID of their BackendKeyData: admission against max_clients,
// cancel requests, pg_terminate_backend, the console's SHOW CLIENTS and
// KILL, the shutdown. It belongs to the session side of the engine
// boundary (sessionenv.go): the server holds one (proxy.Server.clients) and reads
// its sessions only through its methods.
type Registry struct {
	// metrics counts the clients.
	metrics *obs.Metrics

	mu       sync.Mutex
	sessions map[uint32]*Session
	nclients int
	nadmin   int // of nclients, admin console sessions
}

// NewRegistry returns an empty register counting its clients in m.
func NewRegistry(m *obs.Metrics) *Registry {
	return &Registry{metrics: m, sessions: map[uint32]*Session{}}
}

// register assigns the session its cancel key and counts it against
// maxClients; false means the server is full.
func (r *Registry) register(sess *Session, maxClients int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nclients >= maxClients {
		return false
	}
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		pid := binary.BigEndian.Uint32(b[:4]) & 0x7fffffff
		if pid == 0 {
			continue
		}
		if _, dup := r.sessions[pid]; dup {
			continue
		}
		sess.pid = pid
		sess.secret = binary.BigEndian.Uint32(b[4:])
		r.sessions[pid] = sess
		r.nclients++
		if sess.admin {
			r.nadmin++
		}
		r.metrics.Clients.Inc()
		r.metrics.ClientsTotal.Inc()
		return true
	}
}

// unregister removes the session (a no-op if it is not registered).
func (r *Registry) unregister(sess *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions[sess.pid] == sess {
		delete(r.sessions, sess.pid)
		r.nclients--
		if sess.admin {
			r.nadmin--
		}
		r.metrics.Clients.Dec()
	}
}

// Cancel forwards a client's cancel request to the backend serving its
// session right now, if any. A request whose key matches no session is
// ignored, as Postgres does.
func (r *Registry) Cancel(ctx context.Context, pid uint32, key []byte) {
	sess := r.byPID(pid)
	if sess == nil || len(key) != 4 || binary.BigEndian.Uint32(key) != sess.secret {
		return
	}
	sess.cancelBackend(ctx)
}

// byPID finds a client session (of any database on the listener) by its
// BackendKeyData PID.
func (r *Registry) byPID(pid uint32) *Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[pid]
}

// rekey gives a session pinned at startup the backend's real PID and
// secret in BackendKeyData (clients compare it with pg_backend_pid() and
// cancel with it), unless another session already has that PID.
func (r *Registry) rekey(sess *Session, pid uint32, secret []byte) {
	if len(secret) != 4 || pid == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if other, dup := r.sessions[pid]; dup && other != sess {
		return
	}
	if r.sessions[sess.pid] == sess {
		delete(r.sessions, sess.pid)
	}
	sess.pid = pid
	sess.secret = uint32(secret[0])<<24 | uint32(secret[1])<<16 | uint32(secret[2])<<8 | uint32(secret[3])
	r.sessions[pid] = sess
}

// list returns the registered sessions (in no order).
func (r *Registry) list() []*Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Session, 0, len(r.sessions))
	for _, x := range r.sessions {
		out = append(out, x)
	}
	return out
}

// Kill closes the client connections of the sessions match selects
// (their transactions are lost, as with pg_terminate_backend); match sees
// each session's snapshot.
func (r *Registry) Kill(match func(*ClientInfo) bool) int {
	n := 0
	for _, x := range r.list() {
		if ci := x.info(); match(&ci) {
			x.closeClient()
			n++
		}
	}
	return n
}

// Clients returns a snapshot of the registered sessions, by PID.
func (r *Registry) Clients() []ClientInfo {
	sessions := r.list()
	out := make([]ClientInfo, 0, len(sessions))
	for _, x := range sessions {
		out = append(out, x.info())
	}
	slices.SortFunc(out, func(a, b ClientInfo) int { return cmp.Compare(a.PID, b.PID) })
	return out
}

// ClientInfo is a snapshot of one client session (SHOW CLIENTS, KILL).
type ClientInfo struct {
	PID                uint32
	User, DB, App      string
	Admin, TLS         bool
	Connected, Request time.Time // Request: the backend's use began, else Connected
	Remote, Local      string    // the client connection's addresses ("" unknown)
	// Pool is the pool of the backend the session holds right now (nil:
	// none), BackendPID that backend's process.
	Pool       *backend.Pool
	BackendPID uint32
	// Pinned is the reason of the session's pin ("" not pinned).
	Pinned string
}

// info is s's snapshot.
func (s *Session) info() ClientInfo {
	c := ClientInfo{PID: s.pid, User: s.user, DB: s.db, App: s.app, Admin: s.admin, TLS: s.cc.tlsOn,
		Connected: s.connected, Request: s.connected}
	if a := s.cc.conn.RemoteAddr(); a != nil {
		c.Remote = a.String()
	}
	if a := s.cc.conn.LocalAddr(); a != nil {
		c.Local = a.String()
	}
	s.mu.Lock()
	if bc := s.bc; bc != nil {
		c.Pool, c.BackendPID = bc.Pool, bc.PID
		if ns := bc.UsedSince.Load(); ns != 0 {
			c.Request = time.Unix(0, ns)
		}
	}
	s.mu.Unlock()
	if ps := s.pinnedAs.Load(); ps != nil {
		c.Pinned = ps.Reason
	}
	return c
}

// CloseAll closes every client connection (the hard stop).
func (r *Registry) CloseAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sess := range r.sessions {
		sess.closeClient()
	}
}

// Counts returns the registered sessions and, of them, the console's.
func (r *Registry) Counts() (clients, admin int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nclients, r.nadmin
}

// Pinned lists the sessions pinned right now, by PID.
func (r *Registry) Pinned() []PinnedSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []PinnedSession
	for _, sess := range r.sessions {
		if ps := sess.pinnedAs.Load(); ps != nil {
			out = append(out, *ps)
		}
	}
	slices.SortFunc(out, func(a, b PinnedSession) int { return int(a.PID) - int(b.PID) })
	return out
}
