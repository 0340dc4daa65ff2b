package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/shardmap"
)

// The commands of a shard added online: dev up --catalog --proxy, dev
// add-shard, reshard plan --add-shard, status, apply, status --all; the
// map then gives the new shard its share, the dev proxy (following the
// catalog) serves keys whose range moved from their new shard, and dev up
// reuses the grown cluster with the catalog's map. Bad requests are
// refused with a usage error.
func TestReshardCLI(t *testing.T) {
	if r := run(t, "", "reshard", "plan", "--move", "1-2"); r.code == 0 || !strings.Contains(r.stderr, "--move and --to go together") {
		t.Errorf("plan --move without --to: exit %d %q", r.code, r.stderr)
	}
	if r := run(t, "", "reshard", "plan", "--move", "9-2", "--to", "x"); r.code == 0 || !strings.Contains(r.stderr, "not a bucket range") {
		t.Errorf("plan --move 9-2: exit %d %q", r.code, r.stderr)
	}
	for _, d := range []string{"0", "1.5", "-0.2"} {
		if r := run(t, "", "reshard", "apply", "--duty-cycle", d); r.code == 0 || !strings.Contains(r.stderr, "--duty-cycle must be in (0, 1]") {
			t.Errorf("apply --duty-cycle %s: exit %d %q", d, r.code, r.stderr)
		}
	}
	for _, n := range []string{"0", "-5", "1000001"} {
		if r := run(t, "", "reshard", "apply", "--cleanup-batch", n); r.code == 0 || !strings.Contains(r.stderr, "--cleanup-batch must be in 1..1000000") {
			t.Errorf("apply --cleanup-batch %s: exit %d %q", n, r.code, r.stderr)
		}
	}
	if err := cluster.Local().(cluster.SpecChecker).AvailableFor(context.Background(), cluster.Spec{PgBouncer: true}); err != nil {
		clustertest.SkipOrFail(t, err)
	}
	bin := buildPgshard(t)
	dir := clustertest.Dir(t)
	r := mustRun(t, "", "dev", "up", "--dir", dir, "--shards", "2", "--fsync=false", "--catalog", "--proxy", "--proxy-bin", bin)
	t.Cleanup(func() { run(t, "", "dev", "down", "--dir", dir) })
	if !strings.Contains(r.stdout, "it follows the catalog") {
		t.Errorf("dev up --catalog --proxy: the proxy does not say it follows the catalog:\n%s", r.stdout)
	}
	cfg := filepath.Join(dir, "pgshard.yaml")
	proxy := devProxyConn(t, dir)
	// Keys written through the proxy before the moves, each on its shard.
	keys := map[string]string{} // key → the shard that served it before
	for i := range 40 {
		k := fmt.Sprintf("grow-%02d", i)
		if _, err := proxy.Exec(context.Background(), "INSERT INTO executions VALUES ($1, 'grow', $2, 1)", k, "data of "+k); err != nil {
			t.Fatalf("insert %s through the proxy: %v", k, err)
		}
		keys[k] = servedBy(t, proxy, k, "")
	}
	mustRun(t, "", "dev", "add-shard", "--dir", dir)

	r = mustRun(t, "", "reshard", "plan", "-c", cfg, "--add-shard", "shard2")
	if !strings.Contains(r.stdout, "planned 2 moves") || !strings.Contains(r.stdout, "shard2") {
		t.Errorf("reshard plan --add-shard shard2:\n%s", r.stdout)
	}
	if r := run(t, "", "reshard", "plan", "-c", cfg, "--remove-shard", "shard0"); r.code == 0 || !strings.Contains(r.stderr, "not finished") {
		t.Errorf("a second plan while the first is unfinished: exit %d %q", r.code, r.stderr)
	}
	r = mustRun(t, "", "reshard", "status", "-c", cfg)
	if strings.Count(r.stdout, " planned ") != 2 {
		t.Errorf("reshard status:\n%s", r.stdout)
	}
	r = mustRun(t, "", "map", "show", "-c", cfg)
	if !strings.Contains(r.stdout, "2 moves unfinished") || strings.Count(r.stdout, "→ shard2: planned") != 2 {
		t.Errorf("map show while moves are planned:\n%s", r.stdout)
	}
	// Load through PgBouncer by a router that follows the catalog (the
	// config names it) while the moves run: no operation may fail.
	load := make(chan result, 1)
	loadOut := t.TempDir()
	go func() {
		load <- runWithin(t, 3*time.Minute, "", "loadgen", "run", "-c", cfg, "--target", "pgbouncer", "--duration", "40s",
			"--warmup", "0s", "--concurrency", "4", "--executions", "400", "--out", loadOut, "--fail-if", "errors>0")
	}()
	r = mustRun(t, "", "reshard", "apply", "-c", cfg, "--freeze-budget", "2s", "--max-parallel", "2", "--duty-cycle", "0.5")
	if strings.Count(r.stdout, "flipped at epoch") != 2 || strings.Count(r.stdout, ", paused ") != 2 {
		t.Errorf("reshard apply:\n%s", r.stdout)
	}
	lr := <-load
	t.Logf("loadgen during the moves:\n%s", lr.stdout)
	if lr.code != 0 {
		t.Errorf("loadgen through a catalog-following router during the moves: exit %d\nstdout:\n%s\nstderr:\n%s", lr.code, lr.stdout, lr.stderr)
	}
	// The load's result has the moves' freezes from the catalog's journal
	// (the moves ran while it did), which its report marks.
	if b, err := os.ReadFile(filepath.Join(loadOut, "result.json")); err != nil {
		t.Error(err)
	} else {
		var res struct {
			Freezes []struct {
				Lo, Hi     int
				From, To   string
				DurationMS float64 `json:"duration_ms"`
				AtFlip     bool    `json:"at_flip"`
				Abandoned  bool    `json:"abandoned"`
			} `json:"freezes"`
		}
		// Both moves' freezes normally fall within the load (its setup
		// included), but the mover and the load start together: a freeze
		// may precede the load's start, so only what is listed is checked.
		if err := json.Unmarshal(b, &res); err != nil {
			t.Errorf("loadgen result: %v", err)
		}
		flipped := 0
		for _, f := range res.Freezes {
			if !f.Abandoned {
				flipped++
			}
			// The journal records each freeze, a start and a length, with
			// the step after it; a move read between its flip and its
			// clean-up's step (the load ended first) is marked at its flip.
			if f.DurationMS < 0 || f.To != "shard2" || f.Hi < f.Lo || (f.AtFlip && (f.Abandoned || f.DurationMS != 0)) {
				t.Errorf("loadgen result's freeze %+v: want a freeze of a move to shard2", f)
			}
		}
		if flipped > 2 {
			t.Errorf("loadgen result's freezes %+v: %d flipped, want at most the two moves'", res.Freezes, flipped)
		}
		t.Logf("loadgen result's freezes: %+v", res.Freezes)
	}
	if r := mustRun(t, "", "store", "demo", "-c", cfg, "--executions", "40", "--workers", "4"); !strings.Contains(r.stdout, "from catalog") {
		t.Errorf("store demo with a catalog in the config:\n%s", r.stdout)
	}
	r = mustRun(t, "", "reshard", "status", "-c", cfg, "--all")
	if strings.Count(r.stdout, " done ") != 2 || !strings.Contains(r.stdout, "at epoch 4") || !strings.Contains(r.stdout, " LONGEST  ABANDONED ") {
		t.Errorf("reshard status --all:\n%s", r.stdout)
	}
	r = mustRun(t, "", "map", "show", "-c", cfg, "--json")
	var m shardmap.Map
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("map show --json: %v\n%s", err, r.stdout)
	}
	counts := m.BucketCounts()
	if m.Epoch != 4 || counts["shard2"] < m.Buckets/3 || counts["shard0"] < m.Buckets/3 || counts["shard1"] < m.Buckets/3 {
		t.Errorf("map after the moves: epoch %d, buckets per shard %v", m.Epoch, counts)
	}
	if r := mustRun(t, "", "reshard", "apply", "-c", cfg); !strings.Contains(r.stdout, "no unfinished moves") {
		t.Errorf("apply with nothing to do:\n%s", r.stdout)
	}
	// abort of planned moves says which moves it ended, and how.
	mustRun(t, "", "reshard", "plan", "-c", cfg, "--remove-shard", "shard2")
	if r := mustRun(t, "", "reshard", "abort", "-c", cfg); !strings.Contains(r.stdout, "unfinished move") ||
		!strings.Contains(r.stdout, " aborted ") || strings.Contains(r.stdout, " planned ") {
		t.Errorf("abort of planned moves:\n%s", r.stdout)
	}
	if r := mustRun(t, "", "reshard", "abort", "-c", cfg); !strings.Contains(r.stdout, "nothing to abort") {
		t.Errorf("abort with nothing to do:\n%s", r.stdout)
	}

	// Through the dev proxy, which follows the catalog: every key whose
	// range moved to shard2 is served by shard2, with its data.
	if err := m.Validate(); err != nil {
		t.Fatalf("map show --json: %v", err)
	}
	moved := 0
	for k, before := range keys {
		if m.ShardForBucket(m.Bucket(k)).Name != "shard2" {
			continue
		}
		moved++
		if before == "shard2" {
			t.Errorf("%s was served by shard2 before any move", k)
		}
		if got := servedBy(t, proxy, k, "data of "+k); got != "shard2" {
			t.Errorf("%s (moved from %s) served by %s through the proxy after the move, want shard2", k, before, got)
		}
	}
	if moved == 0 {
		t.Errorf("none of the %d keys moved to shard2 (buckets per shard %v): the test proves nothing", len(keys), counts)
	}

	// The config still holds dev add-shard's map (epoch 2): a chaos run,
	// which resets every shard's fence to the config's map, is refused
	// before it starts rather than undo the moves.
	if r := run(t, "", "chaos", "run", "-c", cfg, "--scenario", "../../configs/chaos/nofaults.yaml", "--out", t.TempDir()); r.code == 0 ||
		!strings.Contains(r.stderr, "is older than its catalog's (epoch 4") || !strings.Contains(r.stderr, "dev up --dir") {
		t.Errorf("chaos run on a config behind its catalog: exit %d %q", r.code, r.stderr)
	}

	// dev up reuses the grown cluster: the catalog's map (epoch 4) into
	// the config, and --shards 2 on a cluster grown to 3 is not refused.
	r = mustRun(t, "", "dev", "up", "--dir", dir, "--shards", "2", "--fsync=false", "--proxy", "--proxy-bin", bin)
	if !strings.Contains(r.stdout, "holds 3 (--shards sizes a new cluster") || !strings.Contains(r.stdout, "reused 3-shard cluster") ||
		!strings.Contains(r.stdout, "map epoch 4, from the catalog") || !strings.Contains(r.stdout, "proxy reused") {
		t.Errorf("dev up on the grown cluster:\n%s", r.stdout)
	}
	if c, err := config.Load(config.Options{Path: cfg, Environ: []string{}, RequireMap: true}); err != nil || c.Map.Epoch != 4 {
		t.Errorf("the config's map after dev up: %v %+v", err, c)
	}
}

