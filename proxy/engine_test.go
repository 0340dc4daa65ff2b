package proxy_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Unit tests of the transaction engine against fake shards (no database):
// what the client sees, and exactly what each backend receives.

func filterLog(log []string) string {
	return strings.Join(log, " | ")
}

// TestEngineDeferredBegin: BEGIN is answered locally, then replayed with
// SET LOCAL on the shard of the first keyed statement, in front of it.
func TestEngineDeferredBegin(t *testing.T) {
	fe := startFake(t, true)
	c := fe.client(t)
	c.send(&pgproto3.Query{String: "BEGIN ISOLATION LEVEL REPEATABLE READ"})
	expect(t, "BEGIN", c.until(), "C:BEGIN Z:T")
	c.send(&pgproto3.Query{String: "SET LOCAL statement_timeout = '1s'"})
	expect(t, "SET LOCAL", c.until(), "C:SET Z:T")
	c.send(&pgproto3.Query{String: "SAVEPOINT a"})
	expect(t, "SAVEPOINT", c.until(), "C:SAVEPOINT Z:T")
	for _, f := range fe.shards {
		if m := f.messages(); len(m) > 0 {
			t.Fatalf("a backend got messages before the first key: %v", m)
		}
	}
	k := fe.keyOn(1)
	q := fmt.Sprintf("SELECT note FROM accounts WHERE aid = %d", k)
	c.send(&pgproto3.Query{String: q})
	expect(t, "keyed", c.until(), "T D:conn1 C:SELECT 1 Z:T")
	got := filterLog(fe.shards[1].messages())
	want := "1:Q:BEGIN ISOLATION LEVEL REPEATABLE READ;\nSET LOCAL statement_timeout = '1s';\nSAVEPOINT a | 1:Q:" + q
	expect(t, "shard1 received", got, want)
	if m := fe.shards[0].messages(); len(m) > 0 {
		t.Fatalf("shard0 got %v", m)
	}
	// Cross-shard: refused, and the backend transaction is aborted by a
	// failing statement; status E.
	c.send(&pgproto3.Query{String: fmt.Sprintf("UPDATE accounts SET note = 'x' WHERE aid = %d", fe.keyOn(0))})
	expect(t, "cross-shard", c.until(), "E:0A000 Z:E")
	got = filterLog(fe.shards[1].messages())
	if !strings.Contains(got, "SELECT (") {
		t.Fatalf("shard1 did not get the aborting statement: %s", got)
	}
	c.send(&pgproto3.Query{String: "COMMIT"})
	expect(t, "COMMIT of a failed transaction", c.until(), "C:ROLLBACK Z:I")
	// After the transaction: a new key goes to its own shard.
	c.send(&pgproto3.Query{String: fmt.Sprintf("SELECT note FROM accounts WHERE aid = %d", fe.keyOn(0))})
	expect(t, "next statement", c.until(), "T D:conn1 C:SELECT 1 Z:I")
}

// TestEngineLocalTransactionControl: transaction commands without a bound
// shard are answered like Postgres would, without touching a backend.
func TestEngineLocalTransactionControl(t *testing.T) {
	fe := startFake(t, true)
	c := fe.client(t)
	steps := []struct{ q, want string }{
		{"COMMIT", "N:25P01 C:COMMIT Z:I"},
		{"ROLLBACK", "N:25P01 C:ROLLBACK Z:I"},
		{"SAVEPOINT x", "E:25P01 Z:I"},
		{"SET LOCAL work_mem = '1MB'", "N:25P01 C:SET Z:I"},
		{"BEGIN", "C:BEGIN Z:T"},
		{"BEGIN", "N:25001 C:BEGIN Z:T"},
		{"SAVEPOINT x", "C:SAVEPOINT Z:T"},
		{"RELEASE SAVEPOINT nope", "E:3B001 Z:E"},
		{"SELECT 1", "E:25P02 Z:E"},
		{"ROLLBACK TO SAVEPOINT x", "C:ROLLBACK Z:T"},
		{"ROLLBACK", "C:ROLLBACK Z:I"},
		{"", "EmptyQueryResponse Z:I"},
		{"DEALLOCATE nope", "E:26000 Z:I"},
		{"DEALLOCATE ALL", "C:DEALLOCATE ALL Z:I"},
		{"DISCARD ALL", "C:DISCARD ALL Z:I"},
		{"SET pgshard.key = 'x'", "E:0A000 Z:I"},
		{"BEGIN; COMMIT", "C:BEGIN C:COMMIT Z:I"},
	}
	for _, s := range steps {
		c.send(&pgproto3.Query{String: s.q})
		got := strings.ReplaceAll(c.until(), "*pgproto3.", "")
		expect(t, s.q, got, s.want)
	}
	for i, f := range fe.shards {
		if m := f.messages(); len(m) > 0 {
			t.Fatalf("shard%d got %v", i, m)
		}
	}
}

