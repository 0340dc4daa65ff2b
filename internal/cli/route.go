package cli

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// paramTypes are the type names --types accepts, with their OIDs.
var paramTypes = map[string]uint32{
	"": 0, "unspecified": 0, "text": 25, "varchar": 1043, "bpchar": 1042, "char": 1042, "name": 19, "unknown": 705,
	"int2": 21, "smallint": 21, "int4": 23, "int": 23, "integer": 23, "int8": 20, "bigint": 20,
	"uuid": 2950, "numeric": 1700, "float8": 701, "json": 114, "jsonb": 3802, "bool": 16, "bytea": 17,
}

func newRouteCmd() *cobra.Command {
	var schemaFile, mapFile, null, types string
	var asJSON, binaryFmt bool
	cmd := &cobra.Command{
		Use:   "route SQL [PARAM...]",
		Short: "Explain where the proxy sends a statement, and why",
		Long: `Analyze SQL as the proxy does (Postgres's own grammar) and print, for each
statement: its kind, where it runs (one shard, all shards with a merge plan,
any shard, or refused with a SQLSTATE), the key and bucket that decided, and
the chain of reasons.

PARAMs are the Bind values of $1, $2, ... in text format; the value of --null
(default \N) is NULL. --types declares their types as a client's Parse would
(e.g. --types text,int8); with --binary they are sent in binary format,
encoded by those types. SQL "-" reads the statement from stdin.

The shard map comes from the config (--config, as for other commands) or
from --map FILE; the sharding schema from --schema FILE, else from the
config's proxy.schema, else it is the execution store's default
(configs/sharding.yaml).`,
		Example: `  pgshard route "SELECT data FROM executions WHERE id = \$1" 0123456789abcdef0123456789abcdef
  pgshard route --types int8 --binary "DELETE FROM outbox WHERE seq = \$1" 1026
  pgshard route --json "SELECT id FROM executions ORDER BY id LIMIT 10 OFFSET 5"`,
		Args: cobra.MinimumNArgs(1),
	}
	cfgPath := addConfigFlag(cmd)
	cmd.Flags().StringVar(&schemaFile, "schema", "", "sharding schema YAML file (default: the config's proxy.schema, else the execution store's)")
	cmd.Flags().StringVar(&mapFile, "map", "", "shard map YAML file (instead of the config's map)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&null, "null", `\N`, "the PARAM value that stands for NULL")
	cmd.Flags().StringVar(&types, "types", "", "comma-separated declared parameter types (text, int8, int4, int2, uuid, varchar, ...; empty = unspecified)")
	cmd.Flags().BoolVar(&binaryFmt, "binary", false, "send the parameters in binary format, encoded by --types")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		oids, err := parseTypes(types)
		if err != nil {
			return err
		}
		m, schema, err := routeInputs(cmd, *cfgPath, mapFile, schemaFile)
		if err != nil {
			return err
		}
		r, err := route.New(m, schema, route.Options{CacheSize: -1})
		if err != nil {
			return err
		}
		sql := args[0]
		if sql == "-" {
			b, err := io.ReadAll(cmd.InOrStdin())
			if err != nil {
				return err
			}
			sql = string(b)
		}
		params, formats, err := encodeRouteParams(args[1:], null, oids, binaryFmt)
		if err != nil {
			return err
		}
		sts, err := r.Split(sql)
		if err != nil {
			return err
		}
		var out []routeReport
		for _, st := range sts {
			out = append(out, report(r, r.Explain(st, params, formats, oids)))
		}
		w := cmd.OutOrStdout()
		if asJSON {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		}
		for i, rep := range out {
			if i > 0 {
				fmt.Fprintln(w)
			}
			writeRouteReport(w, rep, i+1, len(out))
		}
		return nil
	}
	return cmd
}

