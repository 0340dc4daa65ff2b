package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// devCatalogDatabase is the database that holds a dev cluster's catalog
// (dev up --catalog): on the cluster's catalog server when it has one
// (dev up --catalog-server), else on shard0's server.
const devCatalogDatabase = "pgshard_catalog"

// devCatalogServer is the server of the dev cluster's catalog: its
// catalog server, else shard0's.
func devCatalogServer(c *cluster.Cluster) cluster.Shard {
	if c.Catalog != nil {
		return *c.Catalog
	}
	return c.Shards[0]
}

// devCatalogDSN connects directly to the dev cluster's catalog database.
func devCatalogDSN(c *cluster.Cluster) string {
	return devCatalogServer(c).DSN(devCatalogDatabase, c.Spec.User)
}

// checkCatalogServer refuses dev up --catalog-server on a reused cluster
// (loaded; nil for a new one) that has no catalog server but a catalog
// already (prevCatalog, the config's catalog.dsn, on a shard's server):
// a catalog made afresh on the new server would not have the epochs and
// moves of the one it replaced.
func checkCatalogServer(loaded *cluster.Cluster, prevCatalog string, withCatalogServer bool) error {
	if !withCatalogServer || loaded == nil || loaded.Catalog != nil || prevCatalog == "" {
		return nil
	}
	return fmt.Errorf("--catalog-server: the cluster in %s already keeps its catalog on a shard's server (catalog.dsn %s), and a new catalog server would start without its map's history; run `pgshard dev down --purge --dir %s` and up again with --catalog-server, or leave the flag off",
		loaded.Dir, store.RedactDSN(prevCatalog), loaded.Dir)
}

// devConfigCatalog returns the catalog.dsn of DIR/pgshard.yaml, "" if it
// names none (or there is no usable config).
func devConfigCatalog(dir string) string {
	cfg, err := config.Load(config.Options{Path: devConfigPath(dir), Environ: []string{}})
	if err != nil {
		return ""
	}
	return cfg.Catalog.DSN
}

// devTLSFiles returns the dev cluster's TLS files when the config turns
// TLS on (so that rewriting the config keeps it), else nil.
func devTLSFiles(dir string, cfg *config.Config) (*cluster.TLSFiles, error) {
	if cfg.Proxy.TLS.Mode == "" || cfg.Proxy.TLS.Mode == "disable" || cfg.Proxy.TLS.CertFile == "" {
		return nil, nil
	}
	f, err := cluster.WriteTLSFiles(devTLSDir(dir)) // the files made by dev up --tls
	if err != nil {
		return nil, err
	}
	return &f, nil
}

// ensureDevCatalog creates the catalog database on its server (see
// devCatalogServer) if missing, installs the catalog there and, if it holds no map yet, pushes
// m. It returns a line saying what the catalog holds.
func ensureDevCatalog(ctx context.Context, c *cluster.Cluster, dsn string, m *shardmap.Map) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, catalogTimeout)
	defer cancel()
	srv := devCatalogServer(c)
	if err := createDatabase(ctx, srv.DSN("postgres", c.Spec.User), devCatalogDatabase, c.Spec.User); err != nil {
		return "", fmt.Errorf("create the catalog database on %s: %w", srv.Name, err)
	}
	cat, err := catalog.Open(ctx, dsn, catalog.Options{ApplicationName: "pgshard dev"})
	if err != nil {
		return "", err
	}
	defer cat.Close()
	if _, err := cat.Install(ctx); err != nil {
		return "", err
	}
	epoch, err := cat.Epoch(ctx)
	if err != nil {
		return "", err
	}
	if epoch == 0 {
		if err := cat.Push(ctx, m, 0); err != nil {
			return "", err
		}
		return fmt.Sprintf("catalog %s: pushed map epoch %d (catalog.dsn in the config)", cat.Addr(), m.Epoch), nil
	}
	have, err := cat.Load(ctx)
	if err != nil {
		return "", err
	}
	if same, err := sameMap(have, m); err != nil {
		return "", err
	} else if !same {
		return fmt.Sprintf("catalog %s holds map epoch %d, not the config's map (epoch %d): left as it is (pgshard map push replaces it)",
			cat.Addr(), have.Epoch, m.Epoch), nil
	}
	return fmt.Sprintf("catalog %s: map epoch %d", cat.Addr(), have.Epoch), nil
}