// TestEngineVirtualStatements: client-named statements never reach a
// pooler; each Bind gets an unnamed Parse in the same pipeline. Directly,
// a proxy-named server-side statement is prepared once per connection.
func TestEngineVirtualStatements(t *testing.T) {
	for _, pooler := range []bool{true, false} {
		t.Run(fmt.Sprint("pooler=", pooler), func(t *testing.T) {
			fe := startFake(t, pooler)
			c := fe.client(t)
			sql := "SELECT note FROM accounts WHERE aid = $1"
			c.send(&pgproto3.Parse{Name: "s1", Query: sql}, &pgproto3.Sync{})
			expect(t, "Parse", c.until(), "1 Z:I")
			c.send(&pgproto3.Parse{Name: "s1", Query: sql}, &pgproto3.Sync{})
			expect(t, "duplicate Parse", c.until(), "E:42P05 Z:I")
			for i := 0; i < 3; i++ {
				k := fe.keyOn(i % 2)
				c.send(&pgproto3.Bind{PreparedStatement: "s1", Parameters: [][]byte{[]byte(fmt.Sprint(k))}},
					&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})
				expect(t, "Bind/Execute", c.until(), fmt.Sprintf("2 T D:conn1 C:SELECT 1 Z:I"))
				got := filterLog(fe.shards[i%2].messages())
				var want string
				switch {
				case pooler:
					want = "1:P::" + sql + " | 1:B::  | 1:D:P: | 1:E: | 1:S"
					want = strings.ReplaceAll(want, "B::  ", "B:: ")
				case i < 2:
					want = fmt.Sprintf("1:P:pgshard_1:%s | 1:B::pgshard_1 | 1:D:P: | 1:E: | 1:S", sql)
				default:
					want = "1:B::pgshard_1 | 1:D:P: | 1:E: | 1:S"
				}
				expect(t, "backend messages", got, want)
			}
			// Describe of the statement goes to a backend; Close is local.
			c.send(&pgproto3.Describe{ObjectType: 'S', Name: "s1"}, &pgproto3.Sync{})
			expect(t, "Describe S", c.until(), "t T Z:I")
			fe.shards[0].messages()
			fe.shards[1].messages()
			c.send(&pgproto3.Close{ObjectType: 'S', Name: "s1"}, &pgproto3.Sync{})
			expect(t, "Close", c.until(), "3 Z:I")
			c.send(&pgproto3.Bind{PreparedStatement: "s1"}, &pgproto3.Execute{}, &pgproto3.Sync{})
			expect(t, "Bind after Close", c.until(), "E:26000 Z:I")
			for i, f := range fe.shards {
				if m := f.messages(); len(m) > 0 {
					t.Fatalf("shard%d got %v after Close", i, m)
				}
			}
		})
	}
}

