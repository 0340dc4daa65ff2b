package route_test

import (
	"strings"
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
)

func TestSchemaValidate(t *testing.T) {
	cases := []struct {
		name   string
		schema route.Schema
		want   []string // substrings of the error; none = valid
	}{
		{"default", route.DefaultSchema(), nil},
		{"empty", route.Schema{}, []string{"names no keyed table"}},
		{"bad names", route.Schema{Tables: []route.TableKey{{Table: "Exec", Column: ""}, {Table: "a.b", Column: "x"}}},
			[]string{`tables[0]: table "Exec"`, `tables[0] (Exec): column ""`, `tables[1]: table "a.b"`}},
		{"two placement keys", route.Schema{Tables: []route.TableKey{{Table: "t", Column: "a"}, {Table: "t", Column: "b", Type: route.KeyInt8}}},
			[]string{"second placement key b"}},
		{"duplicate column", route.Schema{Tables: []route.TableKey{{Table: "t", Column: "a"}, {Table: "t", Column: "a", Type: route.KeySeq}}},
			[]string{"t.a is already listed"}},
		{"keyed and global", route.Schema{Tables: []route.TableKey{{Table: "t", Column: "a"}}, Global: []string{"t", "g", "g"}},
			[]string{"keyed and also listed in global", "global[2]: table g is listed twice"}},
		{"bad function", route.Schema{Functions: []route.FuncKey{{Function: "f", Arg: -1}, {Function: "f", Type: 9}}},
			[]string{"arg -1", "unknown key type 9", "already listed"}},
		{"bad hint type", route.Schema{Tables: []route.TableKey{{Table: "t", Column: "a"}}, HintType: route.KeySeq}, []string{"hint_type"}},
		{"bad position", route.Schema{Tables: []route.TableKey{{Table: "t", Column: "a", Position: -1}}}, []string{"position -1"}},
	}
	for _, c := range cases {
		err := c.schema.Validate()
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: valid, want %q", c.name, c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\n does not mention %q", c.name, err, w)
			}
		}
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := route.New(nil, route.DefaultSchema(), route.Options{}); err == nil {
		t.Error("New accepted a nil map")
	}
	if _, err := route.New(testMap(t), route.Schema{}, route.Options{}); err == nil {
		t.Error("New accepted an empty schema")
	}
	m := testMap(t).Clone()
	m.Ranges = m.Ranges[1:]
	if _, err := route.New(m, route.DefaultSchema(), route.Options{}); err == nil {
		t.Error("New accepted a map with a gap")
	}
}
