package route

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Validate checks s and reports every problem at once, each naming the
// entry at fault: empty or non-lowercase names, unknown key types, a table
// with two placement keys (text/int8) or a column listed twice, a table
// that is both keyed and global, a negative function argument.
func (s Schema) Validate() error {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if len(s.Tables) == 0 && len(s.Functions) == 0 {
		add("tables: the schema names no keyed table or function (nothing would be sharded)")
	}
	placement := map[string]int{}
	cols := map[[2]string]int{}
	for i, t := range s.Tables {
		where := fmt.Sprintf("tables[%d]", i)
		if !validIdent(t.Table) {
			add("%s: table %q must be a non-empty lowercase name", where, t.Table)
		}
		if !validIdent(t.Column) {
			add("%s (%s): column %q must be a non-empty lowercase name", where, t.Table, t.Column)
		}
		if t.Type < KeyText || t.Type > KeySeq {
			add("%s (%s.%s): unknown key type %d", where, t.Table, t.Column, t.Type)
		}
		if t.Position < 0 {
			add("%s (%s.%s): position %d must be 1-based (0 = unknown)", where, t.Table, t.Column, t.Position)
		}
		if j, dup := cols[[2]string{t.Table, t.Column}]; dup {
			add("%s: column %s.%s is already listed in tables[%d]", where, t.Table, t.Column, j)
		} else {
			cols[[2]string{t.Table, t.Column}] = i
		}
		if t.Type != KeySeq {
			if j, dup := placement[t.Table]; dup {
				add("%s: table %s has a second placement key %s (tables[%d] is %s.%s); a table has at most one text/int8 key",
					where, t.Table, t.Column, j, s.Tables[j].Table, s.Tables[j].Column)
			} else {
				placement[t.Table] = i
			}
		}
		if slices.Contains(s.Global, t.Table) {
			add("%s: table %s is keyed and also listed in global", where, t.Table)
		}
	}
	fns := map[string]int{}
	for i, f := range s.Functions {
		where := fmt.Sprintf("functions[%d]", i)
		if !validIdent(f.Function) {
			add("%s: function %q must be a non-empty lowercase name", where, f.Function)
		}
		if f.Arg < 0 {
			add("%s (%s): arg %d must be a 0-based argument position", where, f.Function, f.Arg)
		}
		if f.Type < KeyText || f.Type > KeySeq {
			add("%s (%s): unknown key type %d", where, f.Function, f.Type)
		}
		if j, dup := fns[f.Function]; dup {
			add("%s: function %s is already listed in functions[%d]", where, f.Function, j)
		} else {
			fns[f.Function] = i
		}
	}
	seen := map[string]bool{}
	for i, g := range s.Global {
		if !validIdent(g) {
			add("global[%d]: table %q must be a non-empty lowercase name", i, g)
		}
		if seen[g] {
			add("global[%d]: table %s is listed twice", i, g)
		}
		seen[g] = true
	}
	if s.HintType != KeyText && s.HintType != KeyInt8 {
		add("hint_type: must be text or int8 (got %s)", s.HintType)
	}
	if len(p) > 0 {
		return errors.New("sharding schema: " + strings.Join(p, "; "))
	}
	return nil
}

// validIdent accepts what Postgres folds an unquoted identifier to, plus
// anything a quoted identifier may hold except upper case (the schema
// names tables as the parser reports them: lowercase unless quoted).
func validIdent(s string) bool {
	if s == "" || s != strings.TrimSpace(s) || strings.ContainsAny(s, ".\x00") {
		return false
	}
	return s == strings.ToLower(s)
}

// SchemaConfig is the sharding schema as configuration: a YAML document or
// a section of another config (the tags suit viper/mapstructure and YAML).
//
//	tables:
//	  - {table: executions, column: id, type: text, position: 1}
//	  - {table: outbox, column: seq, type: seq}
//	functions:
//	  - {function: harel_commit_cas, arg: 0, type: text}
//	global: [definitions]
type SchemaConfig struct {
	// Tables are the keyed columns (Schema.Tables).
	Tables []TableKeyConfig `mapstructure:"tables" yaml:"tables" json:"tables"`
	// Functions are the keyed function arguments (Schema.Functions).
	Functions []FuncKeyConfig `mapstructure:"functions" yaml:"functions" json:"functions"`
	// Global lists tables that are identical on every shard (Schema.Global).
	Global []string `mapstructure:"global" yaml:"global" json:"global"`
	// HintType is "text" (default when empty) or "int8".
	HintType string `mapstructure:"hint_type" yaml:"hint_type,omitempty" json:"hint_type,omitempty"`
}

// TableKeyConfig is one keyed column: type is "text", "int8" (or
// "bigint") or "seq"; position is the column's 1-based place in the table
// (optional; needed to route an INSERT without a column list).
type TableKeyConfig struct {
	Table    string `mapstructure:"table" yaml:"table" json:"table"`                              // unqualified, lowercase
	Column   string `mapstructure:"column" yaml:"column" json:"column"`                           // lowercase
	Type     string `mapstructure:"type" yaml:"type" json:"type"`                                 // text (default), int8/bigint or seq
	Position int    `mapstructure:"position" yaml:"position,omitempty" json:"position,omitempty"` // 1-based, 0 = unknown
}

