package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// TestDifferential runs every statement of testdata/differential.sql
// against one plain Postgres database and against pgshard over 3 shards
// holding the same rows, in each protocol mode, and compares the answers:
// each case must be the same (rows byte for byte in order — or as a
// multiset where the statement leaves the order open — column names,
// types, type modifiers, sizes and formats, command tag; or the same
// SQLSTATE when both fail) or refused by pgshard with 0A000. A wrong
// answer, an error where the database answers, or a hang fails the test.
//
// The corpus is one statement per line (see the file's header); a new
// case is one line. PGSHARD_DIFF_VERBOSE=1 logs every refusal.
func TestDifferential(t *testing.T) {
	// A bound for a hang, not a pace: some 2,000 statements against two
	// servers under -race took over 5 minutes at load 45 on 2 cores.
	ctx := ctxT(t, 20*time.Minute)
	env := setupDiffEnv(ctx, t)
	m, execs, refDSN := env.m, env.execs, env.refDSN
	e := env.px

	cases, err := readDiffCorpus(filepath.Join("testdata", "differential.sql"), execs)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 400 {
		t.Fatalf("the corpus has %d statements, the suite needs at least 400", len(cases))
	}
	// A key on shard 1 for the mode that binds the transaction first.
	var bindKey string
	for _, x := range execs {
		if m.ShardIndexForBucket(m.Bucket(x.id)) == 1 {
			bindKey = x.id
			break
		}
	}
	verbose := os.Getenv("PGSHARD_DIFF_VERBOSE") == "1"
	start := time.Now()
	var summary []string
	for _, mode := range diffModes(bindKey) {
		tally := map[string]int{}
		reasons := map[string]int{}
		ref := diffConnect(ctx, t, refDSN, mode)
		px := diffConnect(ctx, t, e.dsn, mode)
		for _, dc := range cases {
			want := mode.run(ctx, ref.get(ctx, t), dc)
			got := mode.run(ctx, px.get(ctx, t), dc)
			if want.broken != nil {
				t.Fatalf("%s line %d: the reference database failed: %v\n%s", mode.name, dc.line, want.broken, dc.sql)
			}
			if got.broken != nil {
				t.Errorf("%s line %d: the proxy connection failed (a hang or a closed connection): %v\n%s", mode.name, dc.line, got.broken, dc.sql)
				px.reset()
				tally["broken"]++
				continue
			}
			v, detail := diffCompare(want, got, dc)
			tally[v]++
			switch v {
			case "wrong", "error":
				t.Errorf("%s line %d: %s: %s\n  %s", mode.name, dc.line, v, detail, dc.sql)
			case "refused":
				reasons[clipReason(got.msg)]++
				if (dc.answered || dc.staged) && !(mode.unknownStyle && strings.Contains(got.msg, "comes first as written")) {
					t.Errorf("%s line %d: refused a shape pgshard answers (@answered): %s\n  %s", mode.name, dc.line, got.msg, dc.sql)
				}
				if verbose {
					t.Logf("%s line %d refused: %s\n  %s", mode.name, dc.line, got.msg, dc.sql)
				}
			}
		}
		ref.close()
		px.close()
		line := fmt.Sprintf("%-10s %d cases: %d same (%d of them the same error), %d refused (0A000), %d wrong, %d errors where one database answers, %d broken",
			mode.name, len(cases), tally["same"]+tally["same-error"], tally["same-error"], tally["refused"], tally["wrong"], tally["error"], tally["broken"])
		summary = append(summary, line)
		if mode.name == "extended" {
			var rs []string
			for r, n := range reasons {
				rs = append(rs, fmt.Sprintf("%4d × %s", n, r))
			}
			sort.Strings(rs)
			t.Logf("refusals (extended protocol), by reason:\n  %s", strings.Join(rs, "\n  "))
		}
	}
	t.Logf("differential suite, %d statements, %s:\n  %s", len(cases), time.Since(start).Round(time.Millisecond), strings.Join(summary, "\n  "))
}

// diffEnv is the differential suites' setup: one plain reference database
// and pgshard over 3 shards holding the same rows.
type diffEnv struct {
	m      *shardmap.Map
	execs  []diffExec
	refDSN string
	px     *proxyEnv
}