// routeInputs loads the shard map and the sharding schema.
func routeInputs(cmd *cobra.Command, cfgPath, mapFile, schemaFile string) (*shardmap.Map, route.Schema, error) {
	var m *shardmap.Map
	schema := route.DefaultSchema()
	if mapFile != "" {
		raw, err := os.ReadFile(mapFile)
		if err != nil {
			return nil, schema, fmt.Errorf("--map: %w", err)
		}
		if m, err = shardmap.Parse(raw); err != nil {
			return nil, schema, fmt.Errorf("--map %s: %w", mapFile, err)
		}
	} else {
		cfg, cm, err := loadMap(cmd, cfgPath)
		if err != nil {
			return nil, schema, err
		}
		m = cm
		if schema, err = cfg.Proxy.Schema.Route(); err != nil {
			return nil, schema, fmt.Errorf("config: proxy.schema: %w", err)
		}
	}
	if schemaFile != "" {
		raw, err := os.ReadFile(schemaFile)
		if err != nil {
			return nil, schema, fmt.Errorf("--schema: %w", err)
		}
		if schema, err = config.ParseSchema(raw); err != nil {
			return nil, schema, fmt.Errorf("--schema %s: %w", schemaFile, err)
		}
	}
	return m, schema, nil
}

func parseTypes(s string) ([]uint32, error) {
	if s == "" {
		return nil, nil
	}
	var oids []uint32
	for _, name := range strings.Split(s, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		oid, ok := paramTypes[name]
		if !ok {
			if n, err := strconv.ParseUint(name, 10, 32); err == nil {
				oid, ok = uint32(n), true
			}
		}
		if !ok {
			return nil, usagef("--types: unknown type %q (known: text, varchar, bpchar, name, int2, int4, int8, uuid, numeric, float8, json, bool, or an OID)", name)
		}
		oids = append(oids, oid)
	}
	return oids, nil
}

// encodeRouteParams turns PARAM arguments into Bind values and format codes.
func encodeRouteParams(args []string, null string, oids []uint32, binaryFmt bool) ([][]byte, []int16, error) {
	if len(args) == 0 {
		return nil, nil, nil
	}
	params := make([][]byte, len(args))
	var formats []int16
	if binaryFmt {
		formats = []int16{1}
	}
	for i, a := range args {
		if a == null {
			continue
		}
		if !binaryFmt {
			params[i] = []byte(a)
			continue
		}
		var oid uint32
		if i < len(oids) {
			oid = oids[i]
		}
		b, err := binaryParam(a, oid)
		if err != nil {
			return nil, nil, usagef("parameter $%d: %v", i+1, err)
		}
		params[i] = b
	}
	return params, formats, nil
}

// binaryParam encodes a value in Postgres's binary format for the type.
func binaryParam(v string, oid uint32) ([]byte, error) {
	ints := map[uint32]int{21: 16, 23: 32, 20: 64}
	switch bits, isInt := ints[oid]; {
	case isInt:
		n, err := strconv.ParseInt(v, 10, bits)
		if err != nil {
			return nil, fmt.Errorf("%q is not an int%d", v, bits/8)
		}
		b := make([]byte, bits/8)
		switch bits {
		case 16:
			binary.BigEndian.PutUint16(b, uint16(n))
		case 32:
			binary.BigEndian.PutUint32(b, uint32(n))
		default:
			binary.BigEndian.PutUint64(b, uint64(n))
		}
		return b, nil
	case oid == 2950:
		b, err := hex.DecodeString(strings.ReplaceAll(strings.Trim(v, "{}"), "-", ""))
		if err != nil || len(b) != 16 {
			return nil, fmt.Errorf("%q is not a uuid", v)
		}
		return b, nil
	case oid == 0 || oid == 25 || oid == 1043 || oid == 1042 || oid == 19 || oid == 705:
		return []byte(v), nil
	}
	return nil, fmt.Errorf("--binary cannot encode type OID %d; declare text, int2/4/8 or uuid", oid)
}

// routeReport is one statement's routing, as printed.
type routeReport struct {
	SQL        string         `json:"sql"`
	Kind       string         `json:"kind"`
	ReadOnly   bool           `json:"read_only"`
	Tables     []string       `json:"tables,omitempty"`
	NumParams  int            `json:"num_params,omitempty"`
	ParseError string         `json:"parse_error,omitempty"`
	Setting    string         `json:"setting,omitempty"`
	Dest       string         `json:"dest"`
	Shard      string         `json:"shard,omitempty"`
	Ordinal    *int           `json:"ordinal,omitempty"`
	Key        string         `json:"key,omitempty"`
	Bucket     *int           `json:"bucket,omitempty"`
	Reason     string         `json:"reason"`
	Steps      []string       `json:"steps"`
	Refusal    *route.Refusal `json:"refusal,omitempty"`
	Merge      *mergeReport   `json:"merge,omitempty"`
}

