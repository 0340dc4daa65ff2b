package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/shardmap"
)

// Unit tests of the fence's attach and swallow (internal/engine/fence.go) and of following
// a catalog (catalog.go) against fake shards: what the client sees — the
// same as without the fence — and exactly what each backend receives.

func fenceMode(m proxy.FenceMode) envOpt { return func(c *proxy.Config) { c.Fence = m } }

// fenceText is the text the proxy asserts for int8 key k: the key when
// its text hashes to its bucket, else the bucket's stand-in
// ("pgshard-fence-<n>" for the least n that hashes there).
func fenceText(m *shardmap.Map, k int64) string {
	b := m.BucketInt8(k)
	if s := fmt.Sprint(k); m.Bucket(s) == b {
		return s
	}
	for n := 0; ; n++ {
		if s := fmt.Sprintf("pgshard-fence-%d", n); m.Bucket(s) == b {
			return s
		}
	}
}

// TestEngineFenceImplicit: a keyed statement in an implicit transaction
// is preceded by the assert of its key, in its own implicit transaction
// (no BEGIN/COMMIT): first in the client's query string in a simple
// Query, the pipeline's first statement in the extended protocol; the
// client sees exactly the statement's own answers.
func TestEngineFenceImplicit(t *testing.T) {
	fe := startFake(t, true, fenceMode(proxy.FenceOn))
	c := fe.client(t)
	k := fe.keyOn(1)
	q := fmt.Sprintf("SELECT note FROM accounts WHERE aid = %d", k)
	c.send(&pgproto3.Query{String: q})
	expect(t, "simple keyed", c.until(), "T D:conn1 C:SELECT 1 Z:I")
	want := fmt.Sprintf("1:Q:CALL pgshard_fence_enter('%s');\n%s", fenceText(fe.m, k), q)
	expect(t, "shard1 received", filterLog(fe.shards[1].messages()), want)

	c.send(&pgproto3.Parse{Query: "SELECT note FROM accounts WHERE aid = $1"},
		&pgproto3.Bind{Parameters: [][]byte{[]byte(fmt.Sprint(k))}},
		&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})
	expect(t, "extended keyed", c.until(), "1 2 T D:conn1 C:SELECT 1 Z:I")
	got := filterLog(fe.shards[1].messages())
	if !strings.HasPrefix(got, fmt.Sprintf("1:P::CALL pgshard_fence_enter('%s') | 1:B:pgshard_fence: | 1:E:pgshard_fence | 1:C:P:pgshard_fence | 1:P:", fenceText(fe.m, k))) || !strings.HasSuffix(got, "1:E: | 1:S") || strings.Contains(got, "BEGIN") || strings.Contains(got, "COMMIT") {
		t.Fatalf("shard1 received %s: want the assert first, in the pipeline's write, and no BEGIN/COMMIT", got)
	}
	// A key-less statement is not fenced.
	c.send(&pgproto3.Query{String: "SELECT 1"})
	expect(t, "key-less", c.until(), "T D:conn1 C:SELECT 1 Z:I")
	for _, f := range fe.shards {
		if got := filterLog(f.messages()); strings.Contains(got, "fence") {
			t.Fatalf("a key-less statement was fenced: %s", got)
		}
	}
}

// TestEngineFenceExplicit: in a transaction block the assert joins the
// deferred BEGIN's replay, once, before the first keyed statement.
func TestEngineFenceExplicit(t *testing.T) {
	fe := startFake(t, true, fenceMode(proxy.FenceOn))
	c := fe.client(t)
	k := fe.keyOn(0)
	c.send(&pgproto3.Query{String: "BEGIN"})
	expect(t, "BEGIN", c.until(), "C:BEGIN Z:T")
	q := fmt.Sprintf("UPDATE accounts SET note = 'x' WHERE aid = %d", k)
	c.send(&pgproto3.Query{String: q})
	expect(t, "keyed", c.until(), "T D:conn1 C:SELECT 1 Z:T")
	c.send(&pgproto3.Query{String: q})
	expect(t, "again", c.until(), "T D:conn1 C:SELECT 1 Z:T")
	c.send(&pgproto3.Query{String: "COMMIT"})
	expect(t, "COMMIT", c.until(), "C:COMMIT Z:I")
	want := fmt.Sprintf("1:Q:BEGIN;\nCALL pgshard_fence_enter('%s') | 1:Q:%s | 1:Q:%s | 1:Q:COMMIT", fenceText(fe.m, k), q, q)
	expect(t, "shard0 received", filterLog(fe.shards[0].messages()), want)
}

