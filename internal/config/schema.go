package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/pgshard/pgshard/proxy/route"
)

// Schema is the sharding schema as configuration (the proxy.schema section,
// or a YAML file of its own for `pgshard route --schema`). Its tags are
// configuration's business; the routing package only knows route.Schema,
// which Route converts to.
//
//	tables:
//	  - {table: executions, column: id, type: text, position: 1}
//	  - {table: outbox, column: seq, type: seq}
//	functions:
//	  - {function: harel_commit_cas, arg: 0, type: text}
//	global: [definitions]
type Schema struct {
	// Tables are the keyed columns (route.Schema.Tables).
	Tables []TableKey `mapstructure:"tables" yaml:"tables" json:"tables"`
	// Functions are the keyed function arguments (route.Schema.Functions).
	Functions []FuncKey `mapstructure:"functions" yaml:"functions" json:"functions"`
	// Global lists tables that are identical on every shard (route.Schema.Global).
	Global []string `mapstructure:"global" yaml:"global" json:"global"`
	// HintType is "text" (default when empty) or "int8".
	HintType string `mapstructure:"hint_type" yaml:"hint_type,omitempty" json:"hint_type,omitempty"`
}

// TableKey is one keyed column: type is "text", "int8" (or "bigint") or
// "seq"; position is the column's 1-based place in the table (optional;
// needed to route an INSERT without a column list).
type TableKey struct {
	Table    string `mapstructure:"table" yaml:"table" json:"table"`                              // unqualified, lowercase
	Column   string `mapstructure:"column" yaml:"column" json:"column"`                           // lowercase
	Type     string `mapstructure:"type" yaml:"type" json:"type"`                                 // text (default), int8/bigint or seq
	Position int    `mapstructure:"position" yaml:"position,omitempty" json:"position,omitempty"` // 1-based, 0 = unknown
}

// FuncKey names the 0-based argument of a function that carries the key.
type FuncKey struct {
	Function string `mapstructure:"function" yaml:"function" json:"function"` // unqualified, lowercase
	Arg      int    `mapstructure:"arg" yaml:"arg" json:"arg"`                // 0-based
	Type     string `mapstructure:"type" yaml:"type" json:"type"`             // text (default), int8/bigint or seq
}

// Route converts and validates the configuration, naming the key of each
// problem ("tables[2].type: ...").
func (c Schema) Route() (route.Schema, error) {
	var s route.Schema
	var p []string
	for i, t := range c.Tables {
		kt, err := route.ParseKeyType(t.Type)
		if err != nil {
			p = append(p, fmt.Sprintf("tables[%d].type: %s", i, err))
		}
		s.Tables = append(s.Tables, route.TableKey{Table: t.Table, Column: t.Column, Type: kt, Position: t.Position})
	}
	for i, f := range c.Functions {
		kt, err := route.ParseKeyType(f.Type)
		if err != nil {
			p = append(p, fmt.Sprintf("functions[%d].type: %s", i, err))
		}
		s.Functions = append(s.Functions, route.FuncKey{Function: f.Function, Arg: f.Arg, Type: kt})
	}
	s.Global = slices.Clone(c.Global)
	if c.HintType != "" {
		kt, err := route.ParseKeyType(c.HintType)
		if err != nil {
			p = append(p, fmt.Sprintf("hint_type: %s", err))
		}
		s.HintType = kt
	}
	if len(p) > 0 {
		return route.Schema{}, errors.New("sharding schema: " + strings.Join(p, "; "))
	}
	if err := s.Validate(); err != nil {
		return route.Schema{}, err
	}
	return s, nil
}

// Validate checks the configuration (see Route).
func (c Schema) Validate() error {
	_, err := c.Route()
	return err
}

// SchemaOf returns s as configuration (the inverse of Schema.Route).
func SchemaOf(s route.Schema) Schema {
	var c Schema
	for _, t := range s.Tables {
		c.Tables = append(c.Tables, TableKey{Table: t.Table, Column: t.Column, Type: t.Type.String(), Position: t.Position})
	}
	for _, f := range s.Functions {
		c.Functions = append(c.Functions, FuncKey{Function: f.Function, Arg: f.Arg, Type: f.Type.String()})
	}
	c.Global = slices.Clone(s.Global)
	if s.HintType != route.KeyText {
		c.HintType = s.HintType.String()
	}
	return c
}

// DefaultSchema is route.DefaultSchema (the execution store's) as
// configuration: the default of proxy.schema.
func DefaultSchema() Schema { return SchemaOf(route.DefaultSchema()) }

// ParseSchema decodes a YAML sharding schema file (see Schema), rejecting
// unknown keys, and validates it.
func ParseSchema(data []byte) (route.Schema, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Schema
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return route.Schema{}, errors.New("decode sharding schema: empty document")
		}
		return route.Schema{}, fmt.Errorf("decode sharding schema: %s", strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " "))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return route.Schema{}, errors.New("decode sharding schema: the file must hold exactly one YAML document")
	}
	return c.Route()
}
