package verify

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/shardmap"
)

// State is the final contents of every shard of a map: all rows of the
// store's six tables, each with the bucket of its key computed by the
// shard's own Postgres, and each shard's identity record. It round-trips
// as JSON (WriteJSON, ReadState), so the checks need no database.
type State struct {
	// Map is the shard map the state was dumped with (no DSNs).
	Map MapInfo `json:"map"`
	// DumpedAt is when the dump started (zero in hand-written states).
	DumpedAt time.Time `json:"dumped_at,omitzero"`
	// Shards are in map order.
	Shards []*ShardState `json:"shards"`
}

// ShardState is one shard's rows. Rows are ordered by primary key.
type ShardState struct {
	Name    string `json:"name"`
	Ordinal int    `json:"ordinal"`
	// Identity is the shard's pgshard_identity record, nil if it has none.
	Identity *Identity `json:"identity"`
	// Fence is the shard's fence (pgshard_fence_config and pgshard_fence),
	// nil in a state dumped by an older verifier (not compared).
	Fence      *Fence         `json:"fence,omitempty"`
	Executions []ExecutionRow `json:"executions"`
	Outbox     []OutboxRow    `json:"outbox"`
	Processed  []ProcessedRow `json:"processed_events"`
	Timers     []TimerRow     `json:"timers"`
	Spawns     []SpawnRow     `json:"spawns"`
	Trace      []TraceRow     `json:"trace"`
}

// Identity is a shard's record of itself (table pgshard_identity).
type Identity struct {
	Name     string `json:"shard_name"`
	Ordinal  int    `json:"ordinal"`
	Buckets  int    `json:"buckets"`
	MapEpoch uint64 `json:"map_epoch"`
}

// NoBucket is the Bucket of a row whose key could not be read (an outbox
// row whose event is not a JSON object with a "from").
const NoBucket = -1

// ExecutionRow is one row of executions.
type ExecutionRow struct {
	ID           string `json:"id"`
	DefinitionID string `json:"definition_id"`
	Version      int    `json:"version"`
	Data         Doc    `json:"data"`
	Bucket       int    `json:"bucket"`
}

// OutboxRow is one row of outbox; Bucket is that of the event's "from"
// (the emitting execution, which the row is placed by).
type OutboxRow struct {
	Seq      int64   `json:"seq"`
	TargetID *string `json:"target_id"`
	Event    Doc     `json:"event"`
	Bucket   int     `json:"bucket"`
}

// ProcessedRow is one row of processed_events.
type ProcessedRow struct {
	ExecutionID string `json:"execution_id"`
	EventID     string `json:"event_id"`
	Bucket      int    `json:"bucket"`
}

// TimerRow is one row of timers.
type TimerRow struct {
	ExecutionID string  `json:"execution_id"`
	Path        string  `json:"path"`
	FireAt      float64 `json:"fire_at"`
	Bucket      int     `json:"bucket"`
}

// SpawnRow is one row of spawns; Bucket is that of parent_id.
type SpawnRow struct {
	Seq      int64  `json:"seq"`
	ParentID string `json:"parent_id"`
	ChildID  string `json:"child_id"`
	RootPath string `json:"root_path"`
	Context  Doc    `json:"context"`
	Bucket   int    `json:"bucket"`
}

// TraceRow is one row of trace.
type TraceRow struct {
	ExecutionID string `json:"execution_id"`
	Idx         int    `json:"idx"`
	Entry       Doc    `json:"entry"`
	Bucket      int    `json:"bucket"`
}

// Doc is a TEXT column that normally holds a JSON document. In JSON it is
// written as the document itself when the text is a JSON object or array
// (so that dumps and hand-written states are readable), and as a JSON
// string otherwise (a corrupted row stays what it was). Whitespace inside
// a document is not preserved.
type Doc string

// MarshalJSON writes d as described on Doc.
func (d Doc) MarshalJSON() ([]byte, error) {
	t := bytes.TrimSpace([]byte(d))
	if len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(t) {
		return t, nil
	}
	return json.Marshal(string(d))
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (d *Doc) UnmarshalJSON(b []byte) error {
	t := bytes.TrimSpace(b)
	if len(t) > 0 && t[0] == '"' {
		var s string
		if err := json.Unmarshal(t, &s); err != nil {
			return err
		}
		*d = Doc(s)
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, t); err != nil {
		return err
	}
	*d = Doc(buf.String())
	return nil
}

// WriteJSON writes s as indented JSON.
func (s *State) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(s)
}

// ReadState reads a State written by WriteJSON (or by hand). Unknown
// members are errors: a state is a test or regression artefact, and a
// misspelt member would silently change what it says.
func ReadState(r io.Reader) (*State, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var s State
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	if err := s.Map.check(); err != nil {
		return nil, fmt.Errorf("read state: map: %w", err)
	}
	return &s, nil
}

// ReadStateFile reads the State in the file at path, plain or gzip
// (recognized by its magic bytes).
func ReadStateFile(path string) (*State, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("read state %s: %w", path, err)
		}
		defer zr.Close()
		return ReadState(zr)
	}
	return ReadState(br)
}

