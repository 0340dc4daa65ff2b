package proxy_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/proxy"
)

// adminEnv starts a proxy with the admin console on for "postgres" (trust)
// and a non-admin user "app" (password "app-secret").
func adminEnv(t *testing.T, opts ...envOpt) *proxyEnv {
	t.Helper()
	all := append([]envOpt{func(c *proxy.Config) {
		c.AdminUsers = []string{"postgres"}
		c.Users = append(c.Users, proxy.User{Name: "app", Password: "app-secret"})
	}}, opts...)
	return startProxy(t, all...)
}

// adminDSN is the console's DSN for user.
func (e *proxyEnv) adminDSN(user string) string {
	return fmt.Sprintf("postgres://%s@%s/pgshard?sslmode=disable", user, e.addr)
}

// psqlTable runs one command with psql and returns the header and rows
// (unaligned, tab-separated).
func psqlTable(t *testing.T, dsn, cmd string) ([]string, [][]string) {
	t.Helper()
	psql := needBinary(t, "psql", "/usr/bin/psql")
	out, err := run(t, time.Minute, "", psql, "-X", "-A", "-F", "\t", "-P", "footer=off", "-v", "ON_ERROR_STOP=1", dsn, "-c", cmd)
	if err != nil {
		t.Fatalf("psql -c %q: %v\n%s", cmd, err, out)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || lines[0] == "" {
		return nil, nil
	}
	var rows [][]string
	for _, l := range lines[1:] {
		rows = append(rows, strings.Split(l, "\t"))
	}
	return strings.Split(lines[0], "\t"), rows
}

// col returns the value of column name in row.
func col(t *testing.T, cols []string, row []string, name string) string {
	t.Helper()
	i := slices.Index(cols, name)
	if i < 0 || i >= len(row) {
		t.Fatalf("no column %q in %v", name, cols)
	}
	return row[i]
}

func colInt(t *testing.T, cols []string, row []string, name string) int64 {
	t.Helper()
	v := col(t, cols, row, name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("column %s = %q: not an integer", name, v)
	}
	return n
}

// rowFor returns the row whose first column is key.
func rowFor(t *testing.T, rows [][]string, key string) []string {
	t.Helper()
	for _, r := range rows {
		if len(r) > 0 && r[0] == key {
			return r
		}
	}
	t.Fatalf("no row for %q in %v", key, rows)
	return nil
}

// TestAdminConsoleShow: psql on the console gets PgBouncer's column names
// and figures that follow the traffic: transactions, statements, bytes,
// routing decisions by kind, clients and servers.
func TestAdminConsoleShow(t *testing.T) {
	e := adminEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	conn := e.connect(t, func(c *pgx.ConnConfig) { c.RuntimeParams["application_name"] = "admin-test-client" })
	k0 := e.db.keysOn(0, 3, 30_000_000)
	k1 := e.db.keysOn(1, 1, 30_000_000)[0]
	for _, k := range k0 {
		if _, err := conn.Exec(ctx, "SELECT abalance FROM accounts WHERE aid = $1", k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, "SELECT count(*) FROM accounts"); err != nil { // a fan-out
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "/* pgshard:shard=shard1 */ SELECT 1"); err != nil { // hinted
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = tx.Exec(ctx, "UPDATE accounts SET note = 'x' WHERE aid = $1", k0[0])
	_, err = tx.Exec(ctx, "UPDATE accounts SET note = 'x' WHERE aid = $1", k1) // refused: another shard
	if pgCode(err) != "0A000" {
		t.Fatalf("cross-shard write: %v", err)
	}
	_ = tx.Rollback(ctx)
	dsn := e.adminDSN("postgres")

	cols, rows := psqlTable(t, dsn, "SHOW POOLS")
	want := []string{"database", "user", "cl_active", "cl_waiting", "cl_active_cancel_req", "cl_waiting_cancel_req",
		"sv_active", "sv_active_cancel", "sv_being_canceled", "sv_idle", "sv_used", "sv_tested", "sv_login", "maxwait", "maxwait_us", "pool_mode"}
	if !slices.Equal(cols[:len(want)], want) {
		t.Fatalf("SHOW POOLS columns %v, want PgBouncer's %v first", cols, want)
	}
	if len(rows) != len(e.db.m.Shards) {
		t.Fatalf("SHOW POOLS: %d rows, want one per shard (%d)", len(rows), len(e.db.m.Shards))
	}
	r0 := rowFor(t, rows, "shard0")
	if colInt(t, cols, r0, "sv_idle") < 1 || colInt(t, cols, r0, "cl_active") != 0 || col(t, cols, r0, "pool_mode") != "transaction" {
		t.Errorf("SHOW POOLS shard0 = %v", r0)
	}

	cols, rows = psqlTable(t, dsn, "SHOW STATS")
	want = []string{"database", "total_xact_count", "total_query_count", "total_received", "total_sent", "total_xact_time",
		"total_query_time", "total_wait_time", "avg_xact_count", "avg_query_count", "avg_recv", "avg_sent", "avg_xact_time", "avg_query_time", "avg_wait_time"}
	if !slices.Equal(cols[:len(want)], want) {
		t.Fatalf("SHOW STATS columns %v, want PgBouncer's %v first", cols, want)
	}
	r0 = rowFor(t, rows, "shard0")
	if n := colInt(t, cols, r0, "total_xact_count"); n < int64(len(k0)) {
		t.Errorf("shard0 total_xact_count %d < %d transactions run", n, len(k0))
	}
	if colInt(t, cols, r0, "total_query_count") < int64(len(k0)) || colInt(t, cols, r0, "total_received") == 0 ||
		colInt(t, cols, r0, "total_sent") == 0 || colInt(t, cols, r0, "total_xact_time") == 0 || colInt(t, cols, r0, "p99_xact_time") == 0 {
		t.Errorf("SHOW STATS shard0 = %v", r0)
	}

	cols, rows = psqlTable(t, dsn, "SHOW SHARDS")
	r0 = rowFor(t, rows, "shard0")
	if col(t, cols, r0, "state") != "up" || colInt(t, cols, r0, "keyed") < int64(len(k0)) || colInt(t, cols, r0, "fanout") < 1 {
		t.Errorf("SHOW SHARDS shard0 = %v", r0)
	}
	r1 := rowFor(t, rows, "shard1")
	if colInt(t, cols, r1, "hinted") < 1 || colInt(t, cols, r1, "refused") < 1 {
		t.Errorf("SHOW SHARDS shard1: want a hinted and a refused decision: %v", r1)
	}
	if col(t, cols, r0, "via") != "pgbouncer" || !strings.Contains(col(t, cols, r0, "dsn"), "postgres://") {
		t.Errorf("SHOW SHARDS shard0 via/dsn: %v", r0)
	}

	_, rows = psqlTable(t, dsn, "SHOW ROUTES")
	kinds := map[string]bool{}
	for _, r := range rows {
		kinds[r[1]] = true
	}
	for _, k := range []string{"fanout", "hinted", "refused"} {
		if !kinds[k] {
			t.Errorf("SHOW ROUTES has no %s decision: %v", k, rows)
		}
	}

	cols, rows = psqlTable(t, dsn, "SHOW CLIENTS")
	found := false
	for _, r := range rows {
		if col(t, cols, r, "application_name") == "admin-test-client" {
			found = col(t, cols, r, "type") == "C" && col(t, cols, r, "state") == "idle" && col(t, cols, r, "user") == "postgres"
		}
	}
	if !found {
		t.Errorf("SHOW CLIENTS lacks the test client (idle): %v", rows)
	}
	cols, rows = psqlTable(t, dsn, "SHOW SERVERS")
	if len(rows) == 0 || col(t, cols, rows[0], "type") != "S" || colInt(t, cols, rows[0], "remote_pid") == 0 {
		t.Errorf("SHOW SERVERS: %v", rows)
	}
	cols, rows = psqlTable(t, dsn, "SHOW DATABASES")
	if !slices.Equal(cols[:4], []string{"name", "host", "port", "database"}) || len(rows) != len(e.db.m.Shards) {
		t.Errorf("SHOW DATABASES: %v %v", cols, rows)
	}
	_, rows = psqlTable(t, dsn, "SHOW LISTS")
	if r := rowFor(t, rows, "databases"); r[1] != strconv.Itoa(len(e.db.m.Shards)) {
		t.Errorf("SHOW LISTS databases = %v", r)
	}
	if r := rowFor(t, rows, "used_clients"); r[1] == "0" {
		t.Errorf("SHOW LISTS used_clients = %v", r)
	}
	_, rows = psqlTable(t, dsn, "SHOW MAP")
	total := 0
	for _, r := range rows {
		n, _ := strconv.Atoi(r[4])
		total += n
	}
	if total != e.db.m.Buckets {
		t.Errorf("SHOW MAP covers %d buckets, want %d: %v", total, e.db.m.Buckets, rows)
	}
	_, rows = psqlTable(t, dsn, "SHOW VERSION")
	if len(rows) != 1 || !strings.HasPrefix(rows[0][0], "pgshard ") {
		t.Errorf("SHOW VERSION: %v", rows)
	}
	_, rows = psqlTable(t, dsn, "SHOW HELP")
	if len(rows) < 20 {
		t.Errorf("SHOW HELP lists %d commands", len(rows))
	}
	_, rows = psqlTable(t, dsn, "SHOW CONFIG")
	if r := rowFor(t, rows, "admin_users"); r[1] != "postgres" {
		t.Errorf("SHOW CONFIG admin_users = %v", r)
	}
	_, rows = psqlTable(t, dsn, "SHOW USERS")
	if r := rowFor(t, rows, "app"); !strings.HasPrefix(r[1], "scram-sha-256") || r[2] != "no" {
		t.Errorf("SHOW USERS app = %v", r)
	}
	// Several commands in one query string: one result set each.
	psql := needBinary(t, "psql", "/usr/bin/psql")
	out, err := run(t, time.Minute, "", psql, "-X", "-A", dsn, "-c", "SHOW VERSION; SHOW LISTS")
	if err != nil || !strings.Contains(out, "version") || !strings.Contains(out, "free_clients") {
		t.Errorf("two commands: %v\n%s", err, out)
	}
}

// TestAdminConsoleRefusals: a non-admin user gets 42501 and nothing else;
// an unknown command and the extended protocol get errors; the console
// works with the simple protocol from pgx.
func TestAdminConsoleRefusals(t *testing.T) {
	e := adminEnv(t)
	ctx := ctxT(t, time.Minute)
	_, err := pgx.Connect(ctx, fmt.Sprintf("postgres://app:app-secret@%s/pgshard?sslmode=disable", e.addr))
	if pgCode(err) != "42501" {
		t.Fatalf("non-admin on the console: %v, want 42501", err)
	}
	_, err = pgx.Connect(ctx, fmt.Sprintf("postgres://app:wrong@%s/pgshard?sslmode=disable", e.addr))
	if pgCode(err) != "28P01" {
		t.Fatalf("wrong password on the console: %v, want 28P01 (authentication first)", err)
	}
	psql := needBinary(t, "psql", "/usr/bin/psql")
	out, err := run(t, time.Minute, "", psql, "-X", fmt.Sprintf("postgres://app:app-secret@%s/pgshard?sslmode=disable", e.addr), "-c", "SHOW POOLS")
	if err == nil || !strings.Contains(out, "permission denied") || strings.Contains(out, "shard0") {
		t.Fatalf("psql as a non-admin: %v\n%s", err, out)
	}
	// The same user reaches the data as usual.
	app, err := pgx.Connect(ctx, fmt.Sprintf("postgres://app:app-secret@%s/%s?sslmode=disable", e.addr, e.db.name))
	if err != nil {
		t.Fatal(err)
	}
	app.Close(ctx)

	cfg, err := pgx.ParseConfig(e.adminDSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SHOW LISTS").Scan(new(string), &n); err != nil {
		t.Fatalf("SHOW LISTS with pgx: %v", err)
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); pgCode(err) != "08P01" || !strings.Contains(err.Error(), "SHOW HELP") {
		t.Fatalf("SELECT on the console: %v", err)
	}
	if _, err := conn.Exec(ctx, "SHOW NOTHING"); pgCode(err) != "08P01" {
		t.Fatalf("SHOW NOTHING: %v", err)
	}
	if _, err := conn.Exec(ctx, "PAUSE noshard"); pgCode(err) != "22023" {
		t.Fatalf("PAUSE of an unknown shard: %v", err)
	}
	if _, err := conn.PgConn().ExecParams(ctx, "SHOW POOLS", nil, nil, nil, nil).Close(); pgCode(err) != "08P01" || !strings.Contains(err.Error(), "simple query protocol") {
		t.Fatalf("extended protocol on the console: %v", err)
	}
	if err := conn.Ping(ctx); err != nil {
		t.Fatalf("the console after an extended-protocol error: %v", err)
	}
	if _, err := conn.Exec(ctx, "RELOAD"); err == nil || !strings.Contains(err.Error(), "no configuration source") {
		t.Fatalf("RELOAD without a source: %v", err)
	}
}

// TestAdminConsolePauseResume: PAUSE shard waits for the shard's running
// transaction, then holds new ones while other shards work; RESUME lets
// them go on. DISABLE refuses new logins, ENABLE admits them again.
func TestAdminConsolePauseResume(t *testing.T) {
	e := adminEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	k0 := e.db.keysOn(0, 1, 31_000_000)[0]
	k1 := e.db.keysOn(1, 1, 31_000_000)[0]
	a := e.connect(t)
	b := e.connect(t)
	admin := e.connectAdmin(t)

	tx, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO accounts (aid) VALUES ($1) ON CONFLICT DO NOTHING", k0); err != nil {
		t.Fatal(err)
	}
	paused := make(chan error, 1)
	go func() { _, err := admin.Exec(ctx, "PAUSE shard0"); paused <- err }()
	select {
	case err := <-paused:
		t.Fatalf("PAUSE returned while a transaction runs on shard0: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-paused; err != nil {
		t.Fatalf("PAUSE: %v", err)
	}
	// Held: a transaction for shard0 waits; shard1 works.
	held := make(chan error, 1)
	go func() {
		var n int
		held <- b.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k0).Scan(&n)
	}()
	c := e.connect(t)
	if _, err := c.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k1); err != nil {
		t.Fatalf("shard1 while shard0 is paused: %v", err)
	}
	select {
	case err := <-held:
		t.Fatalf("a shard0 transaction ran while paused: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	var waiting int
	if err := admin.QueryRow(ctx, "SHOW POOLS").Scan(nil, nil, nil, &waiting, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil); err != nil {
		// rows for shard0 come first
		t.Fatalf("SHOW POOLS: %v", err)
	}
	if waiting != 1 {
		t.Errorf("SHOW POOLS shard0 cl_waiting = %d while one transaction is held", waiting)
	}
	if _, err := admin.Exec(ctx, "RESUME shard0"); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatalf("held transaction after RESUME: %v", err)
	}

	if _, err := admin.Exec(ctx, "DISABLE"); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, e.dsn); pgCode(err) != "57P03" {
		t.Fatalf("login while disabled: %v, want 57P03", err)
	}
	if _, err := admin.Exec(ctx, "ENABLE"); err != nil {
		t.Fatal(err)
	}
	e.connect(t)
}

// TestAdminConsoleKillReconnect: KILL shard closes the sessions in a
// transaction there and its connections; RECONNECT and WAIT_CLOSE replace
// the idle connections.
func TestAdminConsoleKillReconnect(t *testing.T) {
	e := adminEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	k1 := e.db.keysOn(1, 1, 32_000_000)[0]
	k0 := e.db.keysOn(0, 1, 32_000_000)[0]
	victim := e.connect(t)
	other := e.connect(t)
	admin := e.connectAdmin(t)
	tx, err := victim.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k1); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k0); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "KILL shard1"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatalf("the session in a shard1 transaction survived KILL shard1")
	}
	if _, err := other.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k0); err != nil {
		t.Fatalf("a session not on shard1 after KILL shard1: %v", err)
	}
	var before []uint32
	rows, err := admin.Query(ctx, "SHOW SERVERS")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		if v[18] == "shard0" {
			before = append(before, uint32(v[15].(int64)))
		}
	}
	if len(before) == 0 {
		t.Fatal("no shard0 server connection listed")
	}
	if _, err := admin.Exec(ctx, "RECONNECT shard0"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "WAIT_CLOSE shard0"); err != nil {
		t.Fatal(err)
	}
	rows, err = admin.Query(ctx, "SHOW SERVERS")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		if v[18] == "shard0" && slices.Contains(before, uint32(v[15].(int64))) {
			t.Errorf("shard0 connection to backend pid %v survived RECONNECT + WAIT_CLOSE", v[15])
		}
	}
	if _, err := other.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k0); err != nil {
		t.Fatalf("after RECONNECT: %v", err)
	}
}

// connectAdmin opens a simple-protocol pgx connection to the console.
func (e *proxyEnv) connectAdmin(t *testing.T) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(e.adminDSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

var (
	_ = net.Dial
	_ sync.Mutex
)
