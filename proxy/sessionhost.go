package proxy

import (
	"context"

	"github.com/pgshard/pgshard/proxy/internal/admin"
	"github.com/pgshard/pgshard/proxy/internal/engine"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// The server's side of the engine boundary (internal/engine/sessionenv.go):
// making the environments a generation and the server give their
// sessions, and the operations a *generation (engine.GenerationOps) and
// the *Server (engine.HostOps) run for them.

// newSessionConfig copies what a session reads of c.
func newSessionConfig(c *Config) *engine.SessionConfig {
	sc := &engine.SessionConfig{
		Map: c.Map, Analyzer: c.Analyzer, HintKeyType: c.HintKeyType, Follows: c.Follow != nil,
		Fence: c.Fence, FenceRetryWait: c.FenceRetryWait,
		PoolMode: c.PoolMode, MaxPinned: c.MaxPinned, MaxClients: c.MaxClients, PoolTimeout: c.PoolTimeout,
		ConnectTimeout: c.ConnectTimeout,
		Databases:      c.Databases, AdminDatabase: c.AdminDatabase, AdminUsers: c.AdminUsers,
		StartupTimeout: c.StartupTimeout, IdleInTransactionTimeout: c.IdleInTransactionTimeout,
		MaxMessageSize: c.MaxMessageSize, MaxPipelineBytes: c.MaxPipelineBytes, MergeGroupLimit: c.MergeGroupLimit,
		StatementCacheSize: c.StatementCacheSize, UnnamedStatements: c.UnnamedStatements,
	}
	for _, u := range c.Users {
		if u.PoolMode != PoolModeDefault {
			sc.UserPoolModes = append(sc.UserPoolModes, engine.UserPoolMode{Name: u.Name, Mode: u.PoolMode})
		}
	}
	return sc
}

// env returns the generation's environment, made once.
func (s *generation) env() *engine.GenerationEnv { return s.genv }

// makeEnv makes the generation's environment (once its pools are set,
// before it is published).
func (s *generation) makeEnv() {
	if s.henv == nil {
		c := s.Server
		c.henv = &engine.HostEnv{
			Metrics: c.metrics, Log: c.log, TLS: &c.tls, LoginsDisabled: &c.life.disabled,
			NPinned: &c.npinned, PinsTotal: c.pinsTotal, Fences: &c.fences, StandIns: &c.standIns, Clients: c.clients, ConsoleCanceled: admin.ErrCanceled, Ops: c,
		}
	}
	s.genv = &engine.GenerationEnv{
		Config: newSessionConfig(&s.cfg), Pools: s.pools, DefaultShard: s.defaultShard, Users: s.users,
		Metrics: s.metrics, Log: s.log, StmtEpoch: &s.stmtEpoch, Collation: &s.collation, RR: &s.rr,
		Home: s.henv, Ops: s,
	}
}

// LeaseError implements engine.GenerationOps (catalog.go's leaseError).
func (s *generation) LeaseError() *pgwire.Error { return s.leaseError() }

// DatabaseEnv implements engine.GenerationOps.
func (s *generation) DatabaseEnv(name string) *engine.GenerationEnv {
	return s.database(name).current().env()
}

// CurrentEnv implements engine.HostOps.
func (c *Server) CurrentEnv() *engine.GenerationEnv { return c.current().env() }

// ConsoleQuery implements engine.HostOps: admin.Query over an adminHost
// acting for by; a SHUTDOWN among the commands begins once the answer
// reached the console (after).
func (c *Server) ConsoleQuery(ctx context.Context, by engine.ConsoleCaller, sql string, out []byte) ([]byte, func()) {
	h := &adminHost{by: by, c: c}
	out = admin.Query(ctx, h, sql, out)
	if !h.shutdown {
		return out, nil
	}
	return out, func() { c.beginShutdown("SHUTDOWN on the admin console") }
}
