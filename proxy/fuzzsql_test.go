package proxy_test

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/pgshard/pgshard/proxy"
)

// TestFuzzSQL is the random differential test: a seeded generator
// (fuzzsql_gen_test.go) writes read queries over the store's tables; each
// runs against one plain Postgres and against pgshard over 3 shards
// holding the same rows, in simple, extended and binary modes, as COPY
// (query) TO STDOUT (its lines as a multiset) and (every third case)
// through a SQL cursor fetched 7 rows at a time, and must be
// answered the same (wire values, column descriptions, command tag — in
// order when the query's ORDER BY is total, else as a multiset) or
// refused with 0A000. A different answer, a different error or a hang
// (each case is bounded) fails the test.
//
// PGSHARD_FUZZSQL_SEEDS (comma-separated, default "1") and
// PGSHARD_FUZZSQL_CASES (per seed, default 1000) size the run: `make
// fuzz-sql SEEDS=1,2,3,4,5 CASES=2000` is a long run;
// PGSHARD_FUZZSQL_SHAPE (plain, aggregate, semi, cte, setop, window,
// values, scalar, derived, nofrom, semiwide, unsharded, lateral, rich or
// vals)
// generates one shape only;
// PGSHARD_FUZZSQL_MODES (comma-separated names of TestDifferential's
// modes, copy, cursor) runs those modes instead of the default five
// (txn-set, set-pipe and set-query put transaction-local settings ahead
// of each query). The test logs the
// answer rate (answered / (answered + refused), over the cases the
// reference database answers) and the refusals by reason.
func TestFuzzSQL(t *testing.T) {
	seeds := []uint64{1}
	if s := os.Getenv("PGSHARD_FUZZSQL_SEEDS"); s != "" {
		seeds = nil
		for _, f := range strings.Split(s, ",") {
			v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("PGSHARD_FUZZSQL_SEEDS: %q is not a seed", f)
			}
			seeds = append(seeds, v)
		}
	}
	cases := 1000
	if s := os.Getenv("PGSHARD_FUZZSQL_CASES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("PGSHARD_FUZZSQL_CASES: %q is not a positive count", s)
		}
		cases = v
	}
	var shape func(*ggen) gquery
	if s := os.Getenv("PGSHARD_FUZZSQL_SHAPE"); s != "" {
		if shape = ggenShapes[s]; shape == nil {
			t.Fatalf("PGSHARD_FUZZSQL_SHAPE: %q is not a shape (plain, aggregate, semi, cte, setop, window, values, scalar, derived, nofrom, semiwide, unsharded, lateral, rich, vals)", s)
		}
	}
	ctx := ctxT(t, time.Duration(len(seeds)*cases)*30*time.Millisecond*3+10*time.Minute)
	// The fence on: each shard's part of a read of every shard reads the
	// buckets it serves only (route.Analyzer.ServedSQL), as on a
	// cluster whose ranges move; the corpus (TestDifferential) runs
	// without it.
	env := setupDiffEnv(ctx, t, fenceMode(proxy.FenceOn))
	var ids []string
	for _, x := range env.execs {
		ids = append(ids, x.id)
	}
	modes := fuzzModes(t, os.Getenv("PGSHARD_FUZZSQL_MODES"))
	verbose := os.Getenv("PGSHARD_DIFF_VERBOSE") == "1"
	tally := map[string]int{}
	perMode := map[string]int{} // "mode verdict" -> cases
	reasons := map[string]int{}
	failures := 0
	start := time.Now()
	for _, seed := range seeds {
		g := newGgen(seed, ids)
		g.only = shape
		var qs []gquery
		for i := 0; i < cases; i++ {
			qs = append(qs, g.gen())
		}
		for _, mode := range modes {
			ref := diffConnect(ctx, t, env.refDSN, mode)
			px := diffConnect(ctx, t, env.px.dsn, mode)
			for i, gq := range qs {
				if mode.name == diffCursorMode.name && i%3 != 0 {
					continue // a third of the cases: a cursor costs a round trip per 7 rows
				}
				dc := diffCase{line: i, sql: gq.sql, params: gq.params, unordered: !gq.ordered}
				want := mode.run(ctx, ref.get(ctx, t), dc)
				got := mode.run(ctx, px.get(ctx, t), dc)
				if want.broken != nil {
					t.Fatalf("seed %d case %d %s: the reference database failed: %v\n%s", seed, i, mode.name, want.broken, gq.sql)
				}
				if got.broken != nil {
					failures++
					t.Errorf("seed %d case %d %s: the proxy connection failed (a hang or a closed connection): %v\n  %s %s", seed, i, mode.name, got.broken, gq.sql, paramsText(gq.params))
					px.reset()
					tally["broken"]++
					continue
				}
				v, detail := diffCompare(want, got, dc)
				if v == "same" || v == "same-error" || v == "refused" {
					if want.code != "" {
						v = "reference-error"
					}
				}
				tally[v]++
				perMode[mode.name+" "+v]++
				switch v {
				case "wrong", "error":
					failures++
					if failures <= 40 {
						t.Errorf("seed %d case %d %s: %s: %s\n  %s %s", seed, i, mode.name, v, detail, gq.sql, paramsText(gq.params))
					}
				case "refused":
					reasons[clipReason(got.msg)]++
					if verbose {
						t.Logf("refused: %s\n  %s", got.msg, gq.sql)
					}
				}
			}
			ref.close()
			px.close()
		}
	}
	answered, refused := tally["same"], tally["refused"]
	rate := 0.0
	if answered+refused > 0 {
		rate = 100 * float64(answered) / float64(answered+refused)
	}
	var byMode []string
	for _, mode := range modes {
		a, r := perMode[mode.name+" same"], perMode[mode.name+" refused"]
		if a+r > 0 {
			byMode = append(byMode, fmt.Sprintf("%s %.1f %% (%d/%d)", mode.name, 100*float64(a)/float64(a+r), a, a+r))
		}
	}
	var rs []string
	for r, n := range reasons {
		rs = append(rs, fmt.Sprintf("%5d × %s", n, r))
	}
	sort.Strings(rs)
	t.Logf("fuzz-sql: seeds %v × %d cases × %d modes in %s: %d answered the same, %d refused (0A000), %d the same error as one database, %d wrong, %d errors where one database answers, %d broken; answer rate %.1f %% (%s)\nrefusals by reason:\n  %s",
		seeds, cases, len(modes), time.Since(start).Round(time.Second), answered, refused, tally["reference-error"], tally["wrong"], tally["error"], tally["broken"], rate, strings.Join(byMode, ", "), strings.Join(rs, "\n  "))
}

