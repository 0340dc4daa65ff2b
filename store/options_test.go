package store_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/store"
)

func TestRedactDSN(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://u:secret@h:5432/db?sslmode=disable", "postgres://u:[redacted]@h:5432/db?sslmode=disable"},
		{"postgresql://u@h/db", "postgresql://u@h/db"},
		{"postgres://u@h/db?password=secret&sslmode=disable", "postgres://u@h/db?password=redacted&sslmode=disable"},
		{"host=h user=u password=secret dbname=db", "host=h user=u password=[redacted] dbname=db"},
		{"host=h password = 'se cr\\'et' dbname=db", "host=h password = [redacted] dbname=db"},
		{"host=h dbname=db", "host=h dbname=db"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := store.RedactDSN(tt.in); got != tt.want {
			t.Errorf("RedactDSN(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if strings.Contains(store.RedactDSN(tt.in), "secret") {
			t.Errorf("RedactDSN(%q) leaks the password", tt.in)
		}
	}
}

func TestOpenRejectsOptions(t *testing.T) {
	tests := []struct {
		name string
		opts store.Options
		want string
	}{
		{"named statements behind a pooler", store.Options{BehindPooler: true, ExecMode: pgx.QueryExecModeCacheStatement}, "ExecMode: cache_statement"},
		{"unknown exec mode", store.Options{ExecMode: 42}, "unknown mode 42"},
		{"negative timeout", store.Options{StatementTimeout: -time.Second}, "StatementTimeout"},
		{"trace max below NoTraceCap", store.Options{TraceMax: -2}, "TraceMax"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := store.Open(context.Background(), "postgres://u@127.0.0.1:1/db", tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// TestOpenRetries: Open tries ConnectAttempts times, ConnectInterval apart,
// and then names the DSN (password redacted) and the last error.
func TestOpenRetries(t *testing.T) {
	dsn := "postgres://u:hunter2@127.0.0.1:" + itoa(closedPort(t)) + "/db?sslmode=disable"
	start := time.Now()
	_, err := store.Open(context.Background(), dsn, store.Options{ConnectAttempts: 3, ConnectInterval: 50 * time.Millisecond})
	took := time.Since(start)
	if err == nil {
		t.Fatal("Open succeeded against a closed port")
	}
	msg := err.Error()
	for _, want := range []string{"gave up after 3 attempts", "u:[redacted]@127.0.0.1", "connect"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "hunter2") {
		t.Errorf("error %q leaks the password", msg)
	}
	if took < 100*time.Millisecond {
		t.Errorf("3 attempts 50ms apart took only %v: the interval was not waited", took)
	}
}

// TestOpenStopsWithContext: a context that ends during the retries ends
// Open with the context's error, long before the attempts would run out.
func TestOpenStopsWithContext(t *testing.T) {
	dsn := "postgres://u@127.0.0.1:" + itoa(closedPort(t)) + "/db?sslmode=disable"
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := store.Open(ctx, dsn, store.Options{ConnectAttempts: 1000, ConnectInterval: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "context deadline exceeded") {
		t.Fatalf("error %v, want the context's", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Open returned %v after the context ended", took)
	}
}

// TestOpenRefusesShardWithoutIdentity is a regression test of issue 11,
// defect 3: a database with pgshard's tables but no identity record (its
// sequences not yet strided for an ordinal) is refused; so is one without
// the schema.
func TestOpenRefusesShardWithoutIdentity(t *testing.T) {
	c := clustertest.Get(t)
	db := clustertest.FreshDatabase(t, c)
	dsn := c.Shards[0].DSN(db, c.Spec.User)
	ctx := ctxT(t)
	open := func() error {
		s, err := store.Open(ctx, dsn, store.Options{ConnectAttempts: 1})
		if err == nil {
			s.Close()
		}
		return err
	}
	if err := open(); err == nil || !strings.Contains(err.Error(), "run pgshard migrate") {
		t.Errorf("unmigrated database: %v, want a refusal saying to migrate", err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, _, err := migrations.Migrate(ctx, conn, migrations.All()); err != nil {
		t.Fatal(err)
	}
	if err := open(); err == nil || !strings.Contains(err.Error(), "no identity record") {
		t.Errorf("migrated database without identity: %v, want a refusal naming the identity record", err)
	}
}