// TestEnginePipelineAbort: a pipeline (one implicit transaction) whose
// second statement belongs to another shard: the first is rolled back by
// an aborting Parse on its backend, the client gets 0A000 in place.
func TestEnginePipelineAbort(t *testing.T) {
	fe := startFake(t, true)
	c := fe.client(t)
	sql := "UPDATE accounts SET note = 'x' WHERE aid = $1"
	k0, k1 := fe.keyOn(0), fe.keyOn(1)
	c.send(&pgproto3.Parse{Query: sql},
		&pgproto3.Bind{Parameters: [][]byte{[]byte(fmt.Sprint(k0))}}, &pgproto3.Execute{},
		&pgproto3.Bind{Parameters: [][]byte{[]byte(fmt.Sprint(k1))}}, &pgproto3.Execute{},
		&pgproto3.Sync{})
	expect(t, "pipeline", c.until(), "1 2 D:conn1 C:SELECT 1 E:0A000 Z:I")
	got := filterLog(fe.shards[0].messages())
	if !strings.Contains(got, "P::/* pgshard: statement refused") || !strings.HasSuffix(got, "1:S") {
		t.Fatalf("shard0 got %s", got)
	}
	if m := fe.shards[1].messages(); len(m) > 0 {
		t.Fatalf("shard1 got %v", m)
	}
}

// TestEngineCancel: a cancel request reaches the backend serving the
// session (its own key), and none is sent when nothing runs.
func TestEngineCancel(t *testing.T) {
	fe := startFake(t, false)
	c := fe.client(t)
	var pid, secret uint32
	// The raw client's startup swallowed BackendKeyData; ask again by
	// reconnecting with a frontend that keeps it.
	rc := dialRaw(t, fe.addr)
	rc.fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "postgres", "database": "db"}})
	_ = rc.fe.Flush()
	for {
		m, err := rc.fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if k, ok := m.(*pgproto3.BackendKeyData); ok {
			pid, secret = k.ProcessID, uint32(k.SecretKey[0])<<24|uint32(k.SecretKey[1])<<16|uint32(k.SecretKey[2])<<8|uint32(k.SecretKey[3])
		}
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			break
		}
	}
	_ = c
	cancel := func(pid, secret uint32) {
		cc := dialRaw(t, fe.addr)
		b := []byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e}
		b = append(b, byte(pid>>24), byte(pid>>16), byte(pid>>8), byte(pid), byte(secret>>24), byte(secret>>16), byte(secret>>8), byte(secret))
		if _, err := cc.conn.Write(b); err != nil {
			t.Fatal(err)
		}
		var one [1]byte
		_, _ = cc.conn.Read(one[:]) // closed by the proxy
	}
	cancel(pid, secret) // idle session: nothing to cancel
	// Hold a backend: open a transaction on shard 1.
	rc.fe.Send(&pgproto3.Query{String: "BEGIN"})
	rc.fe.Send(&pgproto3.Query{String: fmt.Sprintf("SELECT note FROM accounts WHERE aid = %d", fe.keyOn(1))})
	_ = rc.fe.Flush()
	cl := &client{t: t, fe: rc.fe, c: rc.conn}
	expect(t, "BEGIN", cl.until(), "C:BEGIN Z:T")
	expect(t, "keyed", cl.until(), "T D:conn1 C:SELECT 1 Z:T")
	cancel(pid, secret^1) // wrong secret: ignored
	cancel(pid, secret)
	waitFor(t, "the cancel request at shard1", func() bool {
		fe.shards[1].mu.Lock()
		defer fe.shards[1].mu.Unlock()
		return len(fe.shards[1].cancels) > 0
	})
	fe.shards[1].mu.Lock()
	got := fmt.Sprint(fe.shards[1].cancels)
	fe.shards[1].mu.Unlock()
	expect(t, "cancel requests at shard1", got, "[1001/00000001]")
	fe.shards[0].mu.Lock()
	if len(fe.shards[0].cancels) > 0 {
		t.Fatalf("shard0 got cancel requests %v", fe.shards[0].cancels)
	}
	fe.shards[0].mu.Unlock()
}

