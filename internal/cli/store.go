package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

func newStoreCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "The execution store over the shards (through the router)",
	}
	cmd.AddCommand(newStoreDemoCmd())
	return cmd
}

// demoDefinition is the definition id of the executions `store demo` writes.
const demoDefinition = "pgshard-demo"

func newStoreDemoCmd() *cobra.Command {
	var executions, workers int
	var direct bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Commit executions through the router and show how they spread over the shards",
		Long: `Commit N new executions through the router, each with two outbox events, a
timer, a trace entry and a dedupe record (one round trip), then advance each
with a second, state-only commit (the fast path). Then check on every shard,
with SQL, that each execution and outbox row sits on the shard that owns its
key (pgshard_bucket), and print per shard: executions, outbox rows, their
share, and the share the shard's bucket count predicts.`,
		Args: cobra.NoArgs,
	}
	cfgPath := addConfigFlag(cmd)
	addCatalogFlag(cmd)
	cmd.Flags().IntVar(&executions, "executions", 300, "number of executions to commit")
	cmd.Flags().IntVar(&workers, "workers", 8, "concurrent committers")
	cmd.Flags().BoolVar(&direct, "direct", false, "connect to each shard's Postgres even if the config says use_pooler")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if executions < 1 || workers < 1 {
			return usagef("--executions and --workers must be at least 1")
		}
		cfg, err := config.Load(config.Options{Path: *cfgPath, Flags: cmd.Flags(), Bind: catalogBind})
		if err != nil {
			return err
		}
		opts := routerOptions(cfg.Store)
		if direct {
			opts.UsePooler = false
		}
		opts.Store.MaxConns = max(opts.Store.MaxConns, workers)
		r, err := openStoreRouter(cmd.Context(), cfg, opts, "store-demo", cmd.ErrOrStderr())
		if err != nil {
			return err
		}
		defer r.Close()
		if r.Catalog != "" {
			fmt.Fprintf(cmd.OutOrStdout(), "map epoch %d from catalog %s (followed, lease held)\n", r.Epoch(), r.Catalog)
		}
		return runStoreDemo(cmd.Context(), cmd.OutOrStdout(), r.Router, executions, workers, opts.UsePooler)
	}
	return cmd
}

// demoRun is what one `store demo` run committed.
type demoRun struct {
	id      string   // run id, carried by every outbox event
	ids     []string // execution ids
	commits int
	elapsed time.Duration
	rt      uint64 // round trips of the commits
	pings   uint64 // the pools' liveness pings meanwhile (not in rt)
}

func newHexID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

func runStoreDemo(ctx context.Context, w io.Writer, r *router.Router, n, workers int, pooler bool) error {
	run := demoRun{ids: make([]string, n)}
	var err error
	if run.id, err = newHexID(); err != nil {
		return err
	}
	for i := range run.ids {
		if run.ids[i], err = newHexID(); err != nil {
			return err
		}
	}
	rt0, ping0 := demoRoundTrips(r)
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i, id := range run.ids {
		g.Go(func() error { return demoCommits(gctx, r, run.id, id, run.ids[(i+1)%n]) })
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("store demo: %w", err)
	}
	run.elapsed = time.Since(start)
	run.commits = 2 * n
	rt, pings := demoRoundTrips(r)
	run.rt, run.pings = rt-rt0, pings-ping0

	via := "directly"
	if pooler {
		via = "through each shard's PgBouncer"
	}
	fmt.Fprintf(w, "committed %d executions through the router %s in %v: %d commits, %d round trips (%.2f per commit)",
		n, via, run.elapsed.Round(time.Millisecond), run.commits, run.rt, float64(run.rt)/float64(run.commits))
	if run.pings > 0 {
		fmt.Fprintf(w, "; besides, the pools pinged %d connections that had sat idle", run.pings)
	}
	fmt.Fprint(w, "\n\n")
	rows, err := demoCensus(ctx, r, run)
	if err != nil {
		return err
	}
	if err := writeDemoTable(w, r.Map(), rows, run); err != nil {
		return err
	}
	delivered, acked, err := demoRelay(ctx, r, run)
	if err != nil {
		return fmt.Errorf("store demo relay: %w", err)
	}
	fmt.Fprintf(w, "\nrelayed this run's outbox as a relay would: %d events delivered to their target executions (deduplicated by event id), %d rows acked\n", delivered, acked)
	return nil
}

