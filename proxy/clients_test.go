package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/cluster/clustertest"
)

// needBinary finds a client program or fails (skips outside CI).
func needBinary(t *testing.T, name string, paths ...string) string {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		clustertest.SkipOrFail(t, fmt.Errorf("%s not installed (scripts/install-deps.sh installs it): %v", name, err))
	}
	return p
}

// run runs a client program with a deadline and returns its output.
func run(t *testing.T, timeout time.Duration, dir string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=10", "PGAPPNAME=")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return out.String(), fmt.Errorf("%s timed out after %s", name, timeout)
	}
	return out.String(), err
}

// TestPsql drives the psql binary: -c, -f scripts with \gset, transactions
// (committed and rolled back), session settings, a cross-shard refusal.
func TestPsql(t *testing.T) {
	psql := needBinary(t, "psql", "/usr/bin/psql")
	e := startProxy(t)
	d := e.db
	k0 := d.keysOn(0, 2, 2_000_000)
	k1 := d.keysOn(1, 1, 2_000_000)[0]
	dir := t.TempDir()
	script := fmt.Sprintf(`\set ON_ERROR_STOP 1
INSERT INTO accounts (aid, abalance, note) VALUES (%[1]d, 10, 'psql') ON CONFLICT DO NOTHING;
INSERT INTO accounts (aid, abalance, note) VALUES (%[2]d, 20, 'psql');
INSERT INTO accounts (aid, abalance, note) VALUES (%[3]d, 30, 'psql');
SELECT abalance AS bal FROM accounts WHERE aid = %[1]d \gset
SELECT :bal + 1 AS plus_one;
BEGIN;
UPDATE accounts SET abalance = abalance + 5 WHERE aid = %[1]d;
UPDATE accounts SET abalance = abalance + 5 WHERE aid = %[2]d;
SELECT sum(abalance) FROM accounts WHERE aid IN (%[1]d, %[2]d);
COMMIT;
BEGIN;
UPDATE accounts SET abalance = abalance + 1000 WHERE aid = %[1]d;
ROLLBACK;
SELECT abalance FROM accounts WHERE aid = %[1]d;
SHOW TimeZone;
SET TimeZone = 'Asia/Tokyo';
SHOW TimeZone;
SELECT '2024-01-01 00:00:00+00'::timestamptz;
RESET TimeZone;
SHOW TimeZone;
`, k0[0], k0[1], k1)
	if err := os.WriteFile(filepath.Join(dir, "script.sql"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, time.Minute, dir, psql, "-X", "-q", "-At", "-d", e.dsn+"&options=-c%20TimeZone%3DUTC", "-f", "script.sql")
	if err != nil {
		t.Fatalf("psql -f: %v\n%s", err, out)
	}
	want := "11\n40\n15\nUTC\nAsia/Tokyo\n2024-01-01 09:00:00+09\nUTC\n"
	if out != want {
		t.Fatalf("psql -f output:\n%s\nwant:\n%s", out, want)
	}
	// -c with a cross-shard transaction: refused, and nothing committed.
	out, err = run(t, time.Minute, dir, psql, "-X", "-At", "-d", e.dsn, "-v", "ON_ERROR_STOP=1",
		"-c", "BEGIN", "-c", fmt.Sprintf("UPDATE accounts SET abalance = 0 WHERE aid = %d", k0[0]),
		"-c", fmt.Sprintf("UPDATE accounts SET abalance = 0 WHERE aid = %d", k1), "-c", "COMMIT")
	if err == nil || !strings.Contains(out, `statement touches shard "shard1" but the transaction is on shard "shard0"`) {
		t.Fatalf("cross-shard psql: err %v, output:\n%s", err, out)
	}
	out, err = run(t, time.Minute, dir, psql, "-X", "-At", "-d", e.dsn, "-c",
		fmt.Sprintf("SELECT abalance FROM accounts WHERE aid = %d", k0[0]))
	if err != nil || strings.TrimSpace(out) != "15" {
		t.Fatalf("after refused transaction: %v %q (want 15: nothing committed)", err, out)
	}
	// A multi-statement -c string on one shard, and a fan-out read.
	out, err = run(t, time.Minute, dir, psql, "-X", "-q", "-At", "-d", e.dsn, "-c",
		fmt.Sprintf("UPDATE accounts SET note = 'multi' WHERE aid = %d; SELECT note FROM accounts WHERE aid = %d", k0[0], k0[0]))
	if err != nil || strings.TrimSpace(out) != "multi" {
		t.Fatalf("multi-statement: %v %q", err, out)
	}
	out, err = run(t, time.Minute, dir, psql, "-X", "-At", "-d", e.dsn, "-c",
		fmt.Sprintf("SELECT count(*) FROM accounts WHERE note = 'psql' AND aid BETWEEN %d AND %d", k0[0], k1+1_000_000))
	if err != nil || strings.TrimSpace(out) != "2" {
		t.Fatalf("fan-out count: %v %q (want 2)", err, out)
	}
}

var (
	pgbenchProcessed = regexp.MustCompile(`number of transactions actually processed: (\d+)(?:/(\d+))?`)
	pgbenchFailed    = regexp.MustCompile(`number of failed transactions: (\d+)`)
)

// pgbenchRun runs pgbench and returns the number of processed
// transactions, failing on any error.
func pgbenchRun(t *testing.T, pgbench, dsn, dir, script, mode string, clients, txns int) int {
	t.Helper()
	out, err := run(t, 3*time.Minute, dir, pgbench, "-n", "-M", mode, "-c", strconv.Itoa(clients), "-j", "2",
		"-t", strconv.Itoa(txns), "-f", script, dsn)
	if err != nil {
		t.Fatalf("pgbench -M %s -f %s: %v\n%s", mode, script, err, out)
	}
	m := pgbenchProcessed.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("pgbench output without a transaction count:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	if n != clients*txns {
		t.Fatalf("pgbench -M %s: processed %d of %d transactions:\n%s", mode, n, clients*txns, out)
	}
	if f := pgbenchFailed.FindStringSubmatch(out); f != nil && f[1] != "0" {
		t.Fatalf("pgbench -M %s: %s failed transactions:\n%s", mode, f[1], out)
	}
	if strings.Contains(out, "error") || strings.Contains(out, "ERROR") {
		t.Fatalf("pgbench -M %s reported errors:\n%s", mode, out)
	}
	return n
}

// TestPgbench runs pgbench in every protocol mode with custom scripts: a
// point SELECT and a version-checked UPDATE on an int8-keyed table and on
// executions, through PgBouncer and directly, and then checks that every
// UPDATE really updated (the versions add up to the transactions run).
func TestPgbench(t *testing.T) {
	pgbench := needBinary(t, "pgbench", "/usr/bin/pgbench", "/usr/lib/postgresql/15/bin/pgbench")
	d := db(t)
	const n = 500
	ctx := ctxT(t, 2*time.Minute)
	// Seed rows on the shard that owns each key (pgshard_bucket places them).
	for i, s := range d.m.Shards {
		var cond []string
		for _, r := range d.m.RangesOf(s.Name) {
			cond = append(cond, fmt.Sprintf("pgshard_bucket(g::int8, %d) BETWEEN %d AND %d", d.m.Buckets, r.Lo, r.Hi))
		}
		var tcond []string
		for _, r := range d.m.RangesOf(s.Name) {
			tcond = append(tcond, fmt.Sprintf("pgshard_bucket((1000000 + g)::text, %d) BETWEEN %d AND %d", d.m.Buckets, r.Lo, r.Hi))
		}
		sql := fmt.Sprintf(`
DELETE FROM pgbench_accounts WHERE aid BETWEEN 1 AND %[1]d;
INSERT INTO pgbench_accounts (aid, bid, abalance, filler) SELECT g, 1, 0, '' FROM generate_series(1, %[1]d) g WHERE %[2]s;
DELETE FROM accounts WHERE aid BETWEEN 1 AND %[1]d;
INSERT INTO accounts (aid, abalance, version) SELECT g, 0, 1 FROM generate_series(1, %[1]d) g WHERE %[2]s;
DELETE FROM executions WHERE definition_id = 'pgbench';
INSERT INTO executions (id, definition_id, data, version) SELECT (1000000 + g)::text, 'pgbench', '{"v":1}', 1 FROM generate_series(1, %[1]d) g WHERE %[3]s;`,
			n, strings.Join(cond, " OR "), strings.Join(tcond, " OR "))
		if err := execDirect(ctx, s.DSN, sql); err != nil {
			t.Fatalf("seed shard %d: %v", i, err)
		}
	}
	dir := t.TempDir()
	scripts := map[string]string{
		"select.sql": fmt.Sprintf("\\set aid random(1, %d)\nSELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n", n),
		"update.sql": fmt.Sprintf(`\set aid random(1, %d)
BEGIN;
SELECT version AS ver FROM accounts WHERE aid = :aid FOR UPDATE \gset
UPDATE accounts SET abalance = abalance + 1, version = version + 1 WHERE aid = :aid AND version = :ver;
END;
`, n),
		"exec_select.sql": fmt.Sprintf("\\set i random(1000001, %d)\nSELECT version FROM executions WHERE id = :i::text;\n", 1000000+n),
		"exec_update.sql": fmt.Sprintf(`\set i random(1000001, %d)
BEGIN;
SELECT version AS ver FROM executions WHERE id = :i::text FOR UPDATE \gset
UPDATE executions SET version = version + 1, data = '{"v":' || (:ver + 1) || '}' WHERE id = :i::text AND version = :ver;
END;
`, 1000000+n),
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var updates, execUpdates int
	for _, via := range []string{"pgbouncer", "direct"} {
		var opts []envOpt
		if via == "direct" {
			opts = append(opts, direct())
		}
		e := startProxy(t, opts...)
		for _, mode := range []string{"simple", "extended", "prepared"} {
			t.Run(via+"/"+mode, func(t *testing.T) {
				pgbenchRun(t, pgbench, e.dsn, dir, "select.sql", mode, 4, 100)
				pgbenchRun(t, pgbench, e.dsn, dir, "exec_select.sql", mode, 4, 50)
				updates += pgbenchRun(t, pgbench, e.dsn, dir, "update.sql", mode, 4, 50)
				execUpdates += pgbenchRun(t, pgbench, e.dsn, dir, "exec_update.sql", mode, 4, 50)
			})
		}
	}
	// Every UPDATE updated exactly one row: the versions add up. (A fresh
	// bound: the six runs above can take minutes on a loaded machine.)
	ctx = ctxT(t, 2*time.Minute)
	var sumVersions, sumBalance, sumExec int64
	for i := range d.m.Shards {
		conn := d.shardConn(t, i)
		var v, b, ev int64
		if err := conn.QueryRow(ctx, "SELECT coalesce(sum(version - 1), 0), coalesce(sum(abalance), 0) FROM accounts WHERE aid BETWEEN 1 AND $1", n).Scan(&v, &b); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, "SELECT coalesce(sum(version - 1), 0) FROM executions WHERE definition_id = 'pgbench' AND data = '{\"v\":' || version || '}'").Scan(&ev); err != nil {
			t.Fatal(err)
		}
		sumVersions, sumBalance, sumExec = sumVersions+v, sumBalance+b, sumExec+ev
	}
	if sumVersions != int64(updates) || sumBalance != int64(updates) {
		t.Errorf("accounts: %d transactions ran the UPDATE but versions went up by %d and balances by %d", updates, sumVersions, sumBalance)
	}
	if sumExec != int64(execUpdates) {
		t.Errorf("executions: %d transactions ran the UPDATE but versions went up by %d", execUpdates, sumExec)
	}
}

// TestPsycopg runs psycopg 3 (Debian's, for /usr/bin/python3) with default
// settings: auto-prepare after 5 executions of a query, inside and outside
// transactions, binary and text, executemany, a cross-shard refusal.
func TestPsycopg(t *testing.T) {
	pythonClient(t, "psycopg", "python3-psycopg", psycopgScript, 3_000_000, 3_500_000)
}

// pythonClient runs script (its four %d: three keys of shard 0, one of
// shard 1; its argument: the proxy's DSN) with Debian's /usr/bin/python3,
// which must import module (from package pkg), through PgBouncer (keys
// from base) and directly (from baseDirect); it must print OK last.
func pythonClient(t *testing.T, module, pkg, script string, base, baseDirect int64) {
	py := needBinary(t, "python3", "/usr/bin/python3")
	if out, err := run(t, time.Minute, "", py, "-c", "import "+module); err != nil {
		clustertest.SkipOrFail(t, fmt.Errorf("%s is not installed: %s", pkg, out))
	}
	for _, via := range []string{"pgbouncer", "direct"} {
		t.Run(via, func(t *testing.T) {
			var opts []envOpt
			from := base
			if via == "direct" {
				opts, from = append(opts, direct()), baseDirect
			}
			e := startProxy(t, opts...)
			k0 := e.db.keysOn(0, 3, from)
			k1 := e.db.keysOn(1, 1, from)
			dir := t.TempDir()
			src := fmt.Sprintf(script, k0[0], k0[1], k0[2], k1[0])
			if err := os.WriteFile(filepath.Join(dir, "t.py"), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := run(t, 2*time.Minute, dir, py, "t.py", e.dsn)
			if err != nil || !strings.HasSuffix(strings.TrimSpace(out), "OK") {
				t.Fatalf("%s: %v\n%s", module, err, out)
			}
			t.Log(strings.TrimSpace(out))
		})
	}
}

const psycopgScript = `
import sys
import psycopg
from psycopg import errors

dsn = sys.argv[1]
k0, k1, k2, other = %d, %d, %d, %d

with psycopg.connect(dsn) as conn:   # default settings: not autocommit, prepare_threshold=5
    assert conn.prepare_threshold == 5
    conn.execute("INSERT INTO accounts (aid, abalance, note) VALUES (%%s, 0, 'py'), (%%s, 0, 'py'), (%%s, 0, 'py')", (k0, k1, k2)) if False else None
    for k in (k0, k1, k2):
        conn.execute("INSERT INTO accounts (aid, abalance, note) VALUES (%%s, 0, 'py')", (k,))
        conn.commit()
    conn.execute("INSERT INTO accounts (aid, abalance, note) VALUES (%%s, 0, 'py')", (other,))
    conn.commit()
    # Inside transactions: 12 executions of the same queries (auto-prepared from the 6th on).
    for i in range(12):
        for k in (k0, k1, k2):
            cur = conn.execute("UPDATE accounts SET abalance = abalance + 1 WHERE aid = %%s", (k,))
            assert cur.rowcount == 1, cur.rowcount
            (bal,) = conn.execute("SELECT abalance FROM accounts WHERE aid = %%s", (k,)).fetchone()
            assert bal == i + 1, (k, bal, i)
        conn.commit()
    # Rollback really rolls back.
    conn.execute("UPDATE accounts SET abalance = -1 WHERE aid = %%s", (k0,))
    conn.rollback()
    (bal,) = conn.execute("SELECT abalance FROM accounts WHERE aid = %%s", (k0,)).fetchone()
    assert bal == 12, bal
    conn.commit()
    # Cross-shard inside a transaction: 0A000, and the transaction must roll back.
    conn.execute("UPDATE accounts SET note = 'x' WHERE aid = %%s", (k0,))
    try:
        conn.execute("UPDATE accounts SET note = 'x' WHERE aid = %%s", (other,))
        raise SystemExit("cross-shard statement was not refused")
    except errors.FeatureNotSupported as e:
        assert "shard" in str(e), str(e)
    conn.rollback()
    (note,) = conn.execute("SELECT note FROM accounts WHERE aid = %%s", (k0,)).fetchone()
    assert note == "py", note
    conn.commit()

with psycopg.connect(dsn, autocommit=True) as conn:
    # Outside transactions, text and binary, 12 times each.
    for i in range(12):
        for k in (k0, k1, k2, other):
            (aid, note) = conn.execute("SELECT aid, note FROM accounts WHERE aid = %%s", (k,)).fetchone()
            assert aid == k and note == "py", (aid, note)
            cur = conn.cursor(binary=True)
            (aid2, bal2) = cur.execute("SELECT aid, abalance FROM accounts WHERE aid = %%s", (k,)).fetchone()
            assert aid2 == k, aid2
    # executemany pipelines its statements up to one Sync: one implicit
    # transaction, so one shard.
    with conn.cursor() as cur:
        cur.executemany("UPDATE accounts SET note = %%s WHERE aid = %%s", [("many", k) for k in (k0, k1, k2)])
    notes = [conn.execute("SELECT note FROM accounts WHERE aid = %%s", (k,)).fetchone()[0] for k in (k0, k1, k2, other)]
    assert notes == ["many"] * 3 + ["py"], notes
    try:
        with conn.cursor() as cur:
            cur.executemany("UPDATE accounts SET note = %%s WHERE aid = %%s", [("across", k) for k in (k0, other)])
        raise SystemExit("a pipeline across shards was not refused")
    except errors.FeatureNotSupported as e:
        assert "Sync" in str(e.diag.message_hint), e.diag.message_hint
    notes = [conn.execute("SELECT note FROM accounts WHERE aid = %%s", (k,)).fetchone()[0] for k in (k0, other)]
    assert notes == ["many", "py"], notes
    # An explicit prepare and a transaction block.
    conn.execute("SELECT abalance FROM accounts WHERE aid = %%s", (k0,), prepare=True)
    with conn.transaction():
        conn.execute("UPDATE accounts SET abalance = abalance + 100 WHERE aid = %%s", (k1,))
        conn.execute("UPDATE accounts SET abalance = abalance + 100 WHERE aid = %%s", (k2,))
    (s,) = conn.execute("SELECT sum(abalance) FROM accounts WHERE aid IN (%%s, %%s)", (k1, k2)).fetchone()
    assert s == 224, s
print("OK")
`

// TestAsyncpg runs asyncpg (Debian's python3-asyncpg, for
// /usr/bin/python3) with its defaults — a statement cache of named
// prepared statements, binary results, type introspection — and the
// patterns it is known for: cursors inside a transaction (the portal
// bound in a pipeline of its own, then fetched in later ones; it used to
// hang: the Sync after the refused Bind got no ReadyForQuery), a pool
// whose reset on release ("SELECT pg_advisory_unlock_all(); CLOSE ALL;
// UNLISTEN *; RESET ALL") must not pin the connection, executemany on one
// shard and its refusal across shards, COPY out of every shard (merged
// too: ORDER BY).
func TestAsyncpg(t *testing.T) {
	pythonClient(t, "asyncpg", "python3-asyncpg", asyncpgScript, 3_700_000, 3_800_000)
}

const asyncpgScript = `
import asyncio, io, sys
import asyncpg

dsn = sys.argv[1]
k0, k1, k2, other = %d, %d, %d, %d
mine = [k0, k1, k2, other]

async def main():
    conn = await asyncpg.connect(dsn)
    for k in mine:
        await conn.execute("INSERT INTO accounts (aid, abalance, note) VALUES ($1, 0, 'apg')", k)
    # The statement cache: the same query 10 times is one named statement.
    for i in range(10):
        for k in mine:
            row = await conn.fetchrow("SELECT aid, abalance, note FROM accounts WHERE aid = $1", k)
            assert row["aid"] == k and row["note"] == "apg", row
    rows = await conn.fetch("SELECT aid FROM accounts WHERE aid = ANY($1::int8[]) ORDER BY aid DESC", mine)
    assert [r["aid"] for r in rows] == sorted(mine, reverse=True), rows
    st = await conn.prepare("SELECT aid, note FROM accounts WHERE aid = ANY($1::int8[]) ORDER BY aid")
    assert [a.name for a in st.get_attributes()] == ["aid", "note"], st.get_attributes()
    assert len(await st.fetch(mine)) == 4
    # Cursors (a transaction, a portal bound apart, fetched in parts).
    async with conn.transaction():
        got = [r["aid"] async for r in conn.cursor("SELECT aid FROM accounts WHERE aid = ANY($1::int8[]) ORDER BY aid", mine, prefetch=2)]
        assert got == sorted(mine), got
        cur = await conn.cursor("SELECT aid FROM accounts WHERE aid = ANY($1::int8[]) ORDER BY aid", mine)
        first = await cur.fetch(3)
        last = await cur.fetchrow()
        assert [r["aid"] for r in first] + [last["aid"]] == sorted(mine), (first, last)
        assert await cur.fetchrow() is None
    # A transaction block on one shard, rolled back.
    try:
        async with conn.transaction():
            await conn.execute("UPDATE accounts SET abalance = -1 WHERE aid = $1", k0)
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    assert await conn.fetchval("SELECT abalance FROM accounts WHERE aid = $1", k0) == 0
    # executemany: one implicit transaction, so one shard.
    await conn.executemany("UPDATE accounts SET note = $1 WHERE aid = $2", [("many", k) for k in (k0, k1, k2)])
    try:
        await conn.executemany("UPDATE accounts SET note = $1 WHERE aid = $2", [("across", k) for k in (k0, other)])
        raise SystemExit("executemany across shards was not refused")
    except asyncpg.exceptions.FeatureNotSupportedError as e:
        assert "Sync" in (e.hint or ""), e.hint
    notes = [await conn.fetchval("SELECT note FROM accounts WHERE aid = $1", k) for k in mine]
    assert notes == ["many"] * 3 + ["apg"], notes
    # COPY out of every shard.
    buf = io.BytesIO()
    await conn.copy_from_query("SELECT aid FROM accounts WHERE aid = ANY($1::int8[])", mine, output=buf)
    assert sorted(int(x) for x in buf.getvalue().split()) == sorted(mine), buf.getvalue()
    # COPY of a merged read (ORDER BY): in its order, with its header.
    buf = io.BytesIO()
    await conn.copy_from_query("SELECT aid, note FROM accounts WHERE aid = ANY($1::int8[]) ORDER BY aid DESC", mine, output=buf, format="csv", header=True)
    lines = buf.getvalue().decode().splitlines()
    assert lines[0] == "aid,note" and [int(l.split(",")[0]) for l in lines[1:]] == sorted(mine, reverse=True), lines
    # Type introspection (an array of a type it has not seen yet).
    assert await conn.fetchval("SELECT $1::numeric[]", [1, 2]) == [1, 2]
    await conn.close()

    # A pool: each release resets the connection; the next acquire must
    # still reach every shard.
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    async def one(k):
        async with pool.acquire() as c:
            await c.execute("SET work_mem = '5MB'")
            return await c.fetchval("SELECT aid FROM accounts WHERE aid = $1", k)
    for _ in range(3):
        assert await asyncio.gather(*[one(k) for k in mine]) == mine
    async with pool.acquire() as c:
        assert await c.fetchval("SHOW work_mem") != "5MB", "RESET ALL of the pool's reset did not hold"
    await pool.close()

asyncio.run(main())
print("OK")
`