// devCatalogMap returns the map in force in the dev cluster's catalog
// when it describes the cluster (its shards, unchanged, are the cluster's,
// all or all but some an interrupted add-shard started), nil when the
// catalog holds none (not installed, never pushed) or another cluster's.
func devCatalogMap(ctx context.Context, c *cluster.Cluster, dsn string, buckets int) (*shardmap.Map, error) {
	ctx, cancel := context.WithTimeout(ctx, catalogTimeout)
	defer cancel()
	cat, err := catalog.Open(ctx, dsn, catalog.Options{ApplicationName: "pgshard dev"})
	if err != nil {
		return nil, fmt.Errorf("the cluster's catalog (catalog.dsn in %s): %w", devConfigPath(c.Dir), err)
	}
	defer cat.Close()
	m, err := cat.Load(ctx)
	if errors.Is(err, catalog.ErrNotInstalled) || errors.Is(err, catalog.ErrEmpty) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the cluster's catalog %s: %w", cat.Addr(), err)
	}
	running, err := c.Map(buckets)
	if err != nil {
		return nil, err
	}
	if !sameShards(m, running) && !coversShards(m, running) {
		return nil, nil
	}
	return m, nil
}

// createDatabase creates database name owned by owner unless it exists.
func createDatabase(ctx context.Context, adminDSN, name, owner string) error {
	conn, err := pgx.Connect(ctx, adminDSN+"&connect_timeout=10")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil || exists {
		return err
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" OWNER "+pgx.Identifier{owner}.Sanitize())
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P04" { // duplicate_database: another run made it meanwhile
		err = nil
	}
	return err
}

func newDevAddShardCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "add-shard [--name N]",
		Short: "Start one more shard in the local cluster and register it in the catalog (owning no buckets yet)",
		Long: `Start another PostgreSQL (and PgBouncer) in the local cluster, with the
settings of the others, migrate it, and register it in the cluster's catalog
as a new epoch whose map has the shard with the next free ordinal and no
buckets (empty: true): it owns nothing until ranges are moved to it. The
catalog's new map is also written to DIR/pgshard.yaml, so commands that read
the map from the config see the shard. The registration is a
compare-and-swap on the catalog's epoch.

The cluster needs a catalog: run "pgshard dev up --catalog" first. The name
defaults to shardK (K the ordinal). An add interrupted (Ctrl-C) leaves
nothing running that the cluster's state does not know; running the same
add-shard again finishes it, dev down stops it.`,
		Args: cobra.NoArgs,
	}
	dir := addDirFlag(cmd)
	cmd.Flags().StringVar(&name, "name", "", "the new shard's name (default shardK, K its ordinal)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		findDevDir(cmd, dir)
		if err := devAddShard(cmd, *dir, name); err != nil {
			return noDevCluster(cmd, *dir, err)
		}
		return nil
	}
	return cmd
}