// TestEngineFenceRefused: the shard's PS001 reaches the client in place
// of the statement's answer (its 25P02 echo dropped), and the implicit
// transaction ends (Z:I); in a block the transaction is failed.
func TestEngineFenceRefused(t *testing.T) {
	fe := startFake(t, true, fenceMode(proxy.FenceOn))
	k := fe.keyOn(1)
	fe.shards[1].setFence(true, true)
	c := fe.client(t)
	c.send(&pgproto3.Query{String: fmt.Sprintf("SELECT note FROM accounts WHERE aid = %d", k)})
	expect(t, "simple refused", c.until(), "E:PS001 Z:I")
	c.send(&pgproto3.Parse{Query: "SELECT note FROM accounts WHERE aid = $1"},
		&pgproto3.Bind{Parameters: [][]byte{[]byte(fmt.Sprint(k))}}, &pgproto3.Execute{}, &pgproto3.Sync{})
	expect(t, "extended refused", c.until(), "1 E:PS001 Z:I")
	c.send(&pgproto3.Query{String: "BEGIN"})
	expect(t, "BEGIN", c.until(), "C:BEGIN Z:T")
	c.send(&pgproto3.Query{String: fmt.Sprintf("SELECT note FROM accounts WHERE aid = %d", k)})
	expect(t, "in a block", c.until(), "E:PS001 Z:E")
	c.send(&pgproto3.Query{String: "ROLLBACK"})
	expect(t, "ROLLBACK", c.until(), "C:ROLLBACK Z:I")
}

// TestEngineFenceAuto: under FenceAuto a proxy following a catalog asks
// each pool once; a shard without the fence gets no assert, one with it
// does.
func TestEngineFenceAuto(t *testing.T) {
	ff := &fakeFollower{maps: make(chan *shardmap.Map), applied: make(chan error, 1)}
	fe := startFake(t, true, func(c *proxy.Config) { c.Follow, c.CatalogName = ff, "postgres://cat/test" })
	fe.shards[0].setFence(true, false)
	c := fe.client(t)
	for i := range 3 {
		for sh := range 2 {
			k := fe.keyOn(sh)
			c.send(&pgproto3.Query{String: fmt.Sprintf("SELECT note FROM accounts WHERE aid = %d", k)})
			expect(t, fmt.Sprintf("round %d shard %d", i, sh), c.until(), "T D:conn1 C:SELECT 1 Z:I")
		}
	}
	if got := filterLog(fe.shards[1].messages()); strings.Contains(got, "fence") || strings.Contains(got, "BEGIN") {
		t.Fatalf("shard1 (no fence) received %s", got)
	}
	if got := filterLog(fe.shards[0].messages()); strings.Count(got, "pgshard_fence_enter") != 3 {
		t.Fatalf("shard0 (fence) received %s: want three asserts", got)
	}
	for i, f := range fe.shards {
		f.mu.Lock()
		n := f.detects
		f.mu.Unlock()
		if n != 1 {
			t.Errorf("shard%d was asked %d times whether it has the fence, want once", i, n)
		}
	}
}

// TestEngineFenceAutoStaticMap: under FenceAuto a proxy on a static map
// (no catalog to follow) neither asks nor asserts.
func TestEngineFenceAutoStaticMap(t *testing.T) {
	fe := startFake(t, true)
	fe.shards[1].setFence(true, false)
	c := fe.client(t)
	q := fmt.Sprintf("SELECT note FROM accounts WHERE aid = %d", fe.keyOn(1))
	c.send(&pgproto3.Query{String: q})
	expect(t, "keyed", c.until(), "T D:conn1 C:SELECT 1 Z:I")
	expect(t, "shard1 received", filterLog(fe.shards[1].messages()), "1:Q:"+q)
	fe.shards[1].mu.Lock()
	n := fe.shards[1].detects
	fe.shards[1].mu.Unlock()
	if n != 0 {
		t.Errorf("shard1 was asked %d times whether it has the fence, want never", n)
	}
}

// TestEngineFenceOff: FenceOff sends the client's statements only.
func TestEngineFenceOff(t *testing.T) {
	fe := startFake(t, true, fenceMode(proxy.FenceOff))
	fe.shards[1].setFence(true, false)
	c := fe.client(t)
	q := fmt.Sprintf("SELECT note FROM accounts WHERE aid = %d", fe.keyOn(1))
	c.send(&pgproto3.Query{String: q})
	expect(t, "keyed", c.until(), "T D:conn1 C:SELECT 1 Z:I")
	expect(t, "shard1 received", filterLog(fe.shards[1].messages()), "1:Q:"+q)
}

// fakeFollower is a MapFollower driven by the test: maps sent on maps are
// applied; Check answers lapsed.
type fakeFollower struct {
	maps    chan *shardmap.Map
	applied chan error
	mu      sync.Mutex
	lapsed  error
}

func (f *fakeFollower) Run(ctx context.Context, served func() uint64, apply func(context.Context, *shardmap.Map) error) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-f.maps:
			err := apply(ctx, m)
			if err == nil && served() != m.Epoch {
				err = fmt.Errorf("served epoch %d after applying epoch %d", served(), m.Epoch)
			}
			f.applied <- err
		}
	}
}

