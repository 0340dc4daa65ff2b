package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/shardmap"
)

// catalogTimeout bounds a map command's work on the catalog.
const catalogTimeout = time.Minute

// catalogBind binds the catalog.dsn key to the --catalog flag.
var catalogBind = map[string]string{"catalog.dsn": "catalog"}

// addCatalogFlag adds --catalog to cmd.
func addCatalogFlag(cmd *cobra.Command) {
	cmd.Flags().String("catalog", "", "DSN of the catalog database (config key catalog.dsn, $PGSHARD_CATALOG_DSN)")
}

// errNoCatalog is returned by commands that need a catalog and got none.
var errNoCatalog = errors.New("no catalog: pass --catalog DSN, or set catalog.dsn in the config or $PGSHARD_CATALOG_DSN")

// openCatalog opens the catalog at dsn for a map command.
func openCatalog(ctx context.Context, dsn string) (*catalog.Catalog, error) {
	return catalog.Open(ctx, dsn, catalog.Options{ApplicationName: "pgshard map"})
}

func newMapPushCmd() *cobra.Command {
	var mapFile string
	var expect int64
	cmd := &cobra.Command{
		Use:   "push --catalog DSN [--map FILE]",
		Short: "Write a shard map into the catalog (installing the catalog if needed)",
		Long: `Write a shard map into the catalog database, by compare-and-swap on the
epoch: the push replaces the catalog's current epoch only if nobody changed it
meanwhile, and the map's epoch must be greater. The map is --map FILE (a shard
map YAML file), else the config's shard map. The catalog's schema
(pgshard_catalog) is installed or upgraded first; that is idempotent.
Pushing the map the catalog already holds, at the same epoch, changes nothing.

The first push bootstraps the catalog. Later pushes need a map with a greater
epoch, the same bucket count, and every shard that stays keeping its ordinal.
Through PgBouncer in transaction mode is fine.`,
		Args: cobra.NoArgs,
	}
	cfgPath := addConfigFlag(cmd)
	addCatalogFlag(cmd)
	cmd.Flags().StringVar(&mapFile, "map", "", "shard map YAML file to push, or a pgshard config file with one (default: the config's shard map)")
	cmd.Flags().Int64Var(&expect, "expect-epoch", -1, "replace only this catalog epoch (0: only bootstrap an empty catalog; default: the epoch read just before)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if expect < -1 {
			return usagef("--expect-epoch: %d is not an epoch (0 or more; -1, the default, reads the catalog's)", expect)
		}
		cfg, err := config.Load(config.Options{Path: *cfgPath, Flags: cmd.Flags(), Bind: catalogBind, RequireMap: mapFile == ""})
		if err != nil {
			return err
		}
		if cfg.Catalog.DSN == "" {
			return usageError{errNoCatalog}
		}
		m, from := cfg.Map, "config "+cfg.Path
		if mapFile != "" {
			if _, m, err = readMapFlag("--map", mapFile); err != nil {
				return err
			}
			from = mapFile
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), catalogTimeout)
		defer cancel()
		c, err := openCatalog(ctx, cfg.Catalog.DSN)
		if err != nil {
			return err
		}
		defer c.Close()
		out := cmd.OutOrStdout()
		applied, err := c.Install(ctx)
		if err != nil {
			return err
		}
		if len(applied) > 0 {
			fmt.Fprintf(out, "installed catalog schema %s in %s\n", strings.Join(applied, ", "), c.Addr())
		}
		cur, err := c.Epoch(ctx)
		if err != nil {
			return err
		}
		if expect >= 0 {
			if m.Epoch <= uint64(expect) {
				return fmt.Errorf("push: the map's epoch must grow: --expect-epoch %d names the epoch to replace and the pushed map has epoch %d (the catalog is at epoch %d)",
					expect, m.Epoch, cur)
			}
			cur = uint64(expect)
		} else if cur == m.Epoch {
			// Pushing what the catalog holds is a no-op; anything else at
			// the same epoch is refused by Push below.
			have, err := c.Load(ctx)
			if err != nil {
				return err
			}
			if same, err := sameMap(have, m); err != nil {
				return err
			} else if same {
				fmt.Fprintf(out, "catalog %s already holds this map at epoch %d: nothing to do\n", c.Addr(), m.Epoch)
				return nil
			}
		}
		if err := c.Push(ctx, m, cur); err != nil {
			return err
		}
		was := fmt.Sprintf("replacing epoch %d", cur)
		if cur == 0 {
			was = "bootstrapping an empty catalog"
		}
		fmt.Fprintf(out, "pushed map epoch %d (%s, %d buckets, %d shards, from %s) to catalog %s, %s\n",
			m.Epoch, describeCounts(m), m.Buckets, len(m.Shards), from, c.Addr(), was)
		return nil
	}
	return cmd
}

// describeCounts says how many ranges the map has.
func describeCounts(m *shardmap.Map) string {
	if len(m.Ranges) == 1 {
		return "1 range"
	}
	return fmt.Sprintf("%d ranges", len(m.Ranges))
}

// sameMap reports whether two maps are the same document.
func sameMap(a, b *shardmap.Map) (bool, error) {
	ab, err := a.Marshal()
	if err != nil {
		return false, err
	}
	bb, err := b.Marshal()
	if err != nil {
		return false, err
	}
	return string(ab) == string(bb), nil
}

// showCatalogMap prints the catalog's map as `map show` prints a file's.
func showCatalogMap(cmd *cobra.Command, dsn string, asJSON bool) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), catalogTimeout)
	defer cancel()
	c, err := openCatalog(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close()
	m, err := c.Load(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "map epoch %d, %d buckets, %d shards (from catalog %s)\n", m.Epoch, m.Buckets, len(m.Shards), c.Addr())
	if err := writeShardTable(out, m); err != nil {
		return err
	}
	// The map names each range's owner; a range being moved is still its
	// source's until the flip. Say so, or a reader takes the map for the
	// whole truth while a range is frozen.
	moves, err := c.Moves(ctx, true)
	if err != nil {
		return err
	}
	if len(moves) > 0 {
		fmt.Fprintf(out, "%d moves unfinished (details: pgshard reshard status):\n", len(moves))
		for _, mv := range moves {
			fmt.Fprintf(out, "  buckets %d-%d %s → %s: %s\n", mv.Lo, mv.Hi, mv.From, mv.To, mv.Phase)
		}
	}
	return nil
}
