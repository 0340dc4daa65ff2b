package store_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/store"
)

func TestExecutionMarshal(t *testing.T) {
	tests := []struct {
		name string
		exe  store.Execution
		want string
	}{
		{
			name: "zero value: nulls, empty path, empty context",
			exe:  store.Execution{},
			want: `{"id":"","definition_id":"","version":0,"status":"","outcome":null,"active_path":[],"parent_id":null,"context":{}}`,
		},
		{
			name: "every field",
			exe: store.Execution{
				ID: "a1", DefinitionID: "order", Version: 7, Status: "running",
				Outcome: json.RawMessage(`{"ok": true}`), ActivePath: []string{"root", "root.paid"},
				ParentID: "p0", Context: json.RawMessage(`{"n":1}`),
			},
			want: `{"id":"a1","definition_id":"order","version":7,"status":"running","outcome":{"ok":true},"active_path":["root","root.paid"],"parent_id":"p0","context":{"n":1}}`,
		},
		{
			name: "extra fields sorted after the known ones; known names in Extra ignored",
			exe: store.Execution{ID: "x", Version: 1, Extra: map[string]json.RawMessage{
				"zeta": json.RawMessage(`[1, 2]`), "alpha": json.RawMessage(`"a"`), "version": json.RawMessage(`99`), "nil": nil,
			}},
			want: `{"id":"x","definition_id":"","version":1,"status":"","outcome":null,"active_path":[],"parent_id":null,"context":{},"alpha":"a","nil":null,"zeta":[1,2]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.exe)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestExecutionMarshalInvalidJSON(t *testing.T) {
	for name, exe := range map[string]store.Execution{
		"outcome": {ID: "a", Outcome: json.RawMessage(`{`)},
		"context": {ID: "a", Context: json.RawMessage(`nope`)},
		"extra":   {ID: "a", Extra: map[string]json.RawMessage{"k": json.RawMessage(`[`)}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := json.Marshal(exe)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), "execution a") {
				t.Errorf("error %q does not name the execution", err)
			}
		})
	}
}

func TestExecutionUnmarshal(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    store.Execution
		wantErr bool
	}{
		{
			name: "known and unknown fields",
			in:   `{"id":"a","definition_id":"d","version":3,"status":"done","outcome":"ok","active_path":["s"],"parent_id":"p","context":{"k":[1]},"history":[{"e":1}],"created_at":1.5}`,
			want: store.Execution{ID: "a", DefinitionID: "d", Version: 3, Status: "done", Outcome: json.RawMessage(`"ok"`),
				ActivePath: []string{"s"}, ParentID: "p", Context: json.RawMessage(`{"k":[1]}`),
				Extra: map[string]json.RawMessage{"history": json.RawMessage(`[{"e":1}]`), "created_at": json.RawMessage(`1.5`)}},
		},
		{
			name: "nulls and missing fields",
			in:   `{"id":"a","outcome":null,"parent_id":null,"context":null}`,
			want: store.Execution{ID: "a"},
		},
		{name: "not an object", in: `[1]`, wantErr: true},
		{name: "null document", in: `null`, wantErr: true},
		{name: "wrong type", in: `{"version":"seven"}`, wantErr: true},
		{name: "truncated", in: `{"id":"a"`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got store.Execution
			err := json.Unmarshal([]byte(tt.in), &got)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("no error, got %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestExecutionClone(t *testing.T) {
	e := &store.Execution{ID: "a", ActivePath: []string{"x"}, Context: json.RawMessage(`{}`),
		Extra: map[string]json.RawMessage{"k": json.RawMessage(`1`)}}
	c := e.Clone()
	if !reflect.DeepEqual(c, e) {
		t.Fatalf("clone differs: %+v", c)
	}
	c.ActivePath[0] = "y"
	c.Context[0] = '['
	c.Extra["k"][0] = '2'
	if e.ActivePath[0] != "x" || e.Context[0] != '{' || e.Extra["k"][0] != '1' {
		t.Error("the clone shares memory with the original")
	}
}

// FuzzExecutionJSON: any document that decodes re-encodes, and the
// re-encoding decodes to the same Execution (the store never loses or
// changes what it carries).
func FuzzExecutionJSON(f *testing.F) {
	f.Add([]byte(`{"id":"a","definition_id":"d","version":3,"status":"done","outcome":"ok","active_path":["s"],"parent_id":"p","context":{"k":[1]},"extra":{"x":null}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"outcome":null,"context":[],"z":"\u00e9"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var e store.Execution
		if err := json.Unmarshal(data, &e); err != nil {
			return
		}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("decoded %q but cannot encode it: %v", data, err)
		}
		var e2 store.Execution
		if err := json.Unmarshal(b, &e2); err != nil {
			t.Fatalf("cannot decode own encoding %s: %v", b, err)
		}
		b2, err := json.Marshal(e2)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != string(b2) {
			t.Fatalf("encoding not stable:\n%s\n%s", b, b2)
		}
	})
}

func TestListOptionsPageLimit(t *testing.T) {
	for _, tt := range []struct{ limit, want int }{
		{0, store.DefaultListLimit}, {-5, store.DefaultListLimit}, {1, 1}, {store.MaxListLimit, store.MaxListLimit},
		{store.MaxListLimit + 1, store.MaxListLimit},
	} {
		if got := (store.ListOptions{Limit: tt.limit}).PageLimit(); got != tt.want {
			t.Errorf("Limit %d: PageLimit %d, want %d", tt.limit, got, tt.want)
		}
	}
}

func TestTimerConstructors(t *testing.T) {
	if got := store.Schedule("a.b", 12.5); got != (store.TimerOp{Action: store.TimerSchedule, Path: "a.b", FireAt: 12.5}) {
		t.Errorf("Schedule: %+v", got)
	}
	if got := store.Cancel("a.b"); got != (store.TimerOp{Action: store.TimerCancel, Path: "a.b"}) {
		t.Errorf("Cancel: %+v", got)
	}
	if store.TimerSchedule.String() != "schedule" || store.TimerCancel.String() != "cancel" || store.TimerAction(9).String() != "TimerAction(9)" {
		t.Error("TimerAction.String")
	}
}