func (f *fakeFollower) Check(time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lapsed
}

func (f *fakeFollower) Nudge() {}

func (f *fakeFollower) setLapsed(err error) {
	f.mu.Lock()
	f.lapsed = err
	f.mu.Unlock()
}

// TestFollowCatalog: a newer map from the follower becomes the proxy's
// map (a key moves to its new shard); while the lease is not live keyed
// statements fail with 57P03 naming the catalog, key-less ones still run.
func TestFollowCatalog(t *testing.T) {
	ff := &fakeFollower{maps: make(chan *shardmap.Map), applied: make(chan error, 1)}
	fe := startFake(t, true, fenceMode(proxy.FenceOff), func(c *proxy.Config) { c.Follow, c.CatalogName = ff, "postgres://cat/test" })
	c := fe.client(t)
	k := fe.keyOn(1)
	q := fmt.Sprintf("SELECT note FROM accounts WHERE aid = %d", k)
	c.send(&pgproto3.Query{String: q})
	expect(t, "before", c.until(), "T D:conn1 C:SELECT 1 Z:I")
	expect(t, "shard1 received", filterLog(fe.shards[1].messages()), "1:Q:"+q)

	// Epoch 2: every bucket on shard0.
	next := fe.m.Clone()
	next.Epoch++
	next.Ranges = []shardmap.Range{{Lo: 0, Hi: next.Buckets - 1, Shard: next.Shards[0].Name}}
	next.Shards[1].Empty = true
	ff.maps <- next
	select {
	case err := <-ff.applied:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the follower's map was not applied within 30s")
	}
	c.send(&pgproto3.Query{String: q})
	expect(t, "after", c.until(), "T D:conn1 C:SELECT 1 Z:I")
	expect(t, "shard0 received", filterLog(fe.shards[0].messages()), "1:Q:"+q)
	if m := fe.shards[1].messages(); len(m) > 0 {
		t.Fatalf("shard1 received %v after the map moved the key away", m)
	}

	ff.setLapsed(errors.New("catalog lease \"p\" is not live"))
	c.send(&pgproto3.Query{String: q})
	expect(t, "lapsed, keyed", c.until(), "E:57P03 Z:I")
	c.send(&pgproto3.Parse{Query: "SELECT note FROM accounts WHERE aid = $1"},
		&pgproto3.Bind{Parameters: [][]byte{[]byte(fmt.Sprint(k))}}, &pgproto3.Execute{}, &pgproto3.Sync{})
	expect(t, "lapsed, extended keyed", c.until(), "1 E:57P03 Z:I")
	c.send(&pgproto3.Query{String: "SELECT 1"})
	if got := c.until(); !strings.HasSuffix(got, " C:SELECT 1 Z:I") {
		t.Fatalf("lapsed, key-less: got %s, want the statement's answer", got)
	}
	ff.setLapsed(nil)
	c.send(&pgproto3.Query{String: q})
	expect(t, "renewed", c.until(), "T D:conn1 C:SELECT 1 Z:I")
}

// TestEngineFenceLater: a transaction whose backend opened without a key
// (a Describe, a key-less read) asserts at its first keyed statement, and
// once per bucket: in a simple query as a Query of its own, in a pipeline
// as a named Parse/Bind/Execute/Close that leaves the client's unnamed
// statement alone.
func TestEngineFenceLater(t *testing.T) {
	fe := startFake(t, true, fenceMode(proxy.FenceOn))
	c := fe.client(t)
	k := fe.keyOn(1)
	c.send(&pgproto3.Query{String: "BEGIN"})
	expect(t, "BEGIN", c.until(), "C:BEGIN Z:T")
	c.send(&pgproto3.Parse{Query: "UPDATE accounts SET note = 'x' WHERE aid = $1"}, &pgproto3.Describe{ObjectType: 'S'}, &pgproto3.Sync{})
	expect(t, "describe", c.until(), "1 t T Z:T")
	c.send(&pgproto3.Bind{Parameters: [][]byte{[]byte(fmt.Sprint(k))}}, &pgproto3.Execute{}, &pgproto3.Sync{})
	expect(t, "keyed", c.until(), "2 D:conn1 C:SELECT 1 Z:T")
	c.send(&pgproto3.Query{String: fmt.Sprintf("SELECT note FROM accounts WHERE aid = %d", k)})
	expect(t, "same key again", c.until(), "T D:conn1 C:SELECT 1 Z:T")
	c.send(&pgproto3.Query{String: "COMMIT"})
	expect(t, "COMMIT", c.until(), "C:COMMIT Z:I")
	var all string
	for _, f := range fe.shards {
		all += filterLog(f.messages()) + "\n"
	}
	if n := strings.Count(all, "pgshard_fence_enter"); n != 1 {
		t.Fatalf("%d asserts for one key in one transaction, want 1:\n%s", n, all)
	}
}