func paramsText(ps []*string) string {
	if len(ps) == 0 {
		return ""
	}
	var out []string
	for _, p := range ps {
		if p == nil {
			out = append(out, "NULL")
		} else {
			out = append(out, strconv.Quote(*p))
		}
	}
	return ";; [" + strings.Join(out, ", ") + "]"
}

// TestFuzzSQLGenerator checks the generator without a database: a seed
// gives the same queries every time, and every query parses.
// PGSHARD_FUZZSQL_SHOW=N prints N of them.
func TestFuzzSQLGenerator(t *testing.T) {
	ids := []string{"00112233445566778899aabbccddeeff", "ffeeddccbbaa99887766554433221100"}
	a, b := newGgen(3, ids), newGgen(3, ids)
	show, _ := strconv.Atoi(os.Getenv("PGSHARD_FUZZSQL_SHOW"))
	for i := 0; i < 2000; i++ {
		x, y := a.gen(), b.gen()
		if x.sql != y.sql || len(x.params) != len(y.params) {
			t.Fatalf("case %d differs for one seed:\n%s\n%s", i, x.sql, y.sql)
		}
		if _, err := pg_query.Parse(x.sql); err != nil {
			t.Fatalf("case %d does not parse: %v\n%s", i, err, x.sql)
		}
		if i < show {
			t.Logf("%v %s %s", x.ordered, x.sql, paramsText(x.params))
		}
	}
}

// fuzzModes is the modes TestFuzzSQL runs: names (comma-separated) of
// TestDifferential's modes, copy or cursor; "" is simple, extended,
// binary, COPY (query) TO and a cursor.
func fuzzModes(t *testing.T, names string) []diffMode {
	all := append(diffModes(""), diffCopyMode, diffCursorMode)
	if names == "" {
		return append(all[:3:3], diffCopyMode, diffCursorMode)
	}
	var modes []diffMode
	for _, n := range strings.Split(names, ",") {
		i := slices.IndexFunc(all, func(m diffMode) bool { return m.name == strings.TrimSpace(n) })
		if i < 0 {
			var known []string
			for _, m := range all {
				known = append(known, m.name)
			}
			t.Fatalf("PGSHARD_FUZZSQL_MODES: %q is not a mode (%s)", n, strings.Join(known, ", "))
		}
		modes = append(modes, all[i])
	}
	return modes
}
