package proxy

import (
	"context"

	"github.com/pgshard/pgshard/proxy/internal/admin"
)

// The server's side of the engine boundary (sessionenv.go): making the
// environments a generation and the server give their sessions, and the
// operations a *Server (generationOps) and a *core (hostOps) run for them.

// newSessionConfig copies what a session reads of c.
func newSessionConfig(c *Config) *sessionConfig {
	sc := &sessionConfig{
		Map: c.Map, Analyzer: c.Analyzer, HintKeyType: c.HintKeyType, Follow: c.Follow,
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
			sc.userPoolModes = append(sc.userPoolModes, userPoolMode{name: u.Name, mode: u.PoolMode})
		}
	}
	return sc
}

// env returns the generation's environment, made once.
func (s *Server) env() *generationEnv { return s.genv }

// makeEnv makes the generation's environment (once its pools are set,
// before it is published).
func (s *Server) makeEnv() {
	if s.core.henv == nil {
		c := s.core
		c.henv = &hostEnv{
			metrics: c.metrics, log: c.log, tls: &c.tls, loginsDisabled: &c.life.disabled,
			npinned: &c.npinned, pinsTotal: c.pinsTotal, fences: &c.fences, standIns: &c.standIns, clients: &c.clients, consoleCanceled: admin.ErrCanceled, ops: c,
		}
	}
	s.genv = &generationEnv{
		cfg: newSessionConfig(&s.cfg), pools: s.pools, defaultShard: s.defaultShard, users: s.users,
		metrics: s.metrics, log: s.log, stmtEpoch: &s.stmtEpoch, collation: &s.collation, rr: &s.rr,
		home: s.core.henv, ops: s,
	}
}

// databaseEnv implements generationOps.
func (s *Server) databaseEnv(name string) *generationEnv { return s.database(name).env() }

// currentEnv implements hostOps.
func (c *core) currentEnv() *generationEnv { return c.current().env() }

// consoleQuery implements hostOps: admin.Query over s's adminHost.
func (c *core) consoleQuery(ctx context.Context, s *session, sql string, out []byte) []byte {
	return admin.Query(ctx, &adminHost{s: s, c: c}, sql, out)
}
