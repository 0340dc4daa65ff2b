package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

var pgbouncerPauseInfo = kindInfo{
	needs:    NeedsPooler,
	resource: "proc",
	settle:   500 * time.Millisecond,
	params: map[string]paramCheck{
		"timeout": durationParam(100*time.Millisecond, time.Minute),
	},
	new: func() Fault { return &pgbouncerPause{} },
}

// pgbouncerPause is KindPgBouncerPause.
type pgbouncerPause struct {
	mu      sync.Mutex
	paused  bool
	waiting int // the most clients seen waiting while paused
}

func (*pgbouncerPause) Kind() Kind   { return KindPgBouncerPause }
func (*pgbouncerPause) Needs() Needs { return pgbouncerPauseInfo.needs }

// Inject PAUSEs the workload database (PAUSE waits for the transactions in
// flight; bounded by param timeout, default 5s: a timeout is recorded as
// not landed). Evidence: paused, waiting (cl_waiting right after), and
// timeout when PAUSE was not answered in time. Landed: PAUSE answered
// (the heal's evidence also needs clients seen waiting).
func (f *pgbouncerPause) Inject(ctx context.Context, env *Env, shard int, p Params, _ *rand.Rand) (Evidence, error) {
	timeout, err := p.duration("timeout", 5*time.Second)
	if err != nil {
		return Evidence{}, err
	}
	db, err := env.database()
	if err != nil {
		return Evidence{}, err
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	_, err = consoleRun(pctx, env, shard, "PAUSE "+consoleIdent(db))
	timedOut := pctx.Err() != nil && ctx.Err() == nil
	cancel()
	if err != nil {
		fields := map[string]any{"paused": false}
		if timedOut {
			fields["timeout"] = timeout.String()
			return Evidence{Fields: fields}, nil // recorded, not an error: PAUSE did not land
		}
		return Evidence{Fields: fields}, fmt.Errorf("pgbouncer-pause: %w", err)
	}
	f.mu.Lock()
	f.paused = true
	f.mu.Unlock()
	waiting, _ := clientsWaiting(ctx, env, shard)
	f.note(waiting)
	return Evidence{Landed: true, Fields: map[string]any{"paused": true, "waiting": waiting}}, nil
}

func (f *pgbouncerPause) note(waiting int) {
	f.mu.Lock()
	f.waiting = max(f.waiting, waiting)
	f.mu.Unlock()
}

// Heal looks at SHOW POOLS once more (clients waiting after the hold),
// then RESUMEs, also after a PAUSE that timed out. Evidence: paused,
// waiting (the most seen), resumed.
func (f *pgbouncerPause) Heal(ctx context.Context, env *Env, shard int) (Evidence, error) {
	db, err := env.database()
	if err != nil {
		return Evidence{}, err
	}
	f.mu.Lock()
	paused := f.paused
	f.mu.Unlock()
	if paused {
		w, _ := clientsWaiting(ctx, env, shard)
		f.note(w)
	}
	_, err = consoleRun(ctx, env, shard, "RESUME "+consoleIdent(db))
	resumed := err == nil
	if isNotPaused(err) {
		err = nil
	}
	f.mu.Lock()
	waiting := f.waiting
	f.mu.Unlock()
	ev := Evidence{Landed: paused && waiting > 0, Fields: map[string]any{"paused": paused, "waiting": waiting, "resumed": resumed}}
	if err != nil {
		return ev, fmt.Errorf("pgbouncer-pause: RESUME: %w", err)
	}
	return ev, nil
}
