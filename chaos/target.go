package chaos

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync/atomic"

	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/shardmap"
)

// splitTarget drives two targets at once (PgBouncer and the proxy): each
// execution belongs to one of them, by its id, for every call about it;
// calls about no execution (relay polls, acks by seq) alternate. Both
// reach the same shards, so the relays may read through one and deliver
// through the other.
type splitTarget struct {
	ts   [2]loadgen.Target
	turn atomic.Uint64
}

var _ loadgen.Target = (*splitTarget)(nil)

func (s *splitTarget) byID(id string) loadgen.Target { return s.ts[s.side(id)] }

// side is the index in ts of the target of execution id's calls (0: the
// router over PgBouncer, 1: the proxy).
func (s *splitTarget) side(id string) int {
	var h uint32 = 2166136261
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return int(h & 1)
}

func (s *splitTarget) next() loadgen.Target { return s.ts[s.turn.Add(1)&1] }

func (s *splitTarget) LoadForEvent(ctx context.Context, id, eventID string) (*loadgen.Execution, bool, error) {
	return s.byID(id).LoadForEvent(ctx, id, eventID)
}

func (s *splitTarget) Commit(ctx context.Context, c *loadgen.Commit) error {
	return s.byID(c.Exe.ID).Commit(ctx, c)
}

func (s *splitTarget) PendingOutbox(ctx context.Context, limit int) ([]loadgen.OutboxEntry, error) {
	return s.next().PendingOutbox(ctx, limit)
}

func (s *splitTarget) AckOutbox(ctx context.Context, seq int64) error {
	return s.next().AckOutbox(ctx, seq)
}

func (s *splitTarget) PendingSpawns(ctx context.Context, limit int) ([]loadgen.SpawnEntry, error) {
	return s.next().PendingSpawns(ctx, limit)
}

func (s *splitTarget) AckSpawn(ctx context.Context, seq int64) error {
	return s.next().AckSpawn(ctx, seq)
}

func (s *splitTarget) DueTimers(ctx context.Context, now float64, limit int) ([]loadgen.TimerEntry, error) {
	return s.next().DueTimers(ctx, now, limit)
}

func (s *splitTarget) DeleteTimer(ctx context.Context, id, path string, fireAt float64) (bool, error) {
	return s.byID(id).DeleteTimer(ctx, id, path, fireAt)
}

func (s *splitTarget) Close() {
	s.ts[0].Close()
	s.ts[1].Close()
}

// withHost returns dsn with its host:port replaced by addr.
func withHost(dsn, addr string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("DSN %q: %w", redact(dsn), err)
	}
	u.Host = addr
	return u.String(), nil
}

func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return u.Redacted()
}

// checkLoopback refuses a map whose shards are not on this machine: chaos
// kills servers and cuts connections, and must only ever do that to a
// local cluster.
func checkLoopback(m *shardmap.Map) error {
	for _, s := range m.Shards {
		for _, dsn := range []string{s.DSN, s.PoolerDSN} {
			if dsn == "" {
				continue
			}
			u, err := url.Parse(dsn)
			if err != nil {
				return fmt.Errorf("shard %s: DSN %q: %w", s.Name, redact(dsn), err)
			}
			host := u.Hostname()
			ip := net.ParseIP(host)
			if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
				return fmt.Errorf("shard %s is on %s: chaos runs only against a cluster on this machine (loopback addresses), never a remote one", s.Name, host)
			}
		}
	}
	return nil
}