// demoRelay drains this run's outbox rows the way the production relay
// does: each event with a target is applied to it as a state-only commit
// recorded in its dedupe ledger, then the row is acked (routed by its seq);
// rows without a target are acked. So the demo leaves no pending outbox
// behind for the next relay that runs on this cluster.
func demoRelay(ctx context.Context, r *router.Router, run demoRun) (delivered, acked int, err error) {
	for pass := 0; pass < 100; pass++ {
		rows, err := r.PendingOutbox(ctx, 1000)
		if err != nil {
			return delivered, acked, err
		}
		mine := 0
		for _, row := range rows {
			var ev struct {
				Run string `json:"run"`
			}
			if json.Unmarshal(row.Event, &ev) != nil || ev.Run != run.id {
				continue
			}
			mine++
			if row.TargetID != "" {
				if err := demoDeliver(ctx, r, row.TargetID, fmt.Sprintf("outbox-%d", row.Seq)); err != nil {
					return delivered, acked, err
				}
				delivered++
			}
			if err := r.AckOutbox(ctx, row.Seq); err != nil {
				return delivered, acked, err
			}
			acked++
		}
		if mine == 0 {
			return delivered, acked, nil
		}
	}
	return delivered, acked, errors.New("outbox not drained after 100 passes")
}

// demoDeliver applies one event to an execution: load with its dedupe
// flag, commit the next version with the event recorded, retry conflicts.
func demoDeliver(ctx context.Context, r *router.Router, id, eventID string) error {
	for attempt := 0; attempt < 10; attempt++ {
		e, done, err := r.LoadForEvent(ctx, id, eventID)
		if err != nil || done {
			return err
		}
		if e == nil {
			return fmt.Errorf("deliver %s: execution %s does not exist", eventID, id)
		}
		err = r.Commit(ctx, e, nil, eventID, nil, nil, nil)
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("deliver %s to %s: conflicts on every attempt", eventID, id)
}

// demoCommits writes one execution: a complex first commit (two emits, a
// timer, a trace entry, a dedupe record), then a state-only second one.
func demoCommits(ctx context.Context, r *router.Router, runID, id, peer string) error {
	e := &store.Execution{ID: id, DefinitionID: demoDefinition, Status: "running",
		ActivePath: []string{"order", "order.placed"}, Context: json.RawMessage(`{"items":3}`)}
	ev := func(kind string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"run":%q,"from":%q,"kind":%q}`, runID, id, kind))
	}
	err := r.Commit(ctx, e,
		[]store.Emit{{TargetID: peer, Event: ev("Ping")}, {Event: ev("Audit")}},
		"start-"+id,
		[]store.TimerOp{store.Schedule("order.placed", float64(time.Now().Add(time.Hour).Unix()))},
		nil,
		json.RawMessage(`{"event":"Start","to":"order.placed"}`))
	if err != nil {
		return err
	}
	e.Status, e.ActivePath = "waiting", []string{"order", "order.paid"}
	return r.Commit(ctx, e, nil, "pay-"+id, nil, nil, nil)
}

// demoRow is one shard's line of the demo table.
type demoRow struct {
	shard      shardmap.Shard
	executions int // this run's executions found on the shard
	outbox     int // this run's outbox rows on the shard
	versions   int // this run's executions at version 2
	misplaced  int // rows on the shard (any run) whose key belongs elsewhere
	routed     int // this run's executions the router sent there
}

// demoCensus counts this run's rows on every shard and checks placement
// with each shard's own pgshard_bucket.
func demoCensus(ctx context.Context, r *router.Router, run demoRun) ([]demoRow, error) {
	m := r.Map()
	rows := make([]demoRow, len(m.Shards))
	routed := map[string]int{}
	for _, id := range run.ids {
		routed[r.ShardOf(id)]++
	}
	for i, sh := range m.Shards {
		s, err := r.Store(sh.Name)
		if err != nil {
			return nil, err
		}
		var ranges []string
		for _, rg := range m.RangesOf(sh.Name) {
			ranges = append(ranges, fmt.Sprintf("b BETWEEN %d AND %d", rg.Lo, rg.Hi))
		}
		outside := "NOT (" + strings.Join(ranges, " OR ") + ")"
		if len(ranges) == 0 {
			outside = "true" // a shard that owns no buckets (added empty, or drained): any row is misplaced
		}
		row := demoRow{shard: sh, routed: routed[sh.Name]}
		err = s.Pool().QueryRow(ctx, `SELECT
    (SELECT count(*) FROM executions WHERE id = ANY($1::text[])),
    (SELECT count(*) FROM executions WHERE id = ANY($1::text[]) AND version = 2),
    (SELECT count(*) FROM outbox WHERE (event::jsonb)->>'run' = $2::text),
    (SELECT count(*) FROM (SELECT pgshard_bucket(id) AS b FROM executions
        UNION ALL SELECT pgshard_bucket(execution_id) FROM timers
        UNION ALL SELECT pgshard_bucket(execution_id) FROM trace
        UNION ALL SELECT pgshard_bucket(execution_id) FROM processed_events
        UNION ALL SELECT pgshard_bucket((event::jsonb)->>'from') FROM outbox WHERE (event::jsonb)->>'run' = $2::text) AS k
     WHERE `+outside+`)`, run.ids, run.id).Scan(&row.executions, &row.versions, &row.outbox, &row.misplaced)
		if err != nil {
			return nil, &router.ShardError{Shard: sh.Name, Err: fmt.Errorf("census: %w", err)}
		}
		rows[i] = row
	}
	return rows, nil
}

func pct(part, whole int) string {
	if whole == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
}

// writeDemoTable prints the census and fails if any row is misplaced or
// missing.
func writeDemoTable(w io.Writer, m *shardmap.Map, rows []demoRow, run demoRun) error {
	counts := m.BucketCounts()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tORDINAL\tBUCKETS\tEXPECTED\tEXECUTIONS\tSHARE\tAT V2\tOUTBOX\tSHARE\tPLACEMENT")
	var execs, outbox, v2 int
	var problems []string
	for _, r := range rows {
		execs += r.executions
		outbox += r.outbox
		v2 += r.versions
		placement := "ok"
		if r.misplaced > 0 {
			placement = fmt.Sprintf("%d MISPLACED", r.misplaced)
			problems = append(problems, fmt.Sprintf("shard %q holds %d rows whose key belongs to another shard", r.shard.Name, r.misplaced))
		}
		if r.executions != r.routed {
			problems = append(problems, fmt.Sprintf("shard %q holds %d of this run's executions, the router sent %d", r.shard.Name, r.executions, r.routed))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\t%d\t%d\t%s\t%s\n", r.shard.Name, r.shard.Ordinal, counts[r.shard.Name],
			pct(counts[r.shard.Name], m.Buckets), r.executions, pct(r.executions, len(run.ids)), r.versions,
			r.outbox, pct(r.outbox, 2*len(run.ids)), placement)
	}
	fmt.Fprintf(tw, "TOTAL\t\t%d\t100%%\t%d\t%s\t%d\t%d\t%s\n", m.Buckets, execs, pct(execs, len(run.ids)), v2, outbox, pct(outbox, 2*len(run.ids)))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nplacement checked on every shard in SQL: pgshard_bucket(key) within the shard's ranges for its executions, timers, trace, dedupe records and this run's outbox rows (by emitter)\n")
	if execs != len(run.ids) {
		problems = append(problems, fmt.Sprintf("%d of %d executions found", execs, len(run.ids)))
	}
	if v2 != len(run.ids) {
		problems = append(problems, fmt.Sprintf("%d of %d executions at version 2", v2, len(run.ids)))
	}
	if outbox != 2*len(run.ids) {
		problems = append(problems, fmt.Sprintf("%d of %d outbox rows found", outbox, 2*len(run.ids)))
	}
	if len(problems) > 0 {
		return errors.New("store demo: " + strings.Join(problems, "; "))
	}
	return nil
}

// demoRoundTrips returns the router's round trips that carried
// operations, and its pools' liveness pings of idle connections, which
// carry none (counted apart so the per-commit figure is the store's own).
func demoRoundTrips(r *router.Router) (ops, pings uint64) {
	st := r.Stats()
	for _, s := range st.Shards {
		pings += s.Pings
	}
	return st.RoundTrips - pings, pings
}
