package route

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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
