package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// poolKeeper runs each pool's monitor (health probe, PgBouncer reading)
// in the running Serve's group, and drains the pools a reload retired:
// a retired pool refuses new transactions and is shut down by the
// reaper once none of its connections is in use.
type poolKeeper struct {
	log *slog.Logger

	mu sync.Mutex
	// The running Serve's group and context, for monitors started later
	// (pools a reload adds); nil while Serve is not running.
	group    *errgroup.Group
	groupCtx context.Context
	monitors map[*backend.Pool]context.CancelFunc
	retired  []*backend.Pool
}

// run records the running Serve's group (nil, nil: Serve ended; no
// monitor starts any more).
func (k *poolKeeper) run(ctx context.Context, g *errgroup.Group) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.group, k.groupCtx = g, ctx
}

// startMonitor starts p's monitor in the running Serve's group; a no-op
// when Serve is not running or the monitor runs already.
func (k *poolKeeper) startMonitor(p *backend.Pool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.group == nil {
		return
	}
	if _, ok := k.monitors[p]; ok {
		return
	}
	if k.monitors == nil {
		k.monitors = map[*backend.Pool]context.CancelFunc{}
	}
	ctx, cancel := context.WithCancel(k.groupCtx)
	k.monitors[p] = cancel
	k.group.Go(func() error {
		p.Monitor(ctx)
		return nil
	})
}

// stopMonitor stops p's monitor.
func (k *poolKeeper) stopMonitor(p *backend.Pool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if cancel, ok := k.monitors[p]; ok {
		cancel()
		delete(k.monitors, p)
	}
}

// retire takes a pool out of service after a reload removed its shard:
// its transactions are refused, its idle connections closed, and it
// drains until reapRetired shuts it down.
func (k *poolKeeper) retire(p *backend.Pool) {
	p.Ops.Retired.Store(true)
	p.Ops.Refuse.Store(&pgwire.Error{Code: pgwire.CodeConnectionFailure,
		Message: fmt.Sprintf("shard %q was removed from the shard map by a reload", p.Shard.Name),
		Hint:    "Retry: the transaction runs on the new map."})
	p.Ops.Resume()
	k.stopMonitor(p)
	p.CloseIdle()
	k.mu.Lock()
	k.retired = append(k.retired, p)
	k.mu.Unlock()
}

// retiredPools returns the retired pools still draining.
func (k *poolKeeper) retiredPools() []*backend.Pool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*backend.Pool(nil), k.retired...)
}

// reapRetired shuts down the retired pools none of whose connections is
// in use any more.
func (k *poolKeeper) reapRetired() {
	k.mu.Lock()
	var done []*backend.Pool
	keep := k.retired[:0]
	for _, p := range k.retired {
		if p.InUse() == 0 {
			done = append(done, p)
		} else {
			keep = append(keep, p)
		}
	}
	k.retired = keep
	k.mu.Unlock()
	for _, p := range done {
		p.Shutdown()
		k.log.Info("removed shard's pool closed", "shard", p.Shard.Name)
	}
}
