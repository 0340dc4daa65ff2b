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
	"go.yaml.in/yaml/v3"

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
from --map FILE, which takes a shard map file or a pgshard config file (told
apart by content, as --config does: top-level shards or ranges make a map
file; a config file is read as --config reads it). The sharding schema comes
from --schema FILE, else from the config's proxy.schema, else it is the
execution store's default (configs/sharding.yaml).

A read the proxy answers in two stages is shown stage by stage: each
subquery with its own routing and merge (the SQL every shard receives), then
the statement stage 2 runs on the default shard (proxy.default_shard, else
the map's first shard) over the subqueries' rows.`,
		Example: `  pgshard route "SELECT data FROM executions WHERE id = \$1" 0123456789abcdef0123456789abcdef
  pgshard route --types int8 --binary "DELETE FROM outbox WHERE seq = \$1" 1026
  pgshard route --json "SELECT id FROM executions ORDER BY id LIMIT 10 OFFSET 5"`,
		Args: cobra.MinimumNArgs(1),
	}
	cfgPath := addConfigFlag(cmd)
	cmd.Flags().StringVar(&schemaFile, "schema", "", "sharding schema YAML file (default: the config's proxy.schema, else the execution store's)")
	cmd.Flags().StringVar(&mapFile, "map", "", "shard map YAML file, or a pgshard config file (instead of --config)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&null, "null", `\N`, "the PARAM value that stands for NULL")
	cmd.Flags().StringVar(&types, "types", "", "comma-separated declared parameter types (text, int8, int4, int2, uuid, varchar, ...; empty = unspecified)")
	cmd.Flags().BoolVar(&binaryFmt, "binary", false, "send the parameters in binary format, encoded by --types")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		oids, err := parseTypes(types)
		if err != nil {
			return err
		}
		in, err := routeInputs(cmd, *cfgPath, mapFile, schemaFile)
		if err != nil {
			return err
		}
		r, err := route.New(in.m, in.schema, route.Options{CacheSize: -1, DefaultShard: in.defShard})
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
			rep := report(r, r.Explain(st, params, formats, oids))
			rep.explainStages(r, in.defShard, params, formats, oids)
			out = append(out, rep)
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

// routeInput is what a route explanation is made against.
type routeInput struct {
	m      *shardmap.Map
	schema route.Schema
	// defShard is where the proxy runs statements that need one fixed
	// shard (stage 2 of a read in two stages): proxy.default_shard, else
	// the map's first shard.
	defShard string
}

// routeInputs loads the shard map and the sharding schema. --map takes a
// shard map file or a config file (told apart by content, as --config
// does): a config file is read as --config would read it.
func routeInputs(cmd *cobra.Command, cfgPath, mapFile, schemaFile string) (routeInput, error) {
	in := routeInput{schema: route.DefaultSchema()}
	var cfg *config.Config
	if mapFile != "" {
		c, m, err := readMapFlag("--map", mapFile)
		if err != nil {
			return in, err
		}
		if c != nil && cfgPath != "" {
			return in, usagef("--map %s is a config file, and --config %s is given too: pass one config (as --config, or as --map) or a shard map file as --map", mapFile, cfgPath)
		}
		cfg, in.m = c, m
	} else {
		c, m, err := loadMap(cmd, cfgPath)
		if err != nil {
			return in, err
		}
		cfg, in.m = c, m
	}
	if cfg != nil {
		var err error
		if in.schema, err = cfg.Proxy.Schema.Route(); err != nil {
			return in, fmt.Errorf("config %s: proxy.schema: %w", cfg.Path, err)
		}
		in.defShard = cfg.Proxy.DefaultShard
	}
	if in.defShard == "" && len(in.m.Shards) > 0 {
		in.defShard = in.m.Shards[0].Name
	}
	if schemaFile != "" {
		raw, err := os.ReadFile(schemaFile)
		if err != nil {
			return in, fmt.Errorf("--schema: %w", err)
		}
		if in.schema, err = config.ParseSchema(raw); err != nil {
			return in, fmt.Errorf("--schema %s: %w", schemaFile, err)
		}
	}
	return in, nil
}

// readMapFlag reads the file a --map flag names: a shard map file (top-level
// shards/ranges), or else a pgshard config file, whose shard map (inline or
// its shardmap_file) is taken, with the config itself (nil for a map file).
func readMapFlag(flag, path string) (*config.Config, *shardmap.Map, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", flag, err)
	}
	var top map[string]any
	if err := yaml.Unmarshal(raw, &top); err != nil {
		return nil, nil, fmt.Errorf("%s %s: not YAML: %s", flag, path, oneLine(err))
	}
	if top == nil || config.IsBareMap(top) {
		m, err := shardmap.Parse(raw)
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s: %w", flag, path, err)
		}
		return nil, m, nil
	}
	cfg, err := config.Load(config.Options{Path: path})
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s (read as a pgshard config file: it has no top-level shards or ranges): %w", flag, path, err)
	}
	if cfg.Map == nil {
		return nil, nil, fmt.Errorf("%s %s: a pgshard config file without a shard map (no shardmap_file or shardmap); pass a shard map file, or a config that has one", flag, path)
	}
	return cfg, cfg.Map, nil
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
	// Stages, for a read in two stages, replaces Merge: what each stage
	// sends and where.
	Stages *stagesReport `json:"stages,omitempty"`
}

// stagesReport is a read in two stages (route.Stages), as the proxy runs
// it: stage 1 routes each subquery as a statement of its own, stage 2 runs
// the outer statement over their rows on the default shard (or, for a
// spread plan, where its own routing sends it).
type stagesReport struct {
	// DescribeShard is where the client's statement is described first
	// (the default shard).
	DescribeShard string `json:"describe_shard"`
	// Stage1 explains each inner statement: its SQL, where it runs and
	// its own merge (with the SQL each shard receives).
	Stage1 []routeReport `json:"stage1"`
	// Stage2 is the outer statement.
	Stage2 stage2Report `json:"stage2"`
	// Correlated are the subqueries (1-based) read for subqueries of
	// stage 2 that refer to the row: it runs those once per row over
	// their rows, within route.CorrelatedBudget.
	Correlated []int `json:"correlated,omitempty"`
}

type stage2Report struct {
	Shard string `json:"shard"`
	// SQL is the statement sent to Shard, with subquery i's rows standing
	// where Markers[i] is.
	SQL     string   `json:"sql"`
	Markers []string `json:"markers"`
	// Routed, for a spread plan (route.Stages.Spread), is the statement's
	// own routing: where it runs (Shard is then empty) and its merge.
	Routed *routeReport `json:"routed,omitempty"`
}

// explainStages fills Stages for a read in two stages.
func (rep *routeReport) explainStages(r *route.Table, defShard string, params [][]byte, formats []int16, oids []uint32) {
	if rep.Merge == nil || rep.Merge.stages == nil {
		return
	}
	sg := rep.Merge.stages
	rep.Merge, rep.Stages = nil, &stagesReport{DescribeShard: defShard, Stage2: stage2Report{Shard: defShard, SQL: sg.Outer}}
	for i, in := range sg.Inner {
		sub := report(r, r.Explain(in, params, formats, oids))
		if mg := sub.Merge; mg != nil && mg.SQL == "" && len(mg.Plan) > 0 {
			// "the client's statement" is the subquery's text here.
			mg.SQL, mg.Plan[0] = in.SQL, "per-shard SQL: "+oneLineSQL(in.SQL)
		}
		rep.Stages.Stage1 = append(rep.Stages.Stage1, sub)
		rep.Stages.Stage2.Markers = append(rep.Stages.Stage2.Markers, route.StageMarker(i))
		if sg.Correlated(i) {
			rep.Stages.Correlated = append(rep.Stages.Correlated, i+1)
		}
	}
	if sg.Spread {
		out := report(r, r.Explain(sg.OuterStatement(), params, formats, oids))
		rep.Stages.Stage2.Shard, rep.Stages.Stage2.Routed = "", &out
	}
}

type mergeReport struct {
	SQL     string            `json:"sql,omitempty"`
	OrderBy []route.SortKey   `json:"order_by,omitempty"`
	Limit   int64             `json:"limit"`
	Offset  int64             `json:"offset"`
	Groups  *route.GroupMerge `json:"groups,omitempty"`
	// Plan is the merge, step by step, as the text output prints it.
	Plan []string `json:"plan"`
	// stages is the Merge's two stages (explainStages replaces the merge
	// by them).
	stages *route.Stages
}

func report(r *route.Table, ex route.Explanation) routeReport {
	st, d := ex.Statement, ex.Dest
	rep := routeReport{SQL: st.SQL, Kind: st.Kind.String(), ReadOnly: st.ReadOnly, Tables: st.Tables, NumParams: st.NumParams,
		ParseError: st.ParseError, Dest: d.Kind.String(), Key: d.KeyText(), Reason: d.Why(), Steps: ex.Steps, Refusal: d.Refusal}
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
		rep.Merge = &mergeReport{SQL: mg.SQL, OrderBy: mg.OrderBy, Limit: mg.Limit, Offset: mg.Offset, Groups: mg.Groups, Plan: mg.Describe(), stages: mg.Stages}
	}
	return rep
}

func writeRouteReport(w io.Writer, rep routeReport, i, n int) {
	fmt.Fprintf(w, "statement %d of %d: %s\n", i, n, oneLineSQL(rep.SQL))
	writeRouteBody(w, rep, "  ")
}

// writeRouteBody prints a statement's routing, each line after ind.
func writeRouteBody(w io.Writer, rep routeReport, ind string) {
	ro := ""
	if rep.ReadOnly {
		ro = " (read-only)"
	}
	fmt.Fprintf(w, "%skind:     %s%s\n", ind, rep.Kind, ro)
	if len(rep.Tables) > 0 {
		fmt.Fprintf(w, "%stables:   %s\n", ind, strings.Join(rep.Tables, ", "))
	}
	if rep.Setting != "" {
		fmt.Fprintf(w, "%ssetting:  %s\n", ind, rep.Setting)
	}
	switch {
	case rep.Stages != nil:
		fmt.Fprintf(w, "%sdest:     in two stages (below)\n", ind)
	case rep.Dest == "shard":
		fmt.Fprintf(w, "%sdest:     shard %s (ordinal %d)\n", ind, rep.Shard, *rep.Ordinal)
	case rep.Dest == "all":
		fmt.Fprintf(w, "%sdest:     all shards\n", ind)
	case rep.Dest == "any":
		fmt.Fprintf(w, "%sdest:     any shard\n", ind)
	case rep.Dest == "refuse":
		fmt.Fprintf(w, "%sdest:     refused\n", ind)
	}
	if rep.Key != "" || rep.Bucket != nil {
		fmt.Fprintf(w, "%skey:      %s\n", ind, strconv.Quote(rep.Key))
	}
	if rep.Bucket != nil {
		fmt.Fprintf(w, "%sbucket:   %d\n", ind, *rep.Bucket)
	}
	if rf := rep.Refusal; rf != nil {
		fmt.Fprintf(w, "%serror:    SQLSTATE %s: %s\n", ind, rf.SQLState, rf.Message)
		if rf.Detail != "" {
			fmt.Fprintf(w, "%sdetail:   %s\n", ind, rf.Detail)
		}
		if rf.Hint != "" {
			fmt.Fprintf(w, "%shint:     %s\n", ind, rf.Hint)
		}
	}
	fmt.Fprintf(w, "%swhy:\n", ind)
	for _, s := range rep.Steps {
		fmt.Fprintf(w, "%s  - %s\n", ind, s)
	}
	if mg := rep.Merge; mg != nil {
		fmt.Fprintf(w, "%smerge:\n", ind)
		for _, l := range mg.Plan {
			fmt.Fprintf(w, "%s  %s\n", ind, l)
		}
	}
	if sg := rep.Stages; sg != nil {
		writeStages(w, sg, ind)
	}
}

// writeStages prints a read in two stages: what each stage sends where,
// and how the answer is made of them.
func writeStages(w io.Writer, sg *stagesReport, ind string) {
	n, routed := len(sg.Stage1), sg.Stage2.Routed
	fmt.Fprintf(w, "%sdescribe: the client's statement is described on shard %s (Parse + Describe: parameter and column types; not run)\n", ind, sg.DescribeShard)
	fmt.Fprintf(w, "%sstage 1:  each subquery runs alone, with the client's parameters, where its own routing below sends it; the proxy keeps its merged rows (more than %d: refused, SQLSTATE 54000)\n", ind, route.PullLimit)
	if routed != nil {
		fmt.Fprintf(w, "%s          (a subquery that fails alone with 42703, naming a column of the statement's row without a qualifier, is planned again with that column qualified: routed as it is or decorrelated; the plan below is the statement's own)\n", ind)
	}
	for i, sub := range sg.Stage1 {
		fmt.Fprintf(w, "%s  subquery %d of %d: %s\n", ind, i+1, n, oneLineSQL(sub.SQL))
		writeRouteBody(w, sub, ind+"    ")
	}
	if routed != nil {
		fmt.Fprintf(w, "%sstage 2:  after stage 1, the statement with the subqueries' rows, routed on its own (its key, or every shard merged):\n", ind)
	} else {
		fmt.Fprintf(w, "%sstage 2:  on shard %s (the default shard), after stage 1:\n", ind, sg.Stage2.Shard)
	}
	fmt.Fprintf(w, "%s  SQL:    %s\n", ind, oneLineSQL(sg.Stage2.SQL))
	for i, mk := range sg.Stage2.Markers {
		fmt.Fprintf(w, "%s  where  %s is subquery %d's merged rows: SELECT * FROM (VALUES ($k, ...), ...) AS pgshard_v(its columns), sent as binary parameters numbered after the client's\n", ind, mk, i+1)
	}
	if len(sg.Correlated) > 0 {
		nums := make([]string, len(sg.Correlated))
		for i, k := range sg.Correlated {
			nums[i] = strconv.Itoa(k)
		}
		label := "subqueries"
		if len(nums) == 1 {
			label = "subquery"
		}
		fmt.Fprintf(w, "%s  per row: %s %s read for subqueries that refer to the row; stage 2 runs those once per row over their rows (no index there): refused (SQLSTATE 54000) when their rows times the other subqueries' rows (+1) exceed %d\n",
			ind, label, strings.Join(nums, ", "), route.CorrelatedBudget)
	}
	if routed != nil {
		writeRouteBody(w, *routed, ind+"  ")
		fmt.Fprintf(w, "%sresult:   stage 2's rows, merged as its routing says\n", ind)
		return
	}
	fmt.Fprintf(w, "%sresult:   stage 2's rows, as shard %s returns them (no merge)\n", ind, sg.Stage2.Shard)
}

func oneLineSQL(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