// WriteStateFile writes s to path, gzip-compressed if path ends in ".gz".
func WriteStateFile(path string, s *State) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	var w io.Writer = f
	var zw *gzip.Writer
	if strings.HasSuffix(path, ".gz") {
		zw = gzip.NewWriter(f)
		w = zw
	}
	err = s.WriteJSON(w)
	if zw != nil {
		err = errors.Join(err, zw.Close())
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("write state %s: %w", path, err)
	}
	return nil
}

// MapInfoOf converts a validated shard map (DSNs dropped).
func MapInfoOf(m *shardmap.Map) MapInfo {
	mi := MapInfo{Epoch: m.Epoch, Buckets: m.Buckets}
	for _, s := range m.Shards {
		ms := MapShard{Name: s.Name, Ordinal: s.Ordinal}
		for _, r := range m.RangesOf(s.Name) {
			ms.Ranges = append(ms.Ranges, [2]int{r.Lo, r.Hi})
		}
		mi.Shards = append(mi.Shards, ms)
	}
	return mi
}

// DumpOptions bound a Dump.
type DumpOptions struct {
	// ConnectTimeout bounds connecting to one shard (default 10 s).
	ConnectTimeout time.Duration
	// Timeout bounds the whole dump of one shard (default 5 min).
	Timeout time.Duration
}

// ShardDownError says which shard could not be dumped.
type ShardDownError struct {
	Shard string
	Err   error
}

func (e *ShardDownError) Error() string { return fmt.Sprintf("dump shard %s: %v", e.Shard, e.Err) }
func (e *ShardDownError) Unwrap() error { return e.Err }

