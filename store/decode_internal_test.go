package store

import (
	"encoding/json"
	"reflect"
	"testing"
)

// decodeSeeds are documents for both decode paths: the usual ones (the
// fast path must take them) and every reason to fall back.
var decodeSeeds = []struct {
	doc  string
	fast bool // decodeKnown must accept it
}{
	{`{"id":"a","definition_id":"d","version":3,"status":"running","outcome":null,"active_path":["s"],"parent_id":null,"context":{"step":1,"payload":"x,}]\"{"}}`, true},
	{` { "id" : "a" , "context" : [ {"k": [1, {"z": "}"}]} ] , "version":1 } `, true},
	{`{}`, true},
	{`{"id":"a","outcome":"ok","parent_id":"p","context":{"k":[1]}}`, true},
	{`{"outcome":true,"context":-1.5e3,"status":"\u00e9\"\\"}`, true},
	{`{"id":"a","history":[1]}`, false}, // an extra field
	{`{"ID":"a"}`, false},               // a key matched only case-insensitively
	{`{"i\u0064":"a"}`, false},          // an escaped key
	{`{"id":"a","id":"b"}`, true},       // duplicate: the last wins on both paths
	{`null`, false},                     // not an object
	{`[1]`, false},                      // not an object
	{`{"version":"seven"}`, false},      // does not fit executionDoc
	{`{"id":"a"`, false},                // truncated
	{`{"context":{"a":{"b":[]}},"x":{}}`, false},
}

// TestDecodeKnownAgrees: the one-pass decode gives the general path's
// Execution whenever it accepts a document, and accepts what MarshalJSON
// writes without Extra.
func TestDecodeKnownAgrees(t *testing.T) {
	for _, sd := range decodeSeeds {
		got, ok := decodeKnown([]byte(sd.doc))
		if ok != sd.fast {
			t.Errorf("%s: decodeKnown ok=%v, want %v", sd.doc, ok, sd.fast)
		}
		if !ok {
			continue
		}
		var want Execution
		if err := want.decodeGeneral([]byte(sd.doc)); err != nil {
			t.Fatalf("%s: the general path fails (%v) where decodeKnown accepted", sd.doc, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n fast    %+v\n general %+v", sd.doc, got, want)
		}
	}
	b, err := json.Marshal(Execution{ID: "a", Version: 2, Status: "running", ActivePath: []string{"s"},
		Context: json.RawMessage(`{"step":2,"payload":"<&>"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := decodeKnown(b); !ok {
		t.Errorf("the fast path refuses MarshalJSON's own document %s", b)
	}
}

// FuzzDecodeKnown: for any input, the one-pass decode either declines or
// agrees with the general path.
func FuzzDecodeKnown(f *testing.F) {
	for _, sd := range decodeSeeds {
		f.Add([]byte(sd.doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := decodeKnown(data)
		if !ok {
			return
		}
		var want Execution
		if err := want.decodeGeneral(data); err != nil {
			t.Fatalf("%q: the general path fails (%v) where decodeKnown accepted", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n fast    %+v\n general %+v", data, got, want)
		}
	})
}
