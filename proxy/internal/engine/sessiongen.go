package engine

import "log/slog"

// A session moves to the newest configuration generation between
// transactions (reload.go publishes it; the session holds no backend,
// reader or pin then), re-analyzing its prepared statements for the new
// map.

// maybeSwitchGeneration moves the session to the current generation when
// a reload published one and the session is between transactions (no
// transaction, pipeline or backend).
func (s *Session) maybeSwitchGeneration() {
	if s.gen.Home != s.host {
		return // a database of Config.ExtraDatabases: a reload keeps it as it is
	}
	g := s.host.Ops.CurrentEnv()
	if g == s.gen || s.own != nil || s.txn.tx != txIdle || s.txn.pipelineHeld || s.bc != nil || s.readers.any() || len(s.grp) > 0 || s.txn.skipUntilSync {
		return
	}
	s.switchGeneration(g)
}

// switchGeneration moves the session to generation g (it holds no
// backend, reader or pin).
func (s *Session) switchGeneration(g *GenerationEnv) {
	// The prepared statements' analyses name shards of the old map: analyze
	// their texts again (a statement that no longer analyzes is dropped;
	// using it fails with 26000 and the client prepares it again).
	for name, vs := range s.stmts {
		if nv := vs.reanalyze(g, s.log); nv != nil {
			s.stmts[name] = nv
		} else {
			delete(s.stmts, name)
		}
	}
	if s.unnamed != nil {
		s.unnamed = s.unnamed.reanalyze(g, s.log)
	}
	s.gen = g
}

// reanalyze is vs analyzed by generation g's analyzer (nil, logged on
// log, when it no longer analyzes).
func (vs *vstmt) reanalyze(g *GenerationEnv, log *slog.Logger) *vstmt {
	st, err := g.Config.Analyzer.Analyze(vs.st.SQL)
	if err != nil {
		log.Debug("a prepared statement no longer analyzes after a reload; dropped", "name", vs.name, "err", err)
		return nil
	}
	nv := newVstmt(vs.name, st, vs.oids)
	nv.cacheUnnamed, nv.epoch = vs.cacheUnnamed, vs.epoch
	return nv
}