func devAddShard(cmd *cobra.Command, dir, name string) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	lc, err := cluster.Load(dir)
	if err != nil {
		return err
	}
	cfg, err := config.Load(config.Options{Path: devConfigPath(dir), Environ: []string{}, RequireMap: true})
	if err != nil {
		return fmt.Errorf("the cluster in %s has no usable config (run pgshard dev up --catalog --dir %s again): %w", dir, dir, err)
	}
	if cfg.Catalog.DSN == "" {
		return fmt.Errorf("the cluster in %s has no catalog to register the shard in: run `pgshard dev up --catalog --dir %s` first", dir, dir)
	}
	tlsFiles, err := devTLSFiles(dir, cfg)
	if err != nil {
		return err
	}
	cat, err := catalog.Open(ctx, cfg.Catalog.DSN, catalog.Options{ApplicationName: "pgshard dev add-shard"})
	if err != nil {
		return err
	}
	defer cat.Close()
	lctx, cancel := context.WithTimeout(ctx, catalogTimeout)
	cur, err := cat.Load(lctx)
	cancel()
	if errors.Is(err, catalog.ErrNotInstalled) || errors.Is(err, catalog.ErrEmpty) {
		return fmt.Errorf("%w; `pgshard dev up --catalog --dir %s` installs the catalog and pushes the cluster's map", err, dir)
	}
	if err != nil {
		return err
	}
	inCluster := func(n string) bool {
		return slices.ContainsFunc(lc.Shards, func(s cluster.Shard) bool { return s.Name == n })
	}
	if name == "" && cfg.Map.Epoch < cur.Epoch {
		// An add-shard interrupted after registering a shard, before it
		// wrote the config: finish that one rather than add another.
		for _, sh := range cur.Shards {
			if _, err := cfg.Map.ShardByName(sh.Name); err != nil && inCluster(sh.Name) {
				name = sh.Name
				break
			}
		}
	}
	if name == "" {
		// A shard an interrupted add-shard started but did not register.
		for _, s := range lc.Shards {
			if _, err := cur.ShardByName(s.Name); err != nil {
				name = s.Name
				fmt.Fprintf(cmd.ErrOrStderr(), "%s runs but is not in the catalog: finishing its add\n", s.Name)
				break
			}
		}
	}
	if name != "" {
		if _, err := cur.ShardByName(name); err == nil {
			switch _, cfgErr := cfg.Map.ShardByName(name); {
			case !inCluster(name):
				return fmt.Errorf("shard name %q is taken: the catalog's map (epoch %d) has a shard %q that is not in the cluster in %s; pick another --name",
					name, cur.Epoch, name, dir)
			case cfgErr == nil && cfg.Map.Epoch == cur.Epoch:
				return fmt.Errorf("shard %q already exists: the cluster in %s runs it and the catalog's map (epoch %d) has it; pick another --name",
					name, dir, cur.Epoch)
			default: // registered by an add-shard interrupted before it wrote the config
				if err := writeDevConfig(dir, cur, lc.Spec.PgBouncer, lc.Spec.User, tlsFiles, cfg.Catalog.DSN); err != nil {
					return err
				}
				fmt.Fprintf(out, "%s was already added and registered (catalog epoch %d); wrote that map to %s\n", name, cur.Epoch, devConfigPath(dir))
				return nil
			}
		}
	}

	c, s, err := cluster.AddShard(ctx, dir, name, &lockedWriter{w: cmd.ErrOrStderr()})
	if errors.Is(err, cluster.ErrShardExists) && name != "" {
		// Started by an add-shard that was interrupted before it registered
		// the shard (it is not in the catalog: checked above).
		if c, err = cluster.Load(dir); err == nil {
			s = c.Shards[slices.IndexFunc(c.Shards, func(s cluster.Shard) bool { return s.Name == name })]
		}
	}
	if err != nil {
		return err
	}
	next, err := shardmap.AddEmpty(cur, shardmap.Shard{
		Name: s.Name, Ordinal: s.Ordinal,
		DSN: s.DSN(c.Spec.Database, c.Spec.User), PoolerDSN: s.PoolerDSN(c.Spec.Database, c.Spec.User),
	})
	if err != nil {
		return fmt.Errorf("register %s in the catalog's map (epoch %d): %w", s.Name, cur.Epoch, err)
	}
	// Every shard, as `pgshard migrate` with the new map does: the new one
	// gets the schema and its identity, the others' identities the epoch.
	rep, err := migrations.Apply(ctx, next, migrations.Options{})
	if err != nil {
		if rep != nil {
			_ = rep.WriteText(cmd.ErrOrStderr())
		}
		return fmt.Errorf("migrate %s: %w", s.Name, err)
	}
	pctx, cancel := context.WithTimeout(ctx, catalogTimeout)
	err = cat.Push(pctx, next, cur.Epoch)
	cancel()
	if err != nil {
		return fmt.Errorf("register %s: %w (the shard runs; run dev add-shard --name %s again to register it)", s.Name, err, s.Name)
	}
	if err := writeDevConfig(dir, next, c.Spec.PgBouncer, c.Spec.User, tlsFiles, cfg.Catalog.DSN); err != nil {
		return err
	}
	fmt.Fprintf(out, "added %s (ordinal %d) to the cluster in %s; registered in catalog %s at epoch %d, owning no buckets until ranges are moved to it; config: %s\n",
		s.Name, s.Ordinal, dir, cat.Addr(), next.Epoch, devConfigPath(dir))
	return writeShardTable(out, next)
}
