package proxy

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/admin"
	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/engine"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

var updateConsoleGolden = flag.Bool("update-console-golden", false, "rewrite internal/admin/testdata/console.golden from the console's answers")

// consoleGolden is the admin console's exact output, kept by the console's
// package (proxy/internal/admin) and compared here through the session
// entry point, so a change of any byte of any command's answer fails.
const consoleGolden = "internal/admin/testdata/console.golden"

// consoleGoldenQueries are the console queries the golden file answers,
// in order (the state commands change is seen by the SHOWs after them).
var consoleGoldenQueries = []string{
	"SHOW HELP", "show version", "SHOW CONFIG", "SHOW SHARDS", "SHOW MAP", "SHOW POOLS", "SHOW STATS",
	"SHOW CLIENTS", "SHOW SERVERS", "SHOW DATABASES", "SHOW LISTS", "SHOW USERS", "SHOW ROUTES",
	"SHOW", "SHOW nope", "SHOW POOLS STATS", "frobnicate now", "", "-- ping", "/* c */ ;;",
	"SHOW VERSION; SHOW LISTS", "SHOW VERSION; bogus; SHOW LISTS",
	"RELOAD x", "RELOAD", "PAUSE a b", "PAUSE nosuch", "RESUME nosuch", "KILL nosuch", "WAIT_CLOSE nosuch",
	"DISABLE x", "ENABLE now", "SHUTDOWN x",
	"DISABLE", "SHOW DATABASES", "ENABLE", "SHOW DATABASES",
	"PAUSE shard1", "SHOW DATABASES", "SHOW SHARDS", "RESUME shard1", "SHOW POOLS",
	"RECONNECT shard0", "RECONNECT", "KILL shard0", "WAIT_CLOSE shard0", "WAIT_CLOSE",
}

