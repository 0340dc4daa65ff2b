package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/proxy"
)

// lockedBuffer collects log output from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
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

// TestSecretsNeverShown: a plain-text password (accepted, with a warning),
// a SCRAM verifier (as `pgshard passwd` prints it), DSN passwords and the
// PgBouncer admin password never appear in the logs (debug level), the
// admin console, the clients' errors or the metrics — while logins with
// both kinds of password work and wrong ones fail.
func TestSecretsNeverShown(t *testing.T) {
	const (
		plain      = "PlainSecret-7731"
		scramPW    = "VerifierSecret-1234"
		dsnPW      = "dsnpass-XYZ987"
		bouncerPW  = "bouncerpass-Q1w2"
		bouncerUsr = "nosuchadmin"
	)
	verifier, err := proxy.NewSCRAMVerifier(scramPW)
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	addr := freeAddr(t)
	d := db(t)
	m := d.m.Clone()
	for i := range m.Shards {
		for _, dsn := range []*string{&m.Shards[i].DSN, &m.Shards[i].PoolerDSN} {
			u, err := url.Parse(*dsn)
			if err != nil {
				t.Fatal(err)
			}
			u.User = url.UserPassword(u.User.Username(), dsnPW)
			*dsn = u.String()
		}
	}
	e := startProxyFor(t, &testDB{c: d.c, name: d.name, m: m}, func(c *proxy.Config) {
		c.Users = append(c.Users, proxy.User{Name: "alice", Password: plain}, proxy.User{Name: "bob", Password: verifier})
		c.AdminUsers = []string{"postgres"}
		c.MetricsListen = addr
		c.PgBouncer = proxy.BouncerConfig{AdminUser: bouncerUsr, AdminPassword: bouncerPW, PollInterval: 100 * time.Millisecond}
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	ctx := ctxT(t, 2*time.Minute)
	var seen []string // everything a client or scraper was shown
	dsnAs := func(user, pw string) string {
		return fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", user, url.QueryEscape(pw), e.addr, d.name)
	}
	for _, ok := range [][2]string{{"alice", plain}, {"bob", scramPW}} {
		c, err := pgx.Connect(ctx, dsnAs(ok[0], ok[1]))
		if err != nil {
			t.Fatalf("login as %s: %v", ok[0], err)
		}
		if _, err := c.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = 1"); err != nil {
			t.Fatal(err)
		}
		c.Close(ctx)
	}
	for _, bad := range [][2]string{{"alice", scramPW}, {"bob", plain}, {"bob", verifier}} {
		_, err := pgx.Connect(ctx, dsnAs(bad[0], bad[1]))
		if pgCode(err) != "28P01" {
			t.Fatalf("login as %s with the wrong password: %v", bad[0], err)
		}
		seen = append(seen, err.Error())
	}
	// An error that involves a shard and its DSN: a statement for a
	// database that does not exist through the same proxy's users.
	_, err = pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&options=-c%%20no_such.setting%%3D1", e.addr, d.name))
	if err != nil {
		seen = append(seen, err.Error())
	}
	// Wait for a failed PgBouncer admin reading (the user does not exist).
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "PgBouncer admin console") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	for _, cmd := range []string{"SHOW CONFIG", "SHOW SHARDS", "SHOW DATABASES", "SHOW USERS", "SHOW SERVERS", "SHOW CLIENTS", "SHOW STATS"} {
		cols, rows := psqlTable(t, e.adminDSN("postgres"), cmd)
		seen = append(seen, strings.Join(cols, " "))
		for _, r := range rows {
			seen = append(seen, strings.Join(r, " "))
		}
	}
	_, body := scrape(t, addr)
	seen = append(seen, body)
	shown := strings.Join(seen, "\n")
	all := logs.String() + "\n" + shown
	secrets := []string{plain, scramPW, dsnPW, bouncerPW, verifier}
	if i := strings.IndexByte(verifier, '$'); i >= 0 {
		secrets = append(secrets, strings.FieldsFunc(verifier[i+1:], func(r rune) bool { return r == '$' || r == ':' })[1:]...)
	}
	for _, s := range secrets {
		if strings.Contains(all, s) {
			t.Errorf("secret %q appears in the logs or what clients were shown", s)
		}
	}
	if !strings.Contains(shown, "[redacted]") {
		t.Errorf("SHOW CONFIG/SHARDS do not show redacted secrets:\n%s", shown)
	}
	if !strings.Contains(logs.String(), "plain-text password") || !strings.Contains(logs.String(), "user=alice") {
		t.Errorf("no warning about alice's plain-text password in the logs")
	}
	if t.Failed() {
		t.Logf("logs:\n%s\nshown:\n%s", logs.String(), shown)
	}
}

var _ = context.Background