// FuncKeyConfig names the 0-based argument of a function that carries the key.
type FuncKeyConfig struct {
	Function string `mapstructure:"function" yaml:"function" json:"function"` // unqualified, lowercase
	Arg      int    `mapstructure:"arg" yaml:"arg" json:"arg"`                // 0-based
	Type     string `mapstructure:"type" yaml:"type" json:"type"`             // text (default), int8/bigint or seq
}

// ParseKeyType parses a key type name: text, int8 (bigint) or seq.
func ParseKeyType(s string) (KeyType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "text", "":
		return KeyText, nil
	case "int8", "bigint":
		return KeyInt8, nil
	case "seq":
		return KeySeq, nil
	}
	return 0, fmt.Errorf("unknown key type %q (want text, int8 or seq)", s)
}

// Validate checks the configuration, naming the key of each problem
// ("tables[2].type: ...").
func (c SchemaConfig) Validate() error {
	_, err := c.ToSchema()
	return err
}

// ToSchema converts and validates the configuration.
func (c SchemaConfig) ToSchema() (Schema, error) {
	var s Schema
	var p []string
	for i, t := range c.Tables {
		kt, err := ParseKeyType(t.Type)
		if err != nil {
			p = append(p, fmt.Sprintf("tables[%d].type: %s", i, err))
		}
		s.Tables = append(s.Tables, TableKey{Table: t.Table, Column: t.Column, Type: kt, Position: t.Position})
	}
	for i, f := range c.Functions {
		kt, err := ParseKeyType(f.Type)
		if err != nil {
			p = append(p, fmt.Sprintf("functions[%d].type: %s", i, err))
		}
		s.Functions = append(s.Functions, FuncKey{Function: f.Function, Arg: f.Arg, Type: kt})
	}
	s.Global = slices.Clone(c.Global)
	if c.HintType != "" {
		kt, err := ParseKeyType(c.HintType)
		if err != nil {
			p = append(p, fmt.Sprintf("hint_type: %s", err))
		}
		s.HintType = kt
	}
	if len(p) > 0 {
		return Schema{}, errors.New("sharding schema: " + strings.Join(p, "; "))
	}
	if err := s.Validate(); err != nil {
		return Schema{}, err
	}
	return s, nil
}

// Config returns s as configuration (the inverse of ToSchema).
func (s Schema) Config() SchemaConfig {
	var c SchemaConfig
	for _, t := range s.Tables {
		c.Tables = append(c.Tables, TableKeyConfig{Table: t.Table, Column: t.Column, Type: t.Type.String(), Position: t.Position})
	}
	for _, f := range s.Functions {
		c.Functions = append(c.Functions, FuncKeyConfig{Function: f.Function, Arg: f.Arg, Type: f.Type.String()})
	}
	c.Global = slices.Clone(s.Global)
	if s.HintType != KeyText {
		c.HintType = s.HintType.String()
	}
	return c
}

// DefaultSchemaConfig is DefaultSchema as configuration: the default of a
// config section that embeds SchemaConfig.
func DefaultSchemaConfig() SchemaConfig { return DefaultSchema().Config() }

// ParseSchema decodes a YAML sharding schema (see SchemaConfig), rejecting
// unknown keys, and validates it.
func ParseSchema(data []byte) (Schema, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c SchemaConfig
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return Schema{}, errors.New("decode sharding schema: empty document")
		}
		return Schema{}, fmt.Errorf("decode sharding schema: %s", strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " "))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Schema{}, errors.New("decode sharding schema: the file must hold exactly one YAML document")
	}
	return c.ToSchema()
}

// compiled is a Schema indexed for analysis.
type compiled struct {
	tables   map[string]*tableInfo
	funcs    map[string]FuncKey
	global   map[string]bool
	hintType KeyType
}

// tableInfo is one keyed table: its key columns, the placement key first.
type tableInfo struct {
	name  string
	keys  []keyCol
	place int // index in keys of the placement key, -1 if the table has only seq keys
}

type keyCol struct {
	col string
	typ KeyType
	pos int
}

func (t *tableInfo) keyIndex(col string) int {
	for i, k := range t.keys {
		if k.col == col {
			return i
		}
	}
	return -1
}

func compile(s Schema) *compiled {
	c := &compiled{tables: map[string]*tableInfo{}, funcs: map[string]FuncKey{}, global: map[string]bool{}, hintType: s.HintType}
	for _, t := range s.Tables {
		ti := c.tables[t.Table]
		if ti == nil {
			ti = &tableInfo{name: t.Table, place: -1}
			c.tables[t.Table] = ti
		}
		ti.keys = append(ti.keys, keyCol{col: t.Column, typ: t.Type, pos: t.Position})
		if t.Type != KeySeq {
			ti.place = len(ti.keys) - 1
		}
	}
	for _, f := range s.Functions {
		c.funcs[f.Function] = f
	}
	for _, g := range s.Global {
		c.global[g] = true
	}
	return c
}
