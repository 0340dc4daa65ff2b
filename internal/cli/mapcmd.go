package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/shardmap"
)

func newMapCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "map",
		Short: "Show, check and plan the shard map; push it to a catalog",
	}
	cmd.AddCommand(newMapShowCmd(), newMapValidateCmd(), newMapBucketCmd(), newMapPlanCmd(), newMapPushCmd())
	return cmd
}

// addConfigFlag adds --config to cmd and returns where its value lands.
func addConfigFlag(cmd *cobra.Command) *string {
	p := new(string)
	cmd.Flags().StringVarP(p, "config", "c", "", "config file (default $PGSHARD_CONFIG, ./pgshard.yaml or ./.pgshard/pgshard.yaml)")
	return p
}

// loadMap loads the config and returns its shard map.
func loadMap(cmd *cobra.Command, path string) (*config.Config, *shardmap.Map, error) {
	cfg, err := config.Load(config.Options{Path: path, Flags: cmd.Flags(), RequireMap: true})
	if err != nil {
		return nil, nil, err
	}
	return cfg, cfg.Map, nil
}

func newMapShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Print the shard map: shards, ordinals, bucket ranges, DSNs",
		Long: `Print the shard map: shards, ordinals, bucket ranges, DSNs. With a catalog
(--catalog DSN, config key catalog.dsn or $PGSHARD_CATALOG_DSN) the map is the
catalog's current one; otherwise the config's.`,
		Args: cobra.NoArgs,
	}
	cfgPath := addConfigFlag(cmd)
	addCatalogFlag(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cc, err := config.Load(config.Options{Path: *cfgPath, Flags: cmd.Flags(), Bind: catalogBind})
		if err != nil {
			return err
		}
		if cc.Catalog.DSN != "" {
			return showCatalogMap(cmd, cc.Catalog.DSN, asJSON)
		}
		cfg, m, err := loadMap(cmd, *cfgPath)
		if err != nil {
			return err
		}
		if asJSON {
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(m)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "map epoch %d, %d buckets, %d shards (from %s)\n", m.Epoch, m.Buckets, len(m.Shards), cfg.Path)
		return writeShardTable(cmd.OutOrStdout(), m)
	}
	return cmd
}

// writeShardTable prints one row per shard with its ranges and DSNs.
func writeShardTable(w io.Writer, m *shardmap.Map) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tORDINAL\tBUCKETS\tCOUNT\tDSN\tPOOLER DSN")
	counts := m.BucketCounts()
	for _, s := range m.Shards {
		var rs []string
		for _, r := range m.RangesOf(s.Name) {
			rs = append(rs, r.String())
		}
		if len(rs) == 0 {
			rs = []string{"none (empty)"}
		}
		pooler := s.PoolerDSN
		if pooler == "" {
			pooler = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", s.Name, s.Ordinal, strings.Join(rs, ","), counts[s.Name], s.DSN, pooler)
	}
	return tw.Flush()
}

func newMapValidateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "validate [FILE...]",
		Short: "Check shard map or config files (default: the current config)",
		Long: `Check shard map files or pgshard config files. A file with top-level
"shards"/"ranges" is a shard map; anything else is read as a config file
(unknown keys are errors). Prints one line per file.`,
	}
	cfgPath := addConfigFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		out := cmd.OutOrStdout()
		if len(args) == 0 {
			cfg, m, err := loadMap(cmd, *cfgPath)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s: ok (%s)\n", cfg.Path, describeMap(m))
			return nil
		}
		failed := 0
		for _, f := range args {
			desc, err := validateFile(f)
			if err != nil {
				failed++
				fmt.Fprintf(out, "%s: %s\n", f, oneLine(err))
				continue
			}
			fmt.Fprintf(out, "%s: ok (%s)\n", f, desc)
		}
		if failed > 0 {
			return fmt.Errorf("%d of %d files invalid", failed, len(args))
		}
		return nil
	}
	return cmd
}

func describeMap(m *shardmap.Map) string {
	return fmt.Sprintf("shard map epoch %d, %d buckets, %d shards", m.Epoch, m.Buckets, len(m.Shards))
}

func validateFile(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var top map[string]any
	if err := yaml.Unmarshal(raw, &top); err != nil {
		return "", fmt.Errorf("not YAML: %s", oneLine(err))
	}
	if config.IsBareMap(top) {
		m, err := shardmap.Parse(raw)
		if err != nil {
			return "", err
		}
		return describeMap(m), nil
	}
	cfg, err := config.Load(config.Options{Path: path})
	if err != nil {
		return "", err
	}
	if cfg.Map == nil {
		return "config, no shard map", nil
	}
	return "config with " + describeMap(cfg.Map), nil
}

