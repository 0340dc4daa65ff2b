package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// hostCall is one recorded call of a Host method (testdata/host.json,
// written by the proxy's TestAdminConsoleHostRecord).
type hostCall struct {
	Method string          `json:"method"`
	Args   []string        `json:"args,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Err    string          `json:"err,omitempty"`
}

// replayHost answers the console's calls from a record, in order, and
// fails the test on a call the record does not have next.
type replayHost struct {
	t     *testing.T
	calls []hostCall
}

func (r *replayHost) next(method string, args []string, res any) error {
	r.t.Helper()
	if len(r.calls) == 0 {
		r.t.Fatalf("unexpected call %s(%v): the record has no more", method, args)
	}
	c := r.calls[0]
	r.calls = r.calls[1:]
	if c.Method != method || !slices.Equal(c.Args, args) {
		r.t.Fatalf("call %s(%v), the record has %s(%v)", method, args, c.Method, c.Args)
	}
	if res != nil && c.Result != nil {
		if err := json.Unmarshal(c.Result, res); err != nil {
			r.t.Fatalf("%s: %v", method, err)
		}
	}
	if c.Err != "" {
		return errors.New(c.Err)
	}
	return nil
}

func (r *replayHost) Version() (v string)       { r.next("Version", nil, &v); return v }
func (r *replayHost) Config() (v []ConfigRow)   { r.next("Config", nil, &v); return v }
func (r *replayHost) Pools() (v Pools)          { r.next("Pools", nil, &v); return v }
func (r *replayHost) Map() (v Map)              { r.next("Map", nil, &v); return v }
func (r *replayHost) Clients() (v []Client)     { r.next("Clients", nil, &v); return v }
func (r *replayHost) Servers() (v []Server)     { r.next("Servers", nil, &v); return v }
func (r *replayHost) Lists() (v Lists)          { r.next("Lists", nil, &v); return v }
func (r *replayHost) Users() (v []User)         { r.next("Users", nil, &v); return v }
func (r *replayHost) Routes() (v []Route)       { r.next("Routes", nil, &v); return v }
func (r *replayHost) ShardNames() (v []string)  { r.next("ShardNames", nil, &v); return v }
func (r *replayHost) Resume(shards []string)    { r.next("Resume", shards, nil) }
func (r *replayHost) Reconnect(shards []string) { r.next("Reconnect", shards, nil) }
func (r *replayHost) Kill(shards []string)      { r.next("Kill", shards, nil) }
func (r *replayHost) Shutdown()                 { r.next("Shutdown", nil, nil) }
func (r *replayHost) DisableLogins(disabled bool) {
	r.next("DisableLogins", []string{fmt.Sprint(disabled)}, nil)
}
func (r *replayHost) Reload(context.Context) (v string, err error) {
	err = r.next("Reload", nil, &v)
	return v, err
}
func (r *replayHost) Pause(_ context.Context, shards []string) error {
	return r.next("Pause", shards, nil)
}
func (r *replayHost) WaitClose(_ context.Context, shards []string) error {
	return r.next("WaitClose", shards, nil)
}

// describe renders backend messages one a line, as the proxy's golden
// test does: type and payload, quoted.
func describe(t *testing.T, b []byte) string {
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

// TestConsoleGolden replays the proxy's recorded Host answers
// (testdata/host.json) and compares every command's bytes with
// testdata/console.golden, which the console wrote before it moved here:
// the console alone, without a proxy, answers byte for byte the same.
func TestConsoleGolden(t *testing.T) {
	raw, err := os.ReadFile("testdata/host.json")
	if err != nil {
		t.Fatal(err)
	}
	var record []struct {
		Query string     `json:"query"`
		Calls []hostCall `json:"calls"`
	}
	if err := json.Unmarshal(raw, &record); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/console.golden")
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, q := range record {
		h := &replayHost{t: t, calls: q.Calls}
		fmt.Fprintf(&sb, "== %q\n%s", q.Query, describe(t, Query(context.Background(), h, q.Query, nil)))
		if len(h.calls) != 0 {
			t.Errorf("%q: the console did not make the recorded calls %v", q.Query, h.calls)
		}
	}
	if len(record) < 40 || !strings.Contains(string(want), `== "SHOW SHARDS"`) {
		t.Fatalf("the record has %d queries: the golden files are incomplete", len(record))
	}
	gl, wl := strings.Split(sb.String(), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(gl), len(wl)) {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("console output differs from testdata/console.golden at line %d:\n got: %s\nwant: %s", i+1, g, w)
		}
	}
}

// cancelHost is a Host whose Pause waits for its context to end.
type cancelHost struct {
	replayHost
	started chan struct{}
}

func (c *cancelHost) ShardNames() []string { return []string{"shard0"} }
func (c *cancelHost) Pause(ctx context.Context, _ []string) error {
	close(c.started)
	<-ctx.Done()
	return ctx.Err()
}

// TestQueryCanceled: a command a cancel request stops (ErrCanceled as the
// context's cause) fails with 57014; the session's context ending instead
// is no cancel request, and keeps the command's own error.
func TestQueryCanceled(t *testing.T) {
	for _, tc := range []struct {
		cause error
		want  string
	}{
		{ErrCanceled, pgwire.CodeQueryCanceled},
		{nil, pgwire.CodeProtocolViolation},
	} {
		h := &cancelHost{replayHost: replayHost{t: t}, started: make(chan struct{})}
		ctx, cancel := context.WithCancelCause(context.Background())
		done := make(chan []byte, 1)
		go func() { done <- Query(ctx, h, "PAUSE", nil) }()
		<-h.started
		cancel(tc.cause)
		out := <-done
		if !strings.Contains(describe(t, out), "C"+tc.want+`\x00`) {
			t.Errorf("cause %v: got %s, want SQLSTATE %s", tc.cause, describe(t, out), tc.want)
		}
	}
}
