package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The hand-read emitted events decode exactly as encoding/json decodes
// them, and every document the fast path does not read goes to
// encoding/json (the fast path must be taken for the engine's own).
func TestParseRelayEventMatchesJSON(t *testing.T) {
	own := fmt.Sprintf(`{"id":%q,"name":"ping","from":%q,"op":%q,"emitted_ns":%d}`,
		"lg1-w3-7-e0", "exe-000012", "lg1/w3/9", time.Unix(1700000000, 5).UnixNano())
	if _, ok := scanRelayEvent(own); !ok {
		t.Fatalf("the engine's own event %s is not read by the fast path", own)
	}
	docs := []string{
		own,
		`{"id":"a","op":"b","emitted_ns":-12}`,
		`{"id":"a","id":"b"}`,
		`{"emitted_ns":0}`,
		`{}`, ``, `{`, `}`, `[]`, `null`,
		`{"id":"a" }`, `{ "id":"a"}`, `{"id":"a",}`, `{"id":"a""op":"b"}`,
		`{"ID":"a"}`, `{"Op":"x","id":"a"}`, `{"other":1,"id":"a"}`,
		`{"id":"a\"b"}`, `{"id":"a\\b"}`, `{"id":"é"}`, "{\"id\":\"a\x01\"}",
		`{"emitted_ns":01}`, `{"emitted_ns":1.5}`, `{"emitted_ns":1e3}`, `{"emitted_ns":-}`,
		`{"emitted_ns":99999999999999999999}`, `{"emitted_ns":"12"}`, `{"id":12}`,
		`{"id":"a","name":"ping","from":"x"}`, `{"name":1}`,
	}
	for _, d := range docs {
		got, gotErr := parseRelayEvent(d)
		var want relayEvent
		wantErr := json.Unmarshal([]byte(d), &want)
		if (gotErr != nil) != (wantErr != nil) || got != want {
			t.Errorf("%q: got %+v, %v; encoding/json %+v, %v", d, got, gotErr, want, wantErr)
		}
	}
}

// A parent's first call gets a context of its own; from the second on,
// calls share one that leaves each at least the timeout and at most 9/8
// of it, and ends with its parent.
func TestTimeoutTargetSharedDeadline(t *testing.T) {
	const d = 8 * time.Second
	w := withTimeout(nil, d).(*timeoutTarget)
	parent, cancel := context.WithCancel(context.Background())
	first, release := w.ctx(parent) // a parent's first call: its own context
	release()
	if !errors.Is(first.Err(), context.Canceled) {
		t.Fatalf("a first call's own context was not released: %v", first.Err())
	}
	var shared context.Context
	for range 3 {
		ctx, release := w.ctx(parent)
		t1 := time.Now()
		dl, ok := ctx.Deadline()
		if !ok || dl.Before(t1.Add(d)) || dl.After(t1.Add(d+d/8)) {
			t.Fatalf("deadline %v (ok %v): want within [%v, %v]", dl, ok, t1.Add(d), t1.Add(d+d/8))
		}
		release()
		if ctx.Err() != nil {
			t.Fatalf("released shared context ended: %v", ctx.Err())
		}
		if shared == nil {
			shared = ctx
		} else if ctx != shared {
			t.Fatalf("calls on the same parent within d/8 got different contexts")
		}
	}
	parent2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	_, rel := w.ctx(parent2) // noted: the next call shares
	rel()
	other, release := w.ctx(parent2)
	defer release()
	ctx, release2 := w.ctx(parent)
	defer release2()
	cancel()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("parent canceled, call context: %v", ctx.Err())
	}
	if other.Err() != nil {
		t.Fatalf("another parent's context ended: %v", other.Err())
	}
}

// A worker step's documents (trace entry, emitted events, spawn context)
// are byte for byte what fmt.Sprintf with %q made of the same values.
func TestCommitForDocuments(t *testing.T) {
	o := DefaultOptions()
	o.Workload.TimerDelay = time.Second
	r := &runner{o: o, payload: "x"}
	for _, ids := range [][3]string{{"exe-1", "lg1-w0-1", "lg1/w0/1"}, {`é"\`, "ev\n\x01", "op\u2028"}} {
		exeID, event, opID := ids[0], ids[1], ids[2]
		exe := &Execution{ID: exeID, State: State{Step: 6, Active: "idle"}}
		before := time.Now().UnixNano()
		c := r.commitFor(exe, event, plan{emits: []string{"a", "b"}, spawn: true}, opID)
		after := time.Now().UnixNano()
		if want := fmt.Sprintf(`{"op":%q,"step":%d,"event":%q,"active":%q}`, opID, c.Exe.State.Step, event, c.Exe.State.Active); c.Trace != want {
			t.Errorf("trace %s, want %s", c.Trace, want)
		}
		if len(c.Emits) != 2 {
			t.Fatalf("emits %+v", c.Emits)
		}
		for k, em := range c.Emits {
			// %q is not JSON for every string (\x01): the time is read
			// from the end of the document.
			_, tail, _ := strings.Cut(em.Event, `"emitted_ns":`)
			ns, err := strconv.ParseInt(strings.TrimSuffix(tail, "}"), 10, 64)
			if err != nil || ns < before || ns > after {
				t.Fatalf("emit %s: emitted_ns %d %v", em.Event, ns, err)
			}
			id := event + "-e" + fmt.Sprint(k)
			want := fmt.Sprintf(`{"id":%q,"name":"ping","from":%q,"op":%q,"emitted_ns":%d}`, id, exeID, opID, ns)
			if em.Event != want || em.ID != id {
				t.Errorf("emit %s (id %s), want %s (id %s)", em.Event, em.ID, want, id)
			}
		}
		if want := fmt.Sprintf(`{"op":%q}`, opID); len(c.Spawns) != 1 || c.Spawns[0].Context != want {
			t.Errorf("spawns %+v, want context %s", c.Spawns, want)
		}
	}
}