// TestEngineOneBackendPerPool: with pool size 1, sessions take turns on
// one backend connection.
func TestEngineOneBackendPerPool(t *testing.T) {
	fe := startFake(t, true, poolSize(1))
	a, b := fe.client(t), fe.client(t)
	q := fmt.Sprintf("SELECT note FROM accounts WHERE aid = %d", fe.keyOn(0))
	for i := 0; i < 3; i++ {
		a.send(&pgproto3.Query{String: q})
		expect(t, "a", a.until(), "T D:conn1 C:SELECT 1 Z:I")
		b.send(&pgproto3.Query{String: q})
		expect(t, "b", b.until(), "T D:conn1 C:SELECT 1 Z:I")
	}
	fe.shards[0].mu.Lock()
	n := fe.shards[0].conns
	fe.shards[0].mu.Unlock()
	if n != 1 {
		t.Fatalf("shard0 has %d connections, want 1", n)
	}
}

// TestEnginePreambleWrap: a client setting a parameter PgBouncer does not
// track gets it with set_config(..., true) in a BEGIN the proxy adds (and
// commits), also when the pipeline is flushed before its Sync.
func TestEnginePreambleWrap(t *testing.T) {
	fe := startFake(t, true)
	rc := dialRaw(t, fe.addr)
	rc.fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "postgres", "database": "db", "extra_float_digits": "0"}})
	_ = rc.fe.Flush()
	c := &client{t: t, fe: rc.fe, c: rc.conn}
	if got := c.until(); !strings.HasSuffix(got, "Z:I") {
		t.Fatalf("startup: %s", got)
	}
	fe.shards[0].messages()
	fe.shards[1].messages()
	k := fe.keyOn(1)
	c.send(&pgproto3.Parse{Query: "SELECT note FROM accounts WHERE aid = $1"},
		&pgproto3.Bind{Parameters: [][]byte{[]byte(fmt.Sprint(k))}}, &pgproto3.Execute{}, &pgproto3.Flush{})
	for _, want := range []string{"*pgproto3.ParseComplete", "*pgproto3.BindComplete", "*pgproto3.DataRow", "*pgproto3.CommandComplete"} {
		m, err := c.fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%T", m); got != want {
			t.Fatalf("after Flush: got %s, want %s", got, want)
		}
	}
	c.send(&pgproto3.Sync{})
	expect(t, "Sync", c.until(), "Z:I")
	got := filterLog(fe.shards[1].messages())
	want := "1:Q:BEGIN;\nSELECT pg_catalog.set_config(E'extra_float_digits', E'0', true) | 1:P::SELECT note FROM accounts WHERE aid = $1 | 1:B:: | 1:E: | 1:H | 1:S | 1:Q:COMMIT"
	expect(t, "shard1 received", got, want)
	// A client with default settings pays nothing.
	d := fe.client(t)
	d.send(&pgproto3.Query{String: fmt.Sprintf("SELECT note FROM accounts WHERE aid = %d", k)})
	expect(t, "default client", d.until(), "T D:conn1 C:SELECT 1 Z:I")
	got = filterLog(fe.shards[1].messages())
	if strings.Contains(got, "set_config") || strings.Contains(got, "BEGIN") {
		t.Fatalf("default client's transaction got a preamble: %s", got)
	}
}

// TestEngineShutdownDuringQuery: the server stops promptly even while a
// session waits for a backend that does not answer.
func TestEngineShutdownDuringQuery(t *testing.T) {
	fe := startFake(t, true)
	c := fe.client(t)
	c.send(&pgproto3.Query{String: fmt.Sprintf("SELECT 'hang forever' FROM accounts WHERE aid = %d", fe.keyOn(0))})
	waitFor(t, "the backend to receive the query", func() bool {
		fe.shards[0].mu.Lock()
		defer fe.shards[0].mu.Unlock()
		for _, l := range fe.shards[0].log {
			if strings.HasSuffix(l, ":hanging") {
				return true
			}
		}
		return false
	})
	// The test's cleanup cancels the server and requires it to stop.
}