// goldenServer is a server in a fixed state: two shards, one down, counters and PgBouncer readings set, one client, one route.
func goldenServer(t *testing.T) (*Server, *engine.Session) {
	t.Helper()
	shards := []shardmap.Shard{
		{Name: "shard0", Ordinal: 0, DSN: "postgres://app:pw0@db0.example:5432/db?sslmode=disable"},
		{Name: "shard1", Ordinal: 1, DSN: "postgres://app:pw1@db1.example:5433/db?sslmode=disable", PoolerDSN: "postgres://app:pw1@bouncer1.example:6432/db"},
	}
	m, err := shardmap.Even(16, shards)
	if err != nil {
		t.Fatal(err)
	}
	an, err := route.New(m, route.DefaultSchema(), route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Map: m, Analyzer: an, UsePooler: true, Listen: "127.0.0.1:6543",
		Users: []User{{Name: "postgres", Trust: true}, {Name: "app", Password: "app-secret"},
			{Name: "ops", Password: "SCRAM-SHA-256$4096:c2FsdA==$AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}},
		AdminUsers:   []string{"postgres", "ops"},
		DefaultShard: "shard0",
		Logger:       slog.New(slog.NewTextHandler(testWriterInternal{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	cfg.PgBouncer.AdminUser = "pgbouncer"
	cfg.PgBouncer.AdminPassword = "bouncer-secret"
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	p0, p1 := srv.current().pools[0], srv.current().pools[1]
	p0.Down.Store(pgwire.NewError(pgwire.CodeConnectionFailure, "shard0 is down (golden)"))
	p1.Verified.Store(true)
	p0.Stats.Xacts.Add(12)
	p0.Stats.XactNanos.Add(36_000_000)
	p0.Stats.Queries.Add(30)
	p0.Stats.BytesIn.Add(4096)
	p0.Stats.BytesOut.Add(8192)
	p0.Stats.WaitNanos.Add(5_000)
	p0.Stats.Routes[backend.RouteKeyed].Add(7)
	p1.Stats.Routes[backend.RouteFanout].Add(3)
	p1.Stats.Routes[backend.RouteRefused].Add(1)
	p0.Ops.Bouncer.Store(&backend.BouncerFigures{At: at, Err: "connection refused"})
	p1.Ops.Bouncer.Store(&backend.BouncerFigures{At: at, ClActive: 2, ClWaiting: 1, SvActive: 2, SvIdle: 3, MaxWait: 1500 * time.Microsecond})
	srv.routes.ring[0] = routeEntry{at: at, kind: backend.RouteFanout, sql: "select count(*) from t", reason: "no key"}
	srv.routes.ring[1] = routeEntry{at: at.Add(time.Second), kind: backend.RouteKeyed, shard: "shard1", sql: "select * from t where id = $1", reason: "key"}
	srv.routes.next, srv.routes.size = 2, 2

	client, other := net.Pipe()
	t.Cleanup(func() { client.Close(); other.Close() })
	srv.clients.Attach(srv.current().env(), srv.henv, client, engine.Identity{PID: 0x1234, User: "app", DB: "db", App: "psql", Connected: at})
	adm := srv.clients.Attach(srv.current().env(), srv.henv, other, engine.Identity{PID: 0x99, User: "postgres", DB: "pgshard", App: "psql", Admin: true, Connected: at.Add(time.Minute)})
	return srv, adm
}

// testWriterInternal sends a log to t.Log.
type testWriterInternal struct{ t *testing.T }

func (w testWriterInternal) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// describeMessages renders backend messages one a line: type and payload,
// quoted (lossless: the bytes can be read back from it).
func describeMessages(t *testing.T, b []byte) string {
	t.Helper()
	var sb strings.Builder
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("truncated message: %q", b)
		}
		n := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4])
		if n < 4 || 1+n > len(b) {
			t.Fatalf("bad message length %d: %q", n, b)
		}
		fmt.Fprintf(&sb, "%c %q\n", b[0], b[5:1+n])
		b = b[1+n:]
	}
	return sb.String()
}

// TestAdminConsoleGolden: every console command's answer (result sets,
// tags, notices, errors), byte for byte, in a fixed server state.
func TestAdminConsoleGolden(t *testing.T) {
	old := BuildVersion
	BuildVersion = "v0.0.0-golden"
	defer func() { BuildVersion = old }()
	srv, sess := goldenServer(t)
	defer srv.life.disabled.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sb strings.Builder
	for _, q := range consoleGoldenQueries {
		fmt.Fprintf(&sb, "== %q\n%s", q, describeMessages(t, sess.ConsoleQuery(ctx, q)))
	}
	got := sb.String()
	if *updateConsoleGolden {
		if err := os.WriteFile(consoleGolden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(consoleGolden)
	if err != nil {
		t.Fatalf("%v (go test -run TestAdminConsoleGolden -update-console-golden ./proxy/ writes it)", err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("console output differs from %s at line %d:\n got: %s\nwant: %s", consoleGolden, i+1, g, w)
			}
		}
	}
}

// consoleHostRecord is the calls the console made to its Host while
// answering consoleGoldenQueries, with what they returned: the console's
// package replays them through a fake Host and must write the same bytes
// (proxy/internal/admin, TestConsoleGolden).
const consoleHostRecord = "internal/admin/testdata/host.json"

// hostCall is one recorded call of an admin.Host method.
type hostCall struct {
	Method string          `json:"method"`
	Args   []string        `json:"args,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Err    string          `json:"err,omitempty"`
}

// recordingHost records every call of an admin.Host.
type recordingHost struct {
	h     admin.Host
	t     *testing.T
	calls []hostCall
}

func (r *recordingHost) add(method string, args []string, res any, err error) {
	c := hostCall{Method: method, Args: args}
	if res != nil {
		b, jerr := json.Marshal(res)
		if jerr != nil {
			r.t.Fatal(jerr)
		}
		c.Result = b
	}
	if err != nil {
		c.Err = err.Error()
	}
	r.calls = append(r.calls, c)
}

func (r *recordingHost) Version() string { v := r.h.Version(); r.add("Version", nil, v, nil); return v }
func (r *recordingHost) Config() []admin.ConfigRow {
	v := r.h.Config()
	r.add("Config", nil, v, nil)
	return v
}
func (r *recordingHost) Pools() admin.Pools { v := r.h.Pools(); r.add("Pools", nil, v, nil); return v }
func (r *recordingHost) Map() admin.Map     { v := r.h.Map(); r.add("Map", nil, v, nil); return v }
func (r *recordingHost) Clients() []admin.Client {
	v := r.h.Clients()
	r.add("Clients", nil, v, nil)
	return v
}
func (r *recordingHost) Servers() []admin.Server {
	v := r.h.Servers()
	r.add("Servers", nil, v, nil)
	return v
}
func (r *recordingHost) Lists() admin.Lists  { v := r.h.Lists(); r.add("Lists", nil, v, nil); return v }
func (r *recordingHost) Users() []admin.User { v := r.h.Users(); r.add("Users", nil, v, nil); return v }
func (r *recordingHost) Routes() []admin.Route {
	v := r.h.Routes()
	r.add("Routes", nil, v, nil)
	return v
}
func (r *recordingHost) ShardNames() []string {
	v := r.h.ShardNames()
	r.add("ShardNames", nil, v, nil)
	return v
}
func (r *recordingHost) Resume(shards []string) {
	r.h.Resume(shards)
	r.add("Resume", shards, nil, nil)
}
func (r *recordingHost) Reconnect(shards []string) {
	r.h.Reconnect(shards)
	r.add("Reconnect", shards, nil, nil)
}
func (r *recordingHost) Kill(shards []string) { r.h.Kill(shards); r.add("Kill", shards, nil, nil) }
func (r *recordingHost) Shutdown()            { r.h.Shutdown(); r.add("Shutdown", nil, nil, nil) }
func (r *recordingHost) DisableLogins(disabled bool) {
	r.h.DisableLogins(disabled)
	r.add("DisableLogins", []string{strconv.FormatBool(disabled)}, nil, nil)
}
func (r *recordingHost) Reload(ctx context.Context) (string, error) {
	v, err := r.h.Reload(ctx)
	r.add("Reload", nil, v, err)
	return v, err
}
func (r *recordingHost) Pause(ctx context.Context, shards []string) error {
	err := r.h.Pause(ctx, shards)
	r.add("Pause", shards, nil, err)
	return err
}
func (r *recordingHost) WaitClose(ctx context.Context, shards []string) error {
	err := r.h.WaitClose(ctx, shards)
	r.add("WaitClose", shards, nil, err)
	return err
}

// TestAdminConsoleHostRecord answers consoleGoldenQueries again on a
// fresh server in the same state, straight through admin.Query, and
// records the Host calls: the bytes must be the golden ones, and the
// record the one the console's package replays.
func TestAdminConsoleHostRecord(t *testing.T) {
	old := BuildVersion
	BuildVersion = "v0.0.0-golden"
	defer func() { BuildVersion = old }()
	srv, _ := goldenServer(t)
	defer srv.life.disabled.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec := &recordingHost{h: &adminHost{by: engine.ConsoleCaller{User: "postgres", Log: srv.log}, c: srv}, t: t}
	var sb strings.Builder
	type query struct {
		Query string     `json:"query"`
		Calls []hostCall `json:"calls"`
	}
	var record []query
	for _, q := range consoleGoldenQueries {
		rec.calls = nil
		out := admin.Query(ctx, rec, q, nil)
		fmt.Fprintf(&sb, "== %q\n%s", q, describeMessages(t, out))
		record = append(record, query{q, rec.calls})
	}
	want, err := os.ReadFile(consoleGolden)
	if err != nil {
		t.Fatal(err)
	}
	if sb.String() != string(want) {
		t.Fatalf("admin.Query over adminHost differs from %s (TestAdminConsoleGolden shows where)", consoleGolden)
	}
	got, err := json.MarshalIndent(record, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *updateConsoleGolden {
		if err := os.WriteFile(consoleHostRecord, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantRec, err := os.ReadFile(consoleHostRecord)
	if err != nil {
		t.Fatalf("%v (go test -run TestAdminConsoleHostRecord ./proxy/ -args -update-console-golden writes it)", err)
	}
	if string(got) != string(wantRec) {
		t.Fatalf("the console's Host calls differ from %s: run with -args -update-console-golden and review the diff", consoleHostRecord)
	}
}
