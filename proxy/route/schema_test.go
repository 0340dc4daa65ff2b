package route_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/viper"

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

func TestParseSchema(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "configs", "sharding.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := route.ParseSchema(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := route.DefaultSchema()
	if !reflect.DeepEqual(s.Tables, want.Tables) || !reflect.DeepEqual(s.Functions, want.Functions) {
		t.Errorf("configs/sharding.yaml is not the default schema:\n got  %+v\n want %+v", s, want)
	}
	for _, c := range []struct{ doc, want string }{
		{"tables: [{table: t, column: c, typ: text}]", "field typ not found"},
		{"tables: [{table: t, column: c, type: uuid}]", `tables[0].type: unknown key type "uuid"`},
		{"", "empty document"},
		{"tables: [{table: t, column: c}]\n---\nglobal: [x]\n", "exactly one YAML document"},
		{"functions: [{function: f, arg: 0, type: seqq}]", "functions[0].type"},
		{"tables: [{table: t, column: c}]\nhint_type: text2", "hint_type"},
	} {
		_, err := route.ParseSchema([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.doc, err, c.want)
		}
	}
	// Round trip.
	back, err := want.Config().ToSchema()
	if err != nil || !reflect.DeepEqual(back, want) {
		t.Errorf("Config/ToSchema round trip: %+v, %v", back, err)
	}
	// Type defaults to text; bigint means int8.
	s, err = route.ParseSchema([]byte("tables: [{table: t, column: c}, {table: u, column: k, type: bigint}]\nhint_type: int8\n"))
	if err != nil || s.Tables[0].Type != route.KeyText || s.Tables[1].Type != route.KeyInt8 || s.HintType != route.KeyInt8 {
		t.Errorf("defaults: %+v, %v", s, err)
	}
}

// TestSchemaConfigViper: a config section embedding SchemaConfig decodes
// with viper from the defaults and from a file.
func TestSchemaConfigViper(t *testing.T) {
	type section struct {
		Sharding route.SchemaConfig `mapstructure:"sharding"`
	}
	v := viper.New()
	v.SetDefault("sharding", route.DefaultSchemaConfig())
	var got section
	if err := v.UnmarshalExact(&got); err != nil {
		t.Fatal(err)
	}
	if s, err := got.Sharding.ToSchema(); err != nil || !reflect.DeepEqual(s.Tables, route.DefaultSchema().Tables) {
		t.Fatalf("defaults: %+v, %v", s, err)
	}
	v = viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(strings.NewReader("sharding:\n  tables:\n    - {table: accounts, column: k, type: int8, position: 1}\n  global: [plans]\n  hint_type: int8\n")); err != nil {
		t.Fatal(err)
	}
	got = section{}
	if err := v.UnmarshalExact(&got); err != nil {
		t.Fatal(err)
	}
	s, err := got.Sharding.ToSchema()
	if err != nil {
		t.Fatal(err)
	}
	want := route.Schema{Tables: []route.TableKey{{Table: "accounts", Column: "k", Type: route.KeyInt8, Position: 1}}, Global: []string{"plans"}, HintType: route.KeyInt8}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("from a file: %+v, want %+v", s, want)
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
