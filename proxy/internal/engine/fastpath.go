package engine

import (
	"context"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// fastpath runs a FunctionCall message (libpq's large-object functions
// use it): on the backend the session holds (its transaction, or its
// pin); outside a transaction the session is pinned first, on the
// default shard, as large objects are session state there.
func (s *Session) fastpath(ctx context.Context, msg []byte) error {
	if s.bc == nil {
		if e := pinning(s).pinTo(ctx, -1, pinOther, nil); e != nil {
			s.cc.out = pgwire.AppendError(s.cc.out, e)
			s.cc.out = pgwire.AppendRFQ(s.cc.out, s.txn.status())
			return nil
		}
	}
	if s.bc == nil || s.txn.pipelineHeld {
		s.cc.out = pgwire.AppendError(s.cc.out, pgwire.NewError(pgwire.CodeFeatureNotSupported, "the fastpath function call protocol is not supported by pgshard here (a transaction through a pooler that cannot be pinned, or mid-pipeline)"))
		s.cc.out = pgwire.AppendRFQ(s.cc.out, s.txn.status())
		return nil
	}
	p := s.newPlanner(ctx)
	p.onBackend = true
	p.plan.bw = append(p.plan.bw, msg...)
	p.plan.items = append(p.plan.items, item{kind: itQuery, flags: fClientPart | fRFQ})
	res, err := runExchange(ctx, s, &p.plan, p.bc, p.explicit)
	if err != nil {
		return err
	}
	if res.lost {
		s.cc.out = pgwire.AppendRFQ(s.cc.out, s.txn.status())
		return nil
	}
	p.exErrored = res.errored
	s.afterReady(p, res.status)
	return nil
}
