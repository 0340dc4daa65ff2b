package cli

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/loadgen"
)

// freezeCatalog is the catalog whose move journal a loadgen run's freezes
// are read from: catalog.dsn, else the proxy's own proxy.catalog DSN; ""
// when the config names none (no marks).
func freezeCatalog(cfg *config.Config) string {
	if cfg == nil {
		return ""
	}
	if cfg.Catalog.DSN != "" {
		return cfg.Catalog.DSN
	}
	if pc := cfg.Proxy.Catalog; pc != "" && !strings.EqualFold(pc, config.ProxyCatalogOff) {
		return pc
	}
	return ""
}

// journalMove is what the freezes are read from: one row of the catalog's
// move journal, with when the generation its flip wrote was pushed
// (FlippedAt, nil before a flip) and its detail, whose "freezes" the
// mover records (catalog.FreezeRecord).
type journalMove struct {
	ID        int64
	Lo, Hi    int
	From, To  string
	FlippedAt *time.Time
	Detail    string
}

// readRunFreezes reads the move journal of the catalog at dsn and returns
// the freezes that started within [from, end], StartS counted from start
// (bounded by ctx, a short connect timeout).
func readRunFreezes(ctx context.Context, dsn string, from, start, end time.Time) ([]loadgen.Freeze, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("catalog DSN: %w", err)
	}
	cfg.ConnectTimeout = 5 * time.Second
	cfg.RuntimeParams["application_name"] = "pgshard loadgen"
	// Simple protocol: the catalog may sit behind a transaction-pooling
	// PgBouncer (catalog.dsn allows it).
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the catalog: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT m.id, m.lo, m.hi, m.from_shard, m.to_shard, g.pushed_at, m.detail::text
		  FROM `+catalog.Schema+`.moves m LEFT JOIN `+catalog.Schema+`.generations g ON g.epoch = m.to_epoch
		 WHERE m.created_at <= $2 AND coalesce(m.finished_at, now()) >= $1 ORDER BY m.id`, from, end)
	if err != nil {
		return nil, fmt.Errorf("read the move journal: %w", err)
	}
	var ms []journalMove
	for rows.Next() {
		var m journalMove
		if err := rows.Scan(&m.ID, &m.Lo, &m.Hi, &m.From, &m.To, &m.FlippedAt, &m.Detail); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the move journal: %w", err)
		}
		ms = append(ms, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the move journal: %w", err)
	}
	return runFreezes(ms, from, start, end), nil
}

// runFreezes turns journal rows into the freezes that started within
// [from, end], by start time, StartS counted from start: each freeze a
// move's detail records (catalog.FreezeRecord: start, hold, abandoned and
// why) and, for a flipped move whose detail records no flipped freeze (a
// row journaled before freezes were recorded, or a mover that died
// between its flip and the clean-up's journal step), its flip — the end
// of its successful freeze, with no length of its own — marked AtFlip.
func runFreezes(ms []journalMove, from, start, end time.Time) []loadgen.Freeze {
	var out []loadgen.Freeze
	add := func(m journalMove, at time.Time, dur float64, atFlip bool, why string) {
		if at.Before(from) || at.After(end) {
			return
		}
		out = append(out, loadgen.Freeze{Move: m.ID, Lo: m.Lo, Hi: m.Hi, From: m.From, To: m.To, Started: at.UTC(),
			DurationMS: dur, StartS: at.Sub(start).Seconds(), AtFlip: atFlip, Abandoned: why != "", Why: why})
	}
	for _, m := range ms {
		// A detail that cannot be read has no freezes: the flip still marks.
		fs, _ := catalog.DecodeFreezes([]byte(m.Detail))
		flipped := false
		for _, f := range fs {
			if f.StartedAt.IsZero() {
				continue
			}
			why := ""
			if f.Abandoned() {
				why = cmp.Or(f.Why, catalog.WhyError)
			}
			flipped = flipped || f.Outcome == catalog.FreezeFlipped
			add(m, f.StartedAt, max(f.MS, 0), false, why)
		}
		if m.FlippedAt != nil && !flipped {
			add(m, *m.FlippedAt, 0, true, "")
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}
