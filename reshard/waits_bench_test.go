package reshard_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/shardmap"
)

// waitSampler samples, every waitSampleEvery, what every active backend
// of the shards' servers (the catalog's database is on shard0's) waits
// for — pg_stat_activity's wait_event_type/wait_event, and for a lock
// wait the statement that blocks it (pg_blocking_pids) — and counts the
// samples by the mover's step (openLoop.step) when they were taken. It
// runs when RESHARD_SAMPLE_WAITS is set: the diagnosis of the moving
// range's slow commits outside the freeze (ARCHITECTURE.md §6).
type waitSampler struct {
	step  func() string
	conns []*pgx.Conn
	names []string

	quit chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	counts  map[string]int // step | server | db | wait | query | blocker → samples
	samples map[string]int // step → sample rounds
	errs    atomic.Int64
}

// waitSampleEvery is the sampling period (the brief's ~10 ms).
const waitSampleEvery = 10 * time.Millisecond

func newWaitSampler(tb testing.TB, ctx context.Context, shards []shardmap.Shard, step func() string) *waitSampler {
	if os.Getenv("RESHARD_SAMPLE_WAITS") == "" {
		return nil
	}
	ws := &waitSampler{step: step, quit: make(chan struct{}), counts: map[string]int{}, samples: map[string]int{}}
	seen := map[string]bool{}
	for _, s := range shards {
		cfg, err := pgx.ParseConfig(s.DSN)
		if err != nil {
			tb.Fatal(err)
		}
		server := fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
		if seen[server] {
			continue
		}
		seen[server] = true
		cfg.RuntimeParams["application_name"] = "wait sampler"
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = c.Close(context.Background()) })
		ws.conns = append(ws.conns, c)
		ws.names = append(ws.names, s.Name+"@"+server)
	}
	return ws
}

// waitQuery lists the server's active backends but the sampler's own.
const waitQuery = `SELECT a.datname, coalesce(a.wait_event_type, 'CPU'), coalesce(a.wait_event, '-'),
	left(regexp_replace(a.query, '\s+', ' ', 'g'), 70),
	coalesce((SELECT left(regexp_replace(b.query, '\s+', ' ', 'g'), 70) || ' [' || b.state || ']'
	          FROM pg_stat_activity b WHERE b.pid = (pg_blocking_pids(a.pid))[1]), '')
	FROM pg_stat_activity a
	WHERE a.state NOT IN ('idle') AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'
	  AND a.application_name <> 'wait sampler'`

func (ws *waitSampler) start(ctx context.Context) {
	if ws == nil {
		return
	}
	for i, c := range ws.conns {
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			t := time.NewTicker(waitSampleEvery)
			defer t.Stop()
			for range 1 << 30 {
				select {
				case <-ws.quit:
					return
				case <-t.C:
				}
				ws.sample(ctx, c, ws.names[i])
			}
		}()
	}
}

func (ws *waitSampler) sample(ctx context.Context, c *pgx.Conn, server string) {
	step := ws.step()
	rows, err := c.Query(ctx, waitQuery)
	if err != nil {
		ws.errs.Add(1)
		return
	}
	var keys []string
	for rows.Next() {
		var db, wt, we, q, blocker string
		if err := rows.Scan(&db, &wt, &we, &q, &blocker); err != nil {
			ws.errs.Add(1)
			break
		}
		if wt == "Client" && we == "ClientRead" {
			q = "(idle in transaction / between statements)"
		}
		k := fmt.Sprintf("%s | %s/%s | %s:%s | %s", step, server, db, wt, we, q)
		if blocker != "" {
			k += " | blocked by: " + blocker
		}
		keys = append(keys, k)
	}
	rows.Close()
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.samples[step+" | "+server]++
	for _, k := range keys {
		ws.counts[k]++
	}
}

func (ws *waitSampler) stop() {
	if ws == nil {
		return
	}
	select {
	case <-ws.quit:
	default:
		close(ws.quit)
	}
	ws.wg.Wait()
}

// log logs the sample rounds by step and server, then every (step,
// backend wait) seen in at least min samples, most frequent first within
// each step.
func (ws *waitSampler) log(tb testing.TB, min int) {
	if ws == nil {
		return
	}
	ws.stop()
	ws.mu.Lock()
	defer ws.mu.Unlock()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(ws.samples)) {
		fmt.Fprintf(&b, "\n  %s: %d rounds", k, ws.samples[k])
	}
	tb.Logf("wait samples every %v (errors %d), rounds by step and server:%s", waitSampleEvery, ws.errs.Load(), b.String())
	keys := slices.Collect(maps.Keys(ws.counts))
	slices.SortFunc(keys, func(a, c string) int {
		sa, sc := a[:strings.Index(a, " | ")], c[:strings.Index(c, " | ")]
		if sa != sc {
			return strings.Compare(sa, sc)
		}
		return ws.counts[c] - ws.counts[a]
	})
	b.Reset()
	for _, k := range keys {
		if ws.counts[k] >= min {
			fmt.Fprintf(&b, "\n  %5d  %s", ws.counts[k], k)
		}
	}
	tb.Logf("backends seen active (samples ≥ %d): samples | step | server/db | wait | statement | blocker%s", min, b.String())
}
