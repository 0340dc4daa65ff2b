package verify

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sameAsJSON decodes b with fastLine and with encoding/json and fails if
// fastLine accepted it and the two disagree. It reports whether fastLine
// accepted it.
func sameAsJSON(t *testing.T, b []byte) bool {
	t.Helper()
	d := newDecoder()
	var fl line
	if !d.fastLine(b, &fl) {
		return false
	}
	var jl line
	if err := json.Unmarshal(b, &jl); err != nil {
		t.Fatalf("fastLine accepted %q, encoding/json refuses it: %v", b, err)
	}
	if !fl.fast {
		t.Fatalf("fastLine did not mark %q fast", b)
	}
	fl.fast = false
	if !reflect.DeepEqual(fl, jl) {
		fj, _ := json.Marshal(fl)
		jj, _ := json.Marshal(jl)
		t.Fatalf("fastLine and encoding/json disagree on %q:\nfast %+v\njson %+v\nfast %s\njson %s", b, fl, jl, fj, jj)
	}
	return true
}

// opLines are the op lines of every corpus history.
func opLines(t testing.TB) [][]byte {
	dirs, err := filepath.Glob("testdata/corpus/*/history.jsonl")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no corpus histories: %v", err)
	}
	var out [][]byte
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for l := range bytes.SplitSeq(b, []byte("\n")) {
			if bytes.Contains(l, []byte(`"type":"op"`)) {
				out = append(out, l)
			}
		}
	}
	return out
}

// TestFastLineCorpus: fastLine decodes the op lines of the corpus
// histories, exactly as encoding/json does, and the ones it leaves to
// encoding/json are only those with what it never decodes (escapes,
// repeated members).
func TestFastLineCorpus(t *testing.T) {
	ls := opLines(t)
	fast := 0
	for _, l := range ls {
		if sameAsJSON(t, l) {
			fast++
			continue
		}
		if json.Valid(l) && !bytes.Contains(l, []byte(`\`)) && !repeatedMember(l) {
			t.Errorf("fastLine left a plain op line to encoding/json: %s", l)
		}
	}
	t.Logf("%d of %d op lines decoded by fastLine", fast, len(ls))
	if fast < len(ls)*9/10 {
		t.Errorf("fastLine decoded only %d of %d op lines", fast, len(ls))
	}
}

// repeatedMember reports whether the object in b has a member twice.
func repeatedMember(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return false
		}
		if seen[k.(string)] {
			return true
		}
		seen[k.(string)] = true
	}
	return false
}

// TestFastLineLeaves: what fastLine must leave to encoding/json (which
// decodes it otherwise, or refuses it), and what it must decode.
func TestFastLineLeaves(t *testing.T) {
	const op = `{"type":"op","id":"r1/w0/2","kind":"commit","src":"w0","exe":"e1","shard":"shard0","t0":5,"t1":6,"outcome":"ok","exp":1,"new":2,` +
		`"emits":[{"event":"x","target":"e2","digest":"ab"}],"timers":[{"path":"t0","fire_at":1.5},{"path":"t1","cancel":true}],` +
		`"spawns":["c1"],"spawn_digests":["cd"],"armed":{"t0":1.5},"step":3,"active":"s","found":1,"seq":7,"fire_at":2e3,"now":-0.5,"n":0,"class":"57"}`
	if !sameAsJSON(t, []byte(op)) {
		t.Fatalf("fastLine left a plain op line: %s", op)
	}
	for _, c := range []struct{ name, from, to string }{
		{"escape in a string", `"id":"r1/w0/2"`, `"id":"r1\/w0/2"`},
		{"escape in a key", `"id":`, `"i\u0064":`},
		{"null", `"exe":"e1"`, `"exe":null`},
		{"member in another case", `"id":`, `"ID":`},
		{"unknown member folding to a known one", `"class":"57"`, `"Class":"57","Exe":"e9"`},
		{"repeated member", `"t0":5,`, `"t0":5,"t0":4,`},
		{"repeated member in an emit", `"event":"x",`, `"event":"x","event":"y",`},
		{"unknown member in an emit", `"digest":"ab"`, `"digest":"ab","n":1`},
		{"fraction in an integer", `"t0":5,`, `"t0":5.0,`},
		{"exponent in an integer", `"t0":5,`, `"t0":5e0,`},
		{"integer overflow", `"t0":5,`, `"t0":9223372036854775808,`},
		{"leading zero", `"t0":5,`, `"t0":05,`},
		{"float overflow", `"now":-0.5`, `"now":1e999`},
		{"string for a number", `"t0":5,`, `"t0":"5",`},
		{"number for a string", `"src":"w0"`, `"src":0`},
		{"number for a bool", `"cancel":true`, `"cancel":1`},
		{"another line type", `"type":"op"`, `"type":"fault"`},
		{"a member of another line type", `"class":"57"`, `"phase":"inject"`},
		{"invalid utf-8", `"src":"w0"`, "\"src\":\"w\xff\""},
		{"control character", `"src":"w0"`, "\"src\":\"w\t\""},
		{"invalid skipped value", `"class":"57"`, `"class":[1,}`},
		{"trailing garbage", `"class":"57"}`, `"class":"57"}x`},
		{"two objects", `"class":"57"}`, `"class":"57"}{}`},
		{"missing comma", `"t0":5,"t1"`, `"t0":5 "t1"`},
		{"trailing comma", `"class":"57"}`, `"class":"57",}`},
	} {
		l := strings.Replace(op, c.from, c.to, 1)
		if l == op {
			t.Fatalf("%s: %q not in the line", c.name, c.from)
		}
		if sameAsJSON(t, []byte(l)) {
			t.Errorf("%s: fastLine decoded %s", c.name, l)
		}
	}
	for _, c := range []struct{ name, from, to string }{
		{"whitespace", `"t0":5,`, " \"t0\" :\t5 ,\r"},
		{"unknown members of any JSON", `"class":"57"`, `"class":"5\"7","future":{"a":[1,{"b":null}],"c":"}"},"z":-1.5e3,"y":true`},
		{"empty arrays and objects", `"spawns":["c1"],"spawn_digests":["cd"],"armed":{"t0":1.5}`, `"spawns":[],"spawn_digests":[],"armed":{}`},
		{"a repeated armed path", `"armed":{"t0":1.5}`, `"armed":{"t0":1.5,"t0":2}`},
		{"non-ASCII", `"src":"w0"`, `"src":"wé"`},
		{"negative and zero", `"t0":5,`, `"t0":-0,`},
	} {
		l := strings.Replace(op, c.from, c.to, 1)
		if !sameAsJSON(t, []byte(l)) {
			t.Errorf("%s: fastLine left %s", c.name, l)
		}
	}
}

// FuzzFastLine: whatever fastLine decodes, encoding/json decodes to the
// same line; so a history is read the same whichever decodes its lines.
func FuzzFastLine(f *testing.F) {
	for i, l := range opLines(f) {
		if i%7 == 0 {
			f.Add(l)
		}
	}
	f.Add([]byte(`{"type":"op","id":"a","armed":{"t0":1.5,"t0":2},"spawns":[],"class":{"x":["}"]},"now":1e-7}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sameAsJSON(t, b)
	})
}