// Dump reads the final state of every shard of m over direct connections
// (each shard's DSN, never a pooler), one read-only REPEATABLE READ
// transaction per shard, so each shard's rows are one snapshot. Rows are
// streamed into the State. Buckets are computed by each shard's Postgres
// from its own hash function (hashtextextended, the formula of ARCHITECTURE.md §2),
// not by pgshard's SQL functions or Go code. A shard that cannot be read
// fails the dump with a *ShardDownError naming it.
func Dump(ctx context.Context, m *shardmap.Map, o DumpOptions) (*State, error) {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	st := &State{Map: MapInfoOf(m), DumpedAt: time.Now().UTC()}
	st.Shards = make([]*ShardState, len(m.Shards))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i, sh := range m.Shards {
		g.Go(func() error {
			ss, err := dumpShard(gctx, sh, m.Buckets, o)
			if err != nil {
				return &ShardDownError{Shard: sh.Name, Err: err}
			}
			st.Shards[i] = ss
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return st, nil
}

// bucketSQL is the bucket of a text key computed by Postgres itself:
// uint64(hashtextextended(key, HASH_PARTITION_SEED) + 0x49a0f4dd15e5a8e3)
// % B, in numeric arithmetic (ARCHITECTURE.md §2; the value PARTITION BY HASH uses).
// It deliberately does not call pgshard_bucket(), the code under test.
func bucketSQL(col string) string {
	return "(((hashtextextended(" + col + ", 8816678312871386365)::numeric + 18446744073709551616) % 18446744073709551616" +
		" + 5305509591434766563) % 18446744073709551616 % $1::numeric)::int"
}

func dumpShard(ctx context.Context, sh shardmap.Shard, buckets int, o DumpOptions) (*ShardState, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cfg, err := pgx.ParseConfig(sh.DSN)
	if err != nil {
		return nil, fmt.Errorf("dsn: %w", err)
	}
	cfg.ConnectTimeout = o.ConnectTimeout
	cfg.RuntimeParams["application_name"] = "pgshard-verify"
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	ss := &ShardState{Name: sh.Name, Ordinal: sh.Ordinal}
	if ss.Identity, err = readIdentity(ctx, tx); err != nil {
		return nil, err
	}
	if ss.Fence, err = readFence(ctx, tx); err != nil {
		return nil, err
	}
	b := int64(buckets)
	if err := scan(ctx, tx, "executions",
		"SELECT id, definition_id, version, data, "+bucketSQL("id")+" FROM executions ORDER BY id", b,
		func(r pgx.Rows) error {
			var e ExecutionRow
			var data string
			if err := r.Scan(&e.ID, &e.DefinitionID, &e.Version, &data, &e.Bucket); err != nil {
				return err
			}
			e.Data = Doc(data)
			ss.Executions = append(ss.Executions, e)
			return nil
		}); err != nil {
		return nil, err
	}
	if err := scan(ctx, tx, "outbox", "SELECT seq, target_id, event FROM outbox ORDER BY seq", nil,
		func(r pgx.Rows) error {
			var e OutboxRow
			var ev string
			if err := r.Scan(&e.Seq, &e.TargetID, &ev); err != nil {
				return err
			}
			e.Event, e.Bucket = Doc(ev), NoBucket
			ss.Outbox = append(ss.Outbox, e)
			return nil
		}); err != nil {
		return nil, err
	}
	if err := outboxBuckets(ctx, tx, ss.Outbox, b); err != nil {
		return nil, err
	}
	if err := scan(ctx, tx, "processed_events",
		"SELECT execution_id, event_id, "+bucketSQL("execution_id")+" FROM processed_events ORDER BY execution_id, event_id", b,
		func(r pgx.Rows) error {
			var e ProcessedRow
			if err := r.Scan(&e.ExecutionID, &e.EventID, &e.Bucket); err != nil {
				return err
			}
			ss.Processed = append(ss.Processed, e)
			return nil
		}); err != nil {
		return nil, err
	}
	if err := scan(ctx, tx, "timers",
		"SELECT execution_id, path, fire_at, "+bucketSQL("execution_id")+" FROM timers ORDER BY execution_id, path", b,
		func(r pgx.Rows) error {
			var e TimerRow
			if err := r.Scan(&e.ExecutionID, &e.Path, &e.FireAt, &e.Bucket); err != nil {
				return err
			}
			ss.Timers = append(ss.Timers, e)
			return nil
		}); err != nil {
		return nil, err
	}
	if err := scan(ctx, tx, "spawns",
		"SELECT seq, parent_id, child_id, root_path, context, "+bucketSQL("parent_id")+" FROM spawns ORDER BY seq", b,
		func(r pgx.Rows) error {
			var e SpawnRow
			var c string
			if err := r.Scan(&e.Seq, &e.ParentID, &e.ChildID, &e.RootPath, &c, &e.Bucket); err != nil {
				return err
			}
			e.Context = Doc(c)
			ss.Spawns = append(ss.Spawns, e)
			return nil
		}); err != nil {
		return nil, err
	}
	if err := scan(ctx, tx, "trace",
		"SELECT execution_id, idx, entry, "+bucketSQL("execution_id")+" FROM trace ORDER BY execution_id, idx", b,
		func(r pgx.Rows) error {
			var e TraceRow
			var en string
			if err := r.Scan(&e.ExecutionID, &e.Idx, &en, &e.Bucket); err != nil {
				return err
			}
			e.Entry = Doc(en)
			ss.Trace = append(ss.Trace, e)
			return nil
		}); err != nil {
		return nil, err
	}
	return ss, tx.Commit(ctx)
}

// scan streams the rows of one query into f. arg is the query's $1 (the
// bucket count), nil for none.
func scan(ctx context.Context, tx pgx.Tx, table, sql string, arg any, f func(pgx.Rows) error) error {
	var args []any
	if arg != nil {
		args = append(args, arg)
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := f(rows); err != nil {
			return fmt.Errorf("read %s: %w", table, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s: %w", table, err)
	}
	return nil
}

// outboxBuckets fills in the bucket of each outbox row's event "from",
// computed by the shard (the key lives inside the JSON text, which may be
// anything, so it is extracted here rather than cast in SQL).
func outboxBuckets(ctx context.Context, tx pgx.Tx, rows []OutboxRow, buckets int64) error {
	idx := map[string][]int{}
	for i, r := range rows {
		if from, ok := outboxFrom(r.Event); ok {
			idx[from] = append(idx[from], i)
		}
	}
	keys := make([]string, 0, len(idx))
	for k := range idx {
		keys = append(keys, k)
	}
	const chunk = 10000
	for len(keys) > 0 {
		n := min(chunk, len(keys))
		part := keys[:n]
		keys = keys[n:]
		q, err := tx.Query(ctx, "SELECT k, "+bucketSQL("k")+" FROM unnest($2::text[]) AS k", buckets, part)
		if err != nil {
			return fmt.Errorf("outbox buckets: %w", err)
		}
		for q.Next() {
			var k string
			var b int
			if err := q.Scan(&k, &b); err != nil {
				q.Close()
				return fmt.Errorf("outbox buckets: %w", err)
			}
			for _, i := range idx[k] {
				rows[i].Bucket = b
			}
		}
		q.Close()
		if err := q.Err(); err != nil {
			return fmt.Errorf("outbox buckets: %w", err)
		}
	}
	return nil
}

// outboxFrom is the "from" of an outbox event document.
func outboxFrom(d Doc) (string, bool) {
	var ev struct {
		From *string `json:"from"`
	}
	if json.Unmarshal([]byte(d), &ev) != nil || ev.From == nil {
		return "", false
	}
	return *ev.From, true
}

func readIdentity(ctx context.Context, tx pgx.Tx) (*Identity, error) {
	var id Identity
	var epoch int64
	err := tx.QueryRow(ctx, "SELECT shard_name, ordinal, buckets, map_epoch FROM pgshard_identity").
		Scan(&id.Name, &id.Ordinal, &id.Buckets, &epoch)
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case errors.As(err, &pe) && pe.Code == "42P01":
		// No identity table: reported by the placement check. The
		// failed statement aborted the transaction, so the dump cannot
		// go on in it; but a shard without pgshard's schema has none of
		// the store's tables either.
		return nil, fmt.Errorf("not a pgshard shard (no pgshard_identity table): %w", err)
	case err != nil:
		return nil, fmt.Errorf("read identity: %w", err)
	}
	id.MapEpoch = uint64(epoch)
	return &id, nil
}