func newMapBucketCmd() *cobra.Command {
	var int8Keys bool
	cmd := &cobra.Command{
		Use:   "bucket [KEY...]",
		Short: "Print KEY<TAB>BUCKET<TAB>SHARD for each key (from args, or stdin lines)",
		Long: `Print where keys land: KEY<TAB>BUCKET<TAB>SHARD, one line per key. Keys come
from the arguments or, with none, from stdin (one per line). The bucket is the
value SELECT pgshard_bucket(KEY) returns on every shard.`,
	}
	cfgPath := addConfigFlag(cmd)
	cmd.Flags().BoolVar(&int8Keys, "int8", false, "keys are int8 (bigint) values, not text")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		_, m, err := loadMap(cmd, *cfgPath)
		if err != nil {
			return err
		}
		w := bufio.NewWriter(cmd.OutOrStdout())
		defer w.Flush()
		emit := func(key string) error {
			b := 0
			if int8Keys {
				v, err := strconv.ParseInt(strings.TrimSpace(key), 10, 64)
				if err != nil {
					return fmt.Errorf("key %q is not an int8: %w", key, errors.Unwrap(err))
				}
				b = m.BucketInt8(v)
			} else {
				b = m.Bucket(key)
			}
			_, err := fmt.Fprintf(w, "%s\t%d\t%s\n", key, b, m.ShardForBucket(b).Name)
			return err
		}
		if len(args) > 0 {
			for _, k := range args {
				if err := emit(k); err != nil {
					return err
				}
			}
			return nil
		}
		sc := bufio.NewScanner(cmd.InOrStdin())
		sc.Buffer(make([]byte, 64*1024), 16<<20)
		for sc.Scan() {
			if err := emit(strings.TrimSuffix(sc.Text(), "\r")); err != nil {
				return err
			}
		}
		return sc.Err()
	}
	return cmd
}

func newMapPlanCmd() *cobra.Command {
	var add, remove, dsn, poolerDSN, out string
	var ordinal int
	cmd := &cobra.Command{
		Use:   "plan (--add-shard NAME --dsn DSN | --remove-shard NAME)",
		Short: "Plan a new map that adds or removes a shard with minimal bucket movement",
		Long: `Compute the next shard map (epoch+1) that adds or removes one shard, moving
the fewest buckets and leaving every shard within one bucket of the others.
Prints the moves and the new map (to --out, or stdout). Nothing is changed.`,
		Args: cobra.NoArgs,
	}
	cfgPath := addConfigFlag(cmd)
	cmd.Flags().StringVar(&add, "add-shard", "", "name of the shard to add")
	cmd.Flags().StringVar(&remove, "remove-shard", "", "name of the shard to remove")
	cmd.Flags().StringVar(&dsn, "dsn", "", "direct DSN of the added shard")
	cmd.Flags().StringVar(&poolerDSN, "pooler-dsn", "", "PgBouncer DSN of the added shard")
	cmd.Flags().IntVar(&ordinal, "ordinal", -1, "ordinal of the added shard (default: the smallest unused)")
	cmd.Flags().StringVarP(&out, "out", "o", "", "write the new map to this file instead of stdout")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if (add == "") == (remove == "") {
			return usagef("give exactly one of --add-shard or --remove-shard")
		}
		if add != "" && dsn == "" {
			return usagef("--add-shard needs --dsn")
		}
		_, m, err := loadMap(cmd, *cfgPath)
		if err != nil {
			return err
		}
		var next *shardmap.Map
		if add != "" {
			if ordinal < 0 {
				ordinal = m.NextOrdinal()
			}
			next, err = shardmap.PlanAdd(m, shardmap.Shard{Name: add, Ordinal: ordinal, DSN: dsn, PoolerDSN: poolerDSN})
		} else {
			next, err = shardmap.PlanRemove(m, remove)
		}
		if err != nil {
			return err
		}
		moves, err := shardmap.Diff(m, next)
		if err != nil {
			return err
		}
		info := cmd.ErrOrStderr()
		if out == "" {
			info = cmd.OutOrStdout()
		}
		moved := 0
		for _, mv := range moves {
			moved += mv.Len()
		}
		fmt.Fprintf(info, "# epoch %d -> %d: %d of %d buckets move (%.1f%%) in %s\n",
			m.Epoch, next.Epoch, moved, m.Buckets, 100*float64(moved)/float64(m.Buckets), plural(len(moves), "range"))
		for _, mv := range moves {
			fmt.Fprintf(info, "#   %s\n", mv)
		}
		data, err := next.Marshal()
		if err != nil {
			return err
		}
		if out != "" {
			if err := os.WriteFile(out, data, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(info, "wrote %s\n", out)
			return nil
		}
		_, err = cmd.OutOrStdout().Write(data)
		return err
	}
	return cmd
}
