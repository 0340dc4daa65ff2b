package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/internal/cli"
)

// TestProxyReadyWithLease: `pgshard proxy` on a catalog writes its ready
// file only once it holds its first lease, so a keyed read as the first
// statement of a client that waited for the file is answered, never
// refused with 57P03. The proxy's lease owner (pgshard-proxy@host:pid:
// this process, the command running in it) is held by someone else for
// the first seconds, so that the first lease comes late.
func TestProxyReadyWithLease(t *testing.T) {
	if err := cluster.Local().(cluster.SpecChecker).AvailableFor(context.Background(), cluster.Spec{}); err != nil {
		clustertest.SkipOrFail(t, err)
	}
	dir := clustertest.Dir(t)
	mustRun(t, "", "dev", "up", "--dir", dir, "--shards", "1", "--pgbouncer=false", "--fsync=false", "--catalog")
	st := catalogStatus(t, dir)
	if st.CatalogDSN == "" || len(st.Shards) != 1 {
		t.Fatalf("dev status: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cat, err := catalog.Open(ctx, st.CatalogDSN, catalog.Options{ApplicationName: "pgshard test"})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	host, _ := os.Hostname()
	if _, err := cat.Acquire(ctx, fmt.Sprintf("pgshard-proxy@%s:%d", host, os.Getpid()), "proxy", 1, 3*time.Second); err != nil {
		t.Fatal(err)
	}

	cfg := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("proxy:\n  catalog: %q\n  use_pooler: false\n  catalog_lease_ttl: 2s\n", st.CatalogDSN)), 0o644); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "ready.json")
	pctx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	var stderr lockedBuffer
	go func() {
		done <- cli.Run(pctx, []string{"proxy", "--config", cfg, "--listen", "127.0.0.1:0", "--ready-file", ready, "--trust-user", "postgres"}, nil, &lockedBuffer{}, &stderr)
	}()
	defer func() {
		stop()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("pgshard proxy: exit %d\n%s", code, stderr.String())
			}
		case <-time.After(time.Minute):
			t.Error("pgshard proxy did not stop within a minute")
		}
	}()

	var r struct {
		Addr string `json:"addr"`
	}
	for {
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &r) == nil && r.Addr != "" {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("pgshard proxy ended (exit %d) before it was ready\n%s", code, stderr.String())
		case <-ctx.Done():
			t.Fatalf("no ready file: %v\n%s", ctx.Err(), stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	u, err := url.Parse(st.Shards[0].DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.Host, u.User = r.Addr, url.User("postgres")
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var id string
	err = conn.QueryRow(ctx, `SELECT id FROM executions WHERE id = $1`, "proxy-ready-probe").Scan(&id)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		t.Fatalf("the first keyed read through a proxy that announced itself ready: %v (%s)", err, pe.Code)
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("the first keyed read: %v; want no rows", err)
	}
}

// lockedBuffer is a strings.Builder safe for a command writing while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
