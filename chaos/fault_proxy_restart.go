package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/pgshard/pgshard/internal/ctxtime"
)

var proxyRestartInfo = kindInfo{
	needs:    NeedsProxy,
	global:   true,
	resource: "proxy",
	settle:   2 * time.Second,
	new:      func() Fault { return &proxyRestart{} },
}

// clientsCutWait bounds how long proxy-restart waits for the proxy relay
// to see its connections end after the kill.
const clientsCutWait = 2 * time.Second

// proxyRestart is KindProxyRestart.
type proxyRestart struct {
	mu     sync.Mutex
	oldPID int
}

func (*proxyRestart) Kind() Kind   { return KindProxyRestart }
func (*proxyRestart) Needs() Needs { return proxyRestartInfo.needs }

// Inject SIGKILLs the proxy and waits until it is gone; with a proxy
// relay, it also waits (up to 2 s) for the relay's connections to end.
// Evidence: old_pid, and with a proxy relay clients (connections open at
// the kill) and cut (connections that ended after it).
func (f *proxyRestart) Inject(ctx context.Context, env *Env, _ int, _ Params, _ *rand.Rand) (Evidence, error) {
	if env.Proxy == nil {
		return Evidence{}, errors.New("proxy-restart: the env has no proxy")
	}
	old := env.Proxy.PID()
	f.mu.Lock()
	f.oldPID = old
	f.mu.Unlock()
	fields := map[string]any{"old_pid": old}
	var before RelayStats
	if env.ProxyRelay != nil {
		before = env.ProxyRelay.Stats()
		fields["clients"] = before.Active
	}
	if err := env.Proxy.Kill(); err != nil {
		return Evidence{Fields: fields}, fmt.Errorf("proxy-restart: %w", err)
	}
	if env.ProxyRelay != nil {
		deadline := time.Now().Add(clientsCutWait)
		for env.ProxyRelay.Stats().Closed-before.Closed < before.Active && time.Now().Before(deadline) {
			if ctxtime.Sleep(ctx, 10*time.Millisecond) != nil {
				break
			}
		}
		fields["cut"] = env.ProxyRelay.Stats().Closed - before.Closed
	}
	return Evidence{Landed: old != 0, Fields: fields}, nil
}

// Heal starts the proxy again on the same address. Evidence: old_pid,
// new_pid.
func (f *proxyRestart) Heal(ctx context.Context, env *Env, _ int) (Evidence, error) {
	if env.Proxy == nil {
		return Evidence{}, errors.New("proxy-restart: the env has no proxy")
	}
	f.mu.Lock()
	old := f.oldPID
	f.mu.Unlock()
	err := env.Proxy.Start(ctx)
	newPID := env.Proxy.PID()
	ev := Evidence{Landed: old != 0 && newPID != 0 && newPID != old, Fields: map[string]any{"old_pid": old, "new_pid": newPID}}
	if err != nil {
		return ev, fmt.Errorf("proxy-restart: %w", err)
	}
	return ev, nil
}