// setupDiffEnv creates the reference database and the 3 shards (their
// fence set from the map), loads the data set into both and starts a
// proxy over the shards, with opts.
func setupDiffEnv(ctx context.Context, t *testing.T, opts ...envOpt) *diffEnv {
	t.Helper()
	c := clustertest.Get(t)
	if len(c.Shards) < 4 {
		t.Fatalf("the differential suite needs 4 servers (3 shards + the reference), the cluster has %d", len(c.Shards))
	}
	db := clustertest.FreshDatabase(t, c)
	var shards []shardmap.Shard
	for i := 0; i < 3; i++ {
		s := c.Shards[i]
		shards = append(shards, shardmap.Shard{Name: s.Name, Ordinal: s.Ordinal, DSN: s.DSN(db, c.Spec.User), PoolerDSN: s.PoolerDSN(db, c.Spec.User)})
	}
	m, err := shardmap.Even(shardmap.DefaultBuckets, shards)
	if err != nil {
		t.Fatal(err)
	}
	refMap, err := shardmap.Even(shardmap.DefaultBuckets, []shardmap.Shard{{Name: "reference", Ordinal: 0, DSN: c.Shards[3].DSN(db, c.Spec.User)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, mm := range []*shardmap.Map{m, refMap} {
		if _, err := migrations.Apply(ctx, mm, migrations.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	refDSN := refMap.Shards[0].DSN
	var loaders []*pgx.Conn
	for _, dsn := range []string{refDSN, m.Shards[0].DSN, m.Shards[1].DSN, m.Shards[2].DSN} {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, diffValsDDL+";"+diffLookupDDL+";"+diffGlobalDDL); err != nil {
			t.Fatal(err)
		}
		loaders = append(loaders, conn)
	}
	rows, execs := diffData(m)
	if err := loadDiffData(ctx, rows, loaders[0], loaders[1:]); err != nil {
		t.Fatal(err)
	}
	schema := route.DefaultSchema()
	schema.Tables = append(schema.Tables, route.TableKey{Table: "vals", Column: "id", Type: route.KeyText, Position: 1})
	schema.Global = append(schema.Global, "gdefs")
	e := startProxyFor(t, &testDB{c: c, name: db, m: m}, append([]envOpt{direct(), withSchema(m, schema)}, opts...)...)

	return &diffEnv{m: m, execs: execs, refDSN: refDSN, px: e}
}

// withSchema routes with another sharding schema.
func withSchema(m *shardmap.Map, schema route.Schema) envOpt {
	return func(c *proxy.Config) {
		an, err := route.New(m, schema, route.Options{})
		if err != nil {
			panic(err)
		}
		c.Analyzer = an
	}
}

// diffCase is one line of the corpus.
type diffCase struct {
	line      int
	sql       string
	params    []*string
	unordered bool
	ties      []int // 1-based columns whose sequence must match; rows compared as a multiset
	answered  bool  // @answered: a refusal fails the test (a shape pgshard answers)
	// staged (@staged): a read in two stages, which must be answered too
	// (in every mode: behind transaction-local settings each stage sets
	// them first).
	staged bool
}

var diffParamRe = regexp.MustCompile(`\{exec(\d+)\}`)

// readDiffCorpus reads the corpus. A line is
//
//	[@unordered | @ties=1,3 | @answered | @staged] SQL [ ;; JSON array of parameters ]
//
// {execN} in SQL or parameters is the id of the data set's execution N.
func readDiffCorpus(path string, execs []diffExec) ([]diffCase, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []diffCase
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n := 0
	subst := func(s string) string {
		return diffParamRe.ReplaceAllStringFunc(s, func(m string) string {
			i, _ := strconv.Atoi(m[5 : len(m)-1])
			return execs[i%len(execs)].id
		})
	}
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		dc := diffCase{line: n}
		for strings.HasPrefix(line, "@") {
			flag, rest, _ := strings.Cut(line, " ")
			switch {
			case flag == "@unordered":
				dc.unordered = true
			case flag == "@answered":
				dc.answered = true
			case flag == "@staged":
				dc.staged = true
			case strings.HasPrefix(flag, "@ties="):
				for _, c := range strings.Split(strings.TrimPrefix(flag, "@ties="), ",") {
					k, err := strconv.Atoi(c)
					if err != nil {
						return nil, fmt.Errorf("%s:%d: bad flag %s", path, n, flag)
					}
					dc.ties = append(dc.ties, k)
				}
			default:
				return nil, fmt.Errorf("%s:%d: unknown flag %s", path, n, flag)
			}
			line = strings.TrimSpace(rest)
		}
		sql, ps, hasParams := strings.Cut(line, " ;; ")
		dc.sql = subst(strings.TrimSpace(sql))
		if hasParams {
			var raw []*string
			if err := json.Unmarshal([]byte(subst(ps)), &raw); err != nil {
				return nil, fmt.Errorf("%s:%d: parameters: %v", path, n, err)
			}
			dc.params = raw
		}
		if !dc.unordered && dc.ties == nil && !strings.Contains(strings.ToUpper(dc.sql), "ORDER BY") {
			dc.unordered = true
		}
		out = append(out, dc)
	}
	return out, sc.Err()
}

// diffResult is one answer.
type diffResult struct {
	fields []pgconn.FieldDescription
	rows   [][][]byte
	tag    string
	code   string // SQLSTATE of the error, "" if none
	msg    string
	broken error // not an answer: a timeout, a closed connection
}

// diffMode runs a case one way.
type diffMode struct {
	name    string
	startup map[string]string
	// init is run once on each new connection (session settings).
	init string
	// unknownStyle: the mode sets DateStyle and TimeZone where pgshard
	// does not know them (SET LOCAL in a block): an @answered line
	// ordering dates written day and month as numbers, or zone
	// abbreviations, may be refused.
	unknownStyle bool
	run          func(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult
}

func diffModes(bindKey string) []diffMode {
	ext := func(binary bool) func(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult {
		return func(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult {
			var formats []int16
			if binary {
				formats = []int16{1}
			}
			return diffExtended(ctx, conn, dc, formats)
		}
	}
	inTxn := func(before string) func(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult {
		return inTxnRun(before, func(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult {
			return diffExtended(ctx, conn, dc, nil)
		})
	}
	return []diffMode{
		{name: "simple", run: func(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult {
			return diffSimpleSQL(ctx, conn, interpolate(dc.sql, dc.params))
		}},
		{name: "extended", run: ext(false)},
		{name: "binary", run: ext(true)},
		{name: "txn", run: inTxn("")},
		{name: "txn-bound", run: inTxn("SELECT version FROM executions WHERE id = '" + bindKey + "'")},
		{name: "txn-set", run: inTxn(diffSetLocal + "; " + strings.Replace(diffSetConfig, "$1", "'55s'", 1))},
		{name: "floats0", startup: map[string]string{"extra_float_digits": "0"}, run: func(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult {
			return diffSimpleSQL(ctx, conn, interpolate(dc.sql, dc.params))
		}},
		{name: "set-pipe", run: diffSettingsPipeline},
		{name: "txn-set-pipe", run: inTxnRun("", diffSettingsPipeline)},
		{name: "set-query", run: func(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult {
			return diffSettingsQuery(ctx, conn, interpolate(dc.sql, dc.params))
		}},
		// Session styles every value a shard writes as text depends on
		// (timestamps, dates, intervals, floats), given at startup and by
		// SET: every shard a read runs on, and every value the merge or a
		// second stage writes itself, must follow them.
		{name: "styles", startup: map[string]string{"TimeZone": "America/St_Johns", "DateStyle": "SQL, DMY", "IntervalStyle": "postgres_verbose"},
			run: func(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult {
				return diffSimpleSQL(ctx, conn, interpolate(dc.sql, dc.params))
			}},
		{name: "styles-set", init: "SET TimeZone = 'Asia/Kathmandu'; SET DateStyle = 'German'; SET IntervalStyle = 'sql_standard'; SET extra_float_digits = 0",
			run: ext(false)},
		// The Postgres style (day names, month names, zone abbreviations
		// of a zone whose saving time is negative), in the session and
		// set transaction-locally, where pgshard is not told the style
		// until the transaction's first ReadyForQuery.
		{name: "styles-pg", startup: map[string]string{"TimeZone": "Europe/Dublin", "DateStyle": "Postgres, YMD", "IntervalStyle": "iso_8601"}, run: ext(false)},
		{name: "latin1", startup: map[string]string{"client_encoding": "LATIN1"}, run: ext(false)},
		{name: "euc-jp", startup: map[string]string{"client_encoding": "EUC_JP"}, run: func(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult {
			return diffSimpleSQL(ctx, conn, interpolate(dc.sql, dc.params))
		}},
		{name: "styles-txn", unknownStyle: true, run: inTxn("SET LOCAL DateStyle = 'Postgres, DMY'; SET LOCAL TimeZone = 'America/New_York'")},
	}
}

// inTxnRun runs a case with run inside a transaction block: BEGIN, before
// (a query string, if any), the case, COMMIT.
func inTxnRun(before string, run func(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult) func(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult {
	return func(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult {
		if r := diffSimpleSQL(ctx, conn, "BEGIN"); r.code != "" || r.broken != nil {
			return r
		}
		if before != "" {
			if r := diffSimpleSQL(ctx, conn, before); r.code != "" || r.broken != nil {
				return r
			}
		}
		r := run(ctx, conn, dc)
		end := diffSimpleSQL(ctx, conn, "COMMIT")
		if end.broken != nil && r.broken == nil {
			r.broken = end.broken
		}
		return r
	}
}

// The settings modes run each case behind transaction-local settings in
// its implicit transaction, as pgshard's store and drivers send them: in
// one pipeline (set-pipe: SELECT set_config(...) with a parameter, SET
// LOCAL, the case, one Sync) or one query string (set-query), and the
// pipeline inside a transaction block (txn-set-pipe). The
// settings must apply to the case on every shard it runs on:
// extra_float_digits 0 changes how floats print (values the merge
// computes included).
const (
	diffSetConfig = "SELECT set_config('statement_timeout', $1, true)"
	diffSetLocal  = "SET LOCAL extra_float_digits = 0"
)

// diffSettingsCheck is the answer when the settings themselves were not
// answered as one database answers them (a failure of the suite, never a
// refusal).
func diffSettingsCheck(setConfig *pgconn.Result, setLocal *pgconn.Result) *diffResult {
	switch {
	case setConfig.Err != nil || len(setConfig.Rows) != 1 || len(setConfig.Rows[0]) != 1 || string(setConfig.Rows[0][0]) != "55s":
		return &diffResult{code: "XXSET", msg: fmt.Sprintf("set_config answered %v (%v)", setConfig.Rows, setConfig.Err)}
	case setLocal.Err != nil || setLocal.CommandTag.String() != "SET":
		return &diffResult{code: "XXSET", msg: fmt.Sprintf("SET LOCAL answered %q (%v)", setLocal.CommandTag, setLocal.Err)}
	}
	return nil
}

func diffSettingsPipeline(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult {
	ctx, cancel := context.WithTimeout(ctx, diffTimeout)
	defer cancel()
	var params [][]byte
	for _, p := range dc.params {
		if p == nil {
			params = append(params, nil)
		} else {
			params = append(params, []byte(*p))
		}
	}
	p := conn.StartPipeline(ctx)
	p.SendQueryParams(diffSetConfig, [][]byte{[]byte("55s")}, nil, nil, nil)
	p.SendQueryParams(diffSetLocal, nil, nil, nil, nil)
	p.SendQueryParams(dc.sql, params, nil, nil, nil)
	p.SendPipelineSync()
	if err := p.Flush(); err != nil {
		return diffErr(err)
	}
	var rs []*pgconn.Result
	for len(rs) < 3 {
		res, err := p.GetResults()
		if err != nil {
			if errors.As(err, new(*pgconn.PgError)) {
				rs = append(rs, &pgconn.Result{Err: err})
				continue
			}
			return diffErr(err)
		}
		rr, ok := res.(*pgconn.ResultReader)
		if !ok {
			return diffResult{broken: fmt.Errorf("pipeline: %T before the results", res)}
		}
		rs = append(rs, rr.Read())
	}
	if _, err := p.GetResults(); err != nil { // the Sync
		return diffErr(err)
	}
	if err := p.Close(); err != nil {
		return diffErr(err)
	}
	if r := rs[2]; r.Err != nil {
		if bad := diffSettingsCheck(rs[0], rs[1]); bad != nil && rs[0].Err == nil {
			return *bad
		}
		return diffErr(r.Err)
	}
	if bad := diffSettingsCheck(rs[0], rs[1]); bad != nil {
		return *bad
	}
	r := rs[2]
	return diffResult{fields: r.FieldDescriptions, rows: r.Rows, tag: r.CommandTag.String()}
}

func diffSettingsQuery(ctx context.Context, conn *pgconn.PgConn, sql string) diffResult {
	ctx, cancel := context.WithTimeout(ctx, diffTimeout)
	defer cancel()
	results, err := conn.Exec(ctx, diffSetLocal+"; "+strings.Replace(diffSetConfig, "$1", "'55s'", 1)+"; "+sql).ReadAll()
	if len(results) < 3 {
		if len(results) > 0 && results[len(results)-1].Err != nil {
			return diffErr(results[len(results)-1].Err)
		}
		return diffErr(err)
	}
	if bad := diffSettingsCheck(results[1], results[0]); bad != nil {
		return *bad
	}
	r := results[len(results)-1]
	if r.Err != nil {
		return diffErr(r.Err)
	}
	if err != nil {
		return diffErr(err)
	}
	return diffResult{fields: r.FieldDescriptions, rows: r.Rows, tag: r.CommandTag.String()}
}

const diffTimeout = 30 * time.Second

func diffSimpleSQL(ctx context.Context, conn *pgconn.PgConn, sql string) diffResult {
	ctx, cancel := context.WithTimeout(ctx, diffTimeout)
	defer cancel()
	results, err := conn.Exec(ctx, sql).ReadAll()
	if len(results) == 0 {
		return diffErr(err)
	}
	r := results[len(results)-1]
	if r.Err != nil {
		return diffErr(r.Err)
	}
	if err != nil {
		return diffErr(err)
	}
	return diffResult{fields: r.FieldDescriptions, rows: r.Rows, tag: r.CommandTag.String()}
}

func diffExtended(ctx context.Context, conn *pgconn.PgConn, dc diffCase, formats []int16) diffResult {
	ctx, cancel := context.WithTimeout(ctx, diffTimeout)
	defer cancel()
	var params [][]byte
	for _, p := range dc.params {
		if p == nil {
			params = append(params, nil)
		} else {
			params = append(params, []byte(*p))
		}
	}
	r := conn.ExecParams(ctx, dc.sql, params, nil, nil, formats).Read()
	if r.Err != nil {
		return diffErr(r.Err)
	}
	return diffResult{fields: r.FieldDescriptions, rows: r.Rows, tag: r.CommandTag.String()}
}

// diffCopyMode runs a case as COPY (case) TO STDOUT: its text lines, one
// row each, sorted (a COPY of every shard is their outputs one after the
// other; ties of an ORDER BY come in any order), and its "COPY n". A
// read whose rows need merging is merged and written as the COPY by
// pgshard (copyrows.go); either must give one database's lines.
var diffCopyMode = diffMode{name: "copy", run: func(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult {
	ctx, cancel := context.WithTimeout(ctx, diffTimeout)
	defer cancel()
	var buf bytes.Buffer
	tag, err := conn.CopyTo(ctx, &buf, "COPY ("+interpolate(dc.sql, dc.params)+") TO STDOUT")
	if err != nil {
		return diffErr(err)
	}
	lines := strings.SplitAfter(buf.String(), "\n")
	slices.Sort(lines)
	var rows [][][]byte
	for _, l := range lines {
		if l != "" {
			rows = append(rows, [][]byte{[]byte(l)})
		}
	}
	return diffResult{rows: rows, tag: tag.String()}
}}

// diffCursorMode runs a case through a SQL cursor, as psql's FETCH_COUNT
// and psycopg's named cursors do: BEGIN, DECLARE, FETCH FORWARD 7 until a
// fetch returns fewer rows, COMMIT (ROLLBACK after an error). Its answer
// is the fetches' rows put together, the first fetch's description and
// "SELECT n" of the rows, or the first error. A read of every shard is
// kept by the proxy at the DECLARE and fetched from it (cursor.go), so
// this checks that every merge shape survives being kept and fetched in
// parts.
var diffCursorMode = diffMode{name: "cursor", run: func(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult {
	if r := diffSimpleSQL(ctx, conn, "BEGIN"); r.code != "" || r.broken != nil {
		return r
	}
	r := diffCursorFetch(ctx, conn, dc)
	end := "COMMIT"
	if r.code != "" {
		end = "ROLLBACK"
	}
	if e := diffSimpleSQL(ctx, conn, end); e.broken != nil && r.broken == nil {
		r.broken = e.broken
	}
	return r
}}

// diffCursorFetch declares the case's cursor and fetches it whole, at
// most 100,000 fetches.
func diffCursorFetch(ctx context.Context, conn *pgconn.PgConn, dc diffCase) diffResult {
	if r := diffSimpleSQL(ctx, conn, "DECLARE pgshard_diff CURSOR FOR "+interpolate(dc.sql, dc.params)); r.code != "" || r.broken != nil {
		return r
	}
	var out diffResult
	for i := 0; i < 100_000; i++ {
		r := diffSimpleSQL(ctx, conn, "FETCH FORWARD 7 FROM pgshard_diff")
		if r.code != "" || r.broken != nil {
			return r
		}
		if i == 0 {
			out.fields = r.fields
		}
		out.rows = append(out.rows, r.rows...)
		if len(r.rows) < 7 {
			break
		}
	}
	out.tag = fmt.Sprintf("SELECT %d", len(out.rows))
	return out
}

func diffErr(err error) diffResult {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return diffResult{code: pe.Code, msg: pe.Message}
	}
	return diffResult{broken: err}
}

// interpolate writes the parameters into the text, as a client library
// without server-side parameters does: quoted strings, NULL.
func interpolate(sql string, params []*string) string {
	for i := len(params); i >= 1; i-- {
		v := "NULL"
		if p := params[i-1]; p != nil {
			v = "'" + strings.ReplaceAll(*p, "'", "''") + "'"
		}
		sql = regexp.MustCompile(`\$`+strconv.Itoa(i)+`\b`).ReplaceAllLiteralString(sql, v)
	}
	return sql
}

// diffCompare judges an answer against one database's.
func diffCompare(want, got diffResult, dc diffCase) (string, string) {
	switch {
	case want.code != "" && got.code != "":
		if want.code == got.code {
			return "same-error", ""
		}
		if got.code == "0A000" {
			return "refused", ""
		}
		return "wrong", fmt.Sprintf("SQLSTATE %s (%s), one database: %s (%s)", got.code, got.msg, want.code, want.msg)
	case got.code == "0A000":
		return "refused", ""
	case got.code != "":
		return "error", fmt.Sprintf("SQLSTATE %s: %s", got.code, got.msg)
	case want.code != "":
		return "wrong", fmt.Sprintf("answered where one database fails with %s (%s)", want.code, want.msg)
	}
	if want.tag != got.tag {
		return "wrong", fmt.Sprintf("command tag %q, one database %q", got.tag, want.tag)
	}
	if len(want.fields) != len(got.fields) {
		return "wrong", fmt.Sprintf("%d columns, one database %d", len(got.fields), len(want.fields))
	}
	for i := range want.fields {
		w, g := want.fields[i], got.fields[i]
		if w.Name != g.Name || w.DataTypeOID != g.DataTypeOID || w.TypeModifier != g.TypeModifier || w.DataTypeSize != g.DataTypeSize ||
			w.Format != g.Format || w.TableAttributeNumber != g.TableAttributeNumber || (w.TableOID == 0) != (g.TableOID == 0) {
			return "wrong", fmt.Sprintf("column %d is %s, one database's %s", i+1, fieldText(g), fieldText(w))
		}
	}
	wr, gr := want.rows, got.rows
	if dc.unordered || dc.ties != nil {
		if dc.ties != nil {
			wp, gp := project(wr, dc.ties), project(gr, dc.ties)
			if !slices.EqualFunc(wp, gp, rowEqual) {
				return "wrong", "the order of the sort columns differs:\n" + rowsText(gp, 8) + "\n one database:\n" + rowsText(wp, 8)
			}
		}
		wr, gr = sortedRows(wr), sortedRows(gr)
	}
	if !slices.EqualFunc(wr, gr, rowEqual) {
		return "wrong", fmt.Sprintf("%d rows:\n%s\n one database, %d rows:\n%s", len(gr), rowsText(gr, 8), len(wr), rowsText(wr, 8))
	}
	return "same", ""
}

func fieldText(f pgconn.FieldDescription) string {
	return fmt.Sprintf("%q oid %d mod %d size %d format %d attnum %d table %v", f.Name, f.DataTypeOID, f.TypeModifier, f.DataTypeSize, f.Format, f.TableAttributeNumber, f.TableOID != 0)
}

func rowEqual(a, b [][]byte) bool {
	return slices.EqualFunc(a, b, func(x, y []byte) bool { return (x == nil) == (y == nil) && bytes.Equal(x, y) })
}

func project(rows [][][]byte, cols []int) [][][]byte {
	out := make([][][]byte, len(rows))
	for i, r := range rows {
		for _, c := range cols {
			if c-1 < len(r) {
				out[i] = append(out[i], r[c-1])
			}
		}
	}
	return out
}

func sortedRows(rows [][][]byte) [][][]byte {
	out := slices.Clone(rows)
	key := func(r [][]byte) string {
		var b strings.Builder
		for _, v := range r {
			if v == nil {
				b.WriteString("\x00N")
			} else {
				b.WriteString("\x00V")
				b.Write(v)
			}
		}
		return b.String()
	}
	sort.SliceStable(out, func(i, j int) bool { return key(out[i]) < key(out[j]) })
	return out
}

func rowsText(rows [][][]byte, max int) string {
	var b strings.Builder
	for i, r := range rows {
		if i == max {
			fmt.Fprintf(&b, "  … %d more\n", len(rows)-max)
			break
		}
		var vs []string
		for _, v := range r {
			if v == nil {
				vs = append(vs, "NULL")
			} else {
				vs = append(vs, strconv.Quote(string(v)))
			}
		}
		fmt.Fprintf(&b, "  (%s)\n", strings.Join(vs, ", "))
	}
	return strings.TrimRight(b.String(), "\n")
}

func clipReason(s string) string {
	if i := strings.IndexAny(s, ":("); i > 20 {
		s = s[:i]
	}
	if len(s) > 110 {
		s = s[:110] + "…"
	}
	return s
}

// diffConn is a connection that reconnects after it broke.
type diffConn struct {
	dsn     string
	startup map[string]string
	init    string
	conn    *pgconn.PgConn
}

func diffConnect(ctx context.Context, t *testing.T, dsn string, mode diffMode) *diffConn {
	return &diffConn{dsn: dsn, startup: mode.startup, init: mode.init}
}

func (d *diffConn) get(ctx context.Context, t *testing.T) *pgconn.PgConn {
	t.Helper()
	if d.conn != nil && !d.conn.IsClosed() {
		return d.conn
	}
	cfg, err := pgconn.ParseConfig(d.dsn)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range d.startup {
		cfg.RuntimeParams[k] = v
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgconn.ConnectConfig(cctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d.init != "" {
		if _, err := conn.Exec(cctx, d.init).ReadAll(); err != nil {
			t.Fatalf("%s: %v", d.init, err)
		}
	}
	d.conn = conn
	return conn
}

func (d *diffConn) reset() {
	if d.conn != nil {
		_ = d.conn.Close(context.Background())
		d.conn = nil
	}
}

func (d *diffConn) close() { d.reset() }