// devProxyConn connects to the dev proxy of dir (closed at the test's end).
func devProxyConn(t *testing.T, dir string) *pgx.Conn {
	t.Helper()
	var st struct {
		ProxyDSN string `json:"proxy_dsn"`
	}
	raw := mustRun(t, "", "dev", "status", "--dir", dir, "--json").stdout
	if err := json.Unmarshal([]byte(raw), &st); err != nil || st.ProxyDSN == "" {
		t.Fatalf("dev status --json: no proxy: %v\n%s", err, raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, st.ProxyDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// servedBy reads key through the proxy and returns the shard that served
// it, checking its data when want is set. The fence's PS001 (a proxy that
// has not seen the catalog's new epoch yet routes by the old map, and the
// old shard refuses) is waited out, at most a minute: the proxy polls the
// catalog; the bound is for one that never follows, not a slow one.
func servedBy(t *testing.T, conn *pgx.Conn, key, want string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var data, shard string
		err := conn.QueryRow(ctx, "SELECT data, (SELECT shard_name FROM pgshard_identity) FROM executions WHERE id = $1", key).Scan(&data, &shard)
		cancel()
		var pe *pgconn.PgError
		switch {
		case err == nil:
			if want != "" && data != want {
				t.Errorf("%s through the proxy: data %q from %s, want %q", key, data, shard, want)
			}
			return shard
		case errors.As(err, &pe) && pe.Code == "PS001" && time.Now().Before(deadline):
			time.Sleep(100 * time.Millisecond)
		default:
			t.Fatalf("read %s through the proxy: %v", key, err)
		}
	}
}
