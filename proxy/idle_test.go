package proxy_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestParameterStatusPerSession: the ParameterStatus values a client is
// told follow its own SET, SET LOCAL (until the transaction ends) and
// RESET, as on a direct connection, and never another client's: sessions
// with the same startup settings share the startup's values (an idle
// session holds no copy, startup.go greet) until they change one.
func TestParameterStatusPerSession(t *testing.T) {
	forEachPath(t, func(t *testing.T, via string, e *proxyEnv) {
		ctx := ctxT(t, time.Minute)
		a, b := e.connect(t), e.connect(t)
		told := func(c *pgx.Conn, name string) string { return c.PgConn().ParameterStatus(name) }
		exec := func(c *pgx.Conn, sql string) {
			t.Helper()
			if _, err := c.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		expect := func(when string, c *pgx.Conn, name, want string) {
			t.Helper()
			if got := told(c, name); got != want {
				t.Fatalf("%s: %s told %q, want %q", when, name, got, want)
			}
		}
		startApp, startDS := told(a, "application_name"), told(a, "DateStyle")
		if startDS == "" {
			t.Fatal("DateStyle was not reported at startup")
		}
		expect("startup", b, "application_name", startApp)
		expect("startup", b, "DateStyle", startDS)

		exec(a, "SET application_name = 'idle-a'")
		expect("after SET", a, "application_name", "idle-a")
		exec(b, "SELECT 1")
		expect("the other client, after SET", b, "application_name", startApp)

		tx, err := a.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SET LOCAL application_name = 'local-a'"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT 1 /* pgshard:shard=shard0 */"); err != nil {
			t.Fatal(err)
		}
		expect("in the transaction", a, "application_name", "local-a")
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		exec(a, "SELECT 1")
		expect("after COMMIT", a, "application_name", "idle-a")

		exec(b, "SET DateStyle = 'German, DMY'")
		expect("after SET", b, "DateStyle", "German, DMY")
		exec(a, "SELECT 1")
		expect("the other client, after SET", a, "DateStyle", startDS)

		exec(a, "RESET application_name")
		expect("after RESET", a, "application_name", startApp)
		exec(b, "RESET ALL")
		expect("after RESET ALL", b, "DateStyle", startDS)
		exec(b, "SELECT 1")
		expect("after RESET ALL", b, "application_name", startApp)
	})
}