type mergeReport struct {
	SQL     string            `json:"sql,omitempty"`
	OrderBy []route.SortKey   `json:"order_by,omitempty"`
	Limit   int64             `json:"limit"`
	Offset  int64             `json:"offset"`
	Groups  *route.GroupMerge `json:"groups,omitempty"`
	// Plan is the merge, step by step, as the text output prints it.
	Plan []string `json:"plan"`
}

func report(r *route.Table, ex route.Explanation) routeReport {
	st, d := ex.Statement, ex.Dest
	rep := routeReport{SQL: st.SQL, Kind: st.Kind.String(), ReadOnly: st.ReadOnly, Tables: st.Tables, NumParams: st.NumParams,
		ParseError: st.ParseError, Dest: d.Kind.String(), Key: d.Key, Reason: d.Reason, Steps: ex.Steps, Refusal: d.Refusal}
	if st.SetName != "" {
		rep.Setting = st.SetName
		if st.SetValue != "" {
			rep.Setting += " = " + st.SetValue
		}
	}
	if d.Kind == route.DestShard {
		s := r.Map().Shards[d.Shard]
		rep.Shard, rep.Ordinal = s.Name, &s.Ordinal
		if d.Bucket >= 0 {
			b := d.Bucket
			rep.Bucket = &b
		}
	}
	if mg := d.Merge; mg != nil {
		rep.Merge = &mergeReport{SQL: mg.SQL, OrderBy: mg.OrderBy, Limit: mg.Limit, Offset: mg.Offset, Groups: mg.Groups, Plan: mg.Describe()}
	}
	return rep
}

func writeRouteReport(w io.Writer, rep routeReport, i, n int) {
	fmt.Fprintf(w, "statement %d of %d: %s\n", i, n, oneLineSQL(rep.SQL))
	ro := ""
	if rep.ReadOnly {
		ro = " (read-only)"
	}
	fmt.Fprintf(w, "  kind:     %s%s\n", rep.Kind, ro)
	if len(rep.Tables) > 0 {
		fmt.Fprintf(w, "  tables:   %s\n", strings.Join(rep.Tables, ", "))
	}
	if rep.Setting != "" {
		fmt.Fprintf(w, "  setting:  %s\n", rep.Setting)
	}
	switch rep.Dest {
	case "shard":
		fmt.Fprintf(w, "  dest:     shard %s (ordinal %d)\n", rep.Shard, *rep.Ordinal)
	case "all":
		fmt.Fprintf(w, "  dest:     all shards\n")
	case "any":
		fmt.Fprintf(w, "  dest:     any shard\n")
	case "refuse":
		fmt.Fprintf(w, "  dest:     refused\n")
	}
	if rep.Key != "" || rep.Bucket != nil {
		fmt.Fprintf(w, "  key:      %s\n", strconv.Quote(rep.Key))
	}
	if rep.Bucket != nil {
		fmt.Fprintf(w, "  bucket:   %d\n", *rep.Bucket)
	}
	if rf := rep.Refusal; rf != nil {
		fmt.Fprintf(w, "  error:    SQLSTATE %s: %s\n", rf.SQLState, rf.Message)
		if rf.Detail != "" {
			fmt.Fprintf(w, "  detail:   %s\n", rf.Detail)
		}
		if rf.Hint != "" {
			fmt.Fprintf(w, "  hint:     %s\n", rf.Hint)
		}
	}
	fmt.Fprintf(w, "  why:\n")
	for _, s := range rep.Steps {
		fmt.Fprintf(w, "    - %s\n", s)
	}
	if mg := rep.Merge; mg != nil {
		fmt.Fprintf(w, "  merge:\n")
		for _, l := range mg.Plan {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
}

func oneLineSQL(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
