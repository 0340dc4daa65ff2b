package config_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/viper"

	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/proxy/route"
)

func TestParseSchema(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "configs", "sharding.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := config.ParseSchema(raw)
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
		_, err := config.ParseSchema([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.doc, err, c.want)
		}
	}
	// Round trip.
	back, err := config.SchemaOf(want).Route()
	if err != nil || !reflect.DeepEqual(back, want) {
		t.Errorf("SchemaOf/Route round trip: %+v, %v", back, err)
	}
	// Type defaults to text; bigint means int8.
	s, err = config.ParseSchema([]byte("tables: [{table: t, column: c}, {table: u, column: k, type: bigint}]\nhint_type: int8\n"))
	if err != nil || s.Tables[0].Type != route.KeyText || s.Tables[1].Type != route.KeyInt8 || s.HintType != route.KeyInt8 {
		t.Errorf("defaults: %+v, %v", s, err)
	}
}

// TestSchemaViper: a config section embedding Schema decodes
// with viper from the defaults and from a file.
func TestSchemaViper(t *testing.T) {
	type section struct {
		Sharding config.Schema `mapstructure:"sharding"`
	}
	v := viper.New()
	v.SetDefault("sharding", config.DefaultSchema())
	var got section
	if err := v.UnmarshalExact(&got); err != nil {
		t.Fatal(err)
	}
	if s, err := got.Sharding.Route(); err != nil || !reflect.DeepEqual(s.Tables, route.DefaultSchema().Tables) {
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
	s, err := got.Sharding.Route()
	if err != nil {
		t.Fatal(err)
	}
	want := route.Schema{Tables: []route.TableKey{{Table: "accounts", Column: "k", Type: route.KeyInt8, Position: 1}}, Global: []string{"plans"}, HintType: route.KeyInt8}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("from a file: %+v, want %+v", s, want)
	}
}
