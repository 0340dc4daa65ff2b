package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

func newDevCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "A local multi-shard cluster (PostgreSQL + PgBouncer per shard) for development",
	}
	cmd.AddCommand(newDevUpCmd(), newDevStatusCmd(), newDevDownCmd(), newDevAddShardCmd())
	return cmd
}

// devConfigPath is the config `dev up` writes.
func devConfigPath(dir string) string { return filepath.Join(dir, "pgshard.yaml") }

// addDirFlag adds --dir to a dev command. Its value is the directory to use
// only once findDevDir has run (in RunE): without --dir it is the cluster
// found from the working directory.
func addDirFlag(cmd *cobra.Command) *string {
	p := new(string)
	cmd.Flags().StringVar(p, "dir", config.DefaultDevDir, "state directory of the local cluster (default: the nearest cluster at or above the working directory — the directory itself or a parent holding "+cluster.StateFile+", or its "+config.DefaultDevDir+" — else ./"+config.DefaultDevDir+")")
	return p
}

// maxDevDirDepth bounds the walk up from the working directory.
const maxDevDirDepth = 256

// findDevDir sets *dir, when --dir was not given, to the cluster a dev
// command works on, found as git finds .git: the nearest directory at or
// above the working directory that is a cluster's (holds cluster.json) or
// has one in .pgshard; none found, ./.pgshard (where dev up makes one). A
// cluster in ./.pgshard keeps the relative name; one found elsewhere is
// named by its absolute path.
func findDevDir(cmd *cobra.Command, dir *string) {
	if cmd.Flags().Changed("dir") {
		return
	}
	wd, err := os.Getwd()
	if err != nil {
		return
	}
	here := filepath.Join(wd, config.DefaultDevDir)
	for d, i := wd, 0; i < maxDevDirDepth; i++ {
		for _, c := range []string{d, filepath.Join(d, config.DefaultDevDir)} {
			if !fileExists(filepath.Join(c, cluster.StateFile)) {
				continue
			}
			if c != here {
				*dir = c
			}
			return
		}
		up := filepath.Dir(d)
		if up == d {
			return
		}
		d = up
	}
}

// noDevCluster explains a missing cluster: the path tried, how it was
// chosen, and the flag that names another.
func noDevCluster(cmd *cobra.Command, dir string, err error) error {
	if !errors.Is(err, cluster.ErrNoCluster) {
		return err
	}
	abs := absPath(dir)
	if cmd.Flags().Changed("dir") {
		return fmt.Errorf("no cluster in %s (--dir %s): pass --dir with the directory `pgshard dev up --dir DIR` made, or run `pgshard dev up --dir %s` to start one there", abs, dir, dir)
	}
	return fmt.Errorf("no cluster in %s: none found here or above (a directory holding %s, or one with %s/%s); pass --dir DIR, the directory `pgshard dev up --dir DIR` made (default %s), or run `pgshard dev up` to start one in %s",
		abs, cluster.StateFile, config.DefaultDevDir, cluster.StateFile, config.DefaultDevDir, abs)
}

func newDevUpCmd() *cobra.Command {
	var shards, buckets int
	var pgbouncer, fsync, withProxy, withTLS, withCatalog, withCatalogServer bool
	var proxyBin, poolMode string
	var proxyPort int
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start (or reuse) a local cluster, migrate it and write DIR/pgshard.yaml",
		Long: `Start N PostgreSQL servers on free loopback ports (and one PgBouncer per shard
in transaction pooling mode), migrate every shard, and write DIR/pgshard.yaml:
the config with the shard map, which later pgshard commands in this directory
find by themselves. Running "up" again on the same DIR reuses the cluster.
Ctrl-C while starting stops everything started so far.

The config's proxy section turns on the admin console (database
pgshard_admin, for the cluster user), Prometheus metrics (a free port) and
PgBouncer readings; --proxy runs the proxy (dev status --json reports
proxy_dsn, admin_dsn and metrics_url) on the port it had last in DIR
while that is free, or on --proxy-port. --tls makes a local CA and a server
certificate in DIR/tls, turns TLS on in every PostgreSQL and in the proxy
(tls.mode allow: verify with sslmode=verify-full sslrootcert=DIR/tls/ca.crt;
plain-text clients still work, set require to refuse them).

--catalog puts the shard map's catalog in the database pgshard_catalog on
shard0's server (or the catalog server's, see --catalog-server): it
installs the catalog, pushes the map (when the catalog holds none yet)
and sets catalog.dsn in DIR/pgshard.yaml; dev add-shard
and pgshard reshard need it, and the dev proxy follows it (proxy.catalog
defaults to catalog.dsn; a running dev proxy is restarted on it). Once set,
later runs keep it, and on a reused cluster take the catalog's map (ranges
moved by reshard included) to migrate with and to write into the config.

--catalog-server (which implies --catalog) runs one more PostgreSQL, no
shard's, in DIR/catalog (its own data directory, port and log, no
PgBouncer) and puts the catalog database there instead of on shard0's
server: every shard's server can then crash without taking the catalog
along (the chaos runs with moves make their run's catalog there too). dev
status shows it, dev down stops it with the shards, and a reused cluster
keeps it. It is added to a reused cluster only while that has no catalog
yet (one on shard0's server stays there).

--shards sizes a new cluster: a reused one keeps all its shards (one grown
by dev add-shard is not refused for having more than asked).`,
		Args: cobra.NoArgs,
	}
	dir := addDirFlag(cmd)
	cmd.Flags().IntVar(&shards, "shards", cluster.DefaultShards, "number of shards")
	cmd.Flags().IntVar(&buckets, "buckets", shardmap.DefaultBuckets, "bucket count B (power of two, fixed for the cluster's life)")
	cmd.Flags().BoolVar(&pgbouncer, "pgbouncer", true, "run one PgBouncer (transaction mode) per shard")
	cmd.Flags().BoolVar(&fsync, "fsync", true, "fsync on (off is faster and still survives process crashes, not OS crashes)")
	cmd.Flags().BoolVar(&withProxy, "proxy", false, "also run a pgshard proxy for the cluster (detached; trusts the cluster user; dev down stops it)")
	cmd.Flags().BoolVar(&withTLS, "tls", false, "make a local CA and certificates (DIR/tls) and turn TLS on in PostgreSQL and the proxy")
	cmd.Flags().BoolVar(&withCatalog, "catalog", false, "keep the shard map in a catalog (database "+devCatalogDatabase+" on shard0's server, or the catalog server's with --catalog-server) and name it in the config")
	cmd.Flags().BoolVar(&withCatalogServer, "catalog-server", false, "run the catalog on a PostgreSQL server of its own (DIR/"+cluster.CatalogServerName+"), not shard0's; implies --catalog")
	cmd.Flags().StringVar(&proxyBin, "proxy-bin", "", "pgshard binary to run the proxy with (default: this one)")
	cmd.Flags().StringVar(&poolMode, "pool-mode", "", "with --proxy: transaction (default) or session pooling")
	cmd.Flags().IntVar(&proxyPort, "proxy-port", 0, "with --proxy: the port it listens on (default: its port of the last run in DIR while free, else a free one)")
	_ = cmd.Flags().MarkHidden("proxy-bin")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		switch {
		case proxyPort != 0 && !withProxy:
			return errors.New("--proxy-port needs --proxy")
		case proxyPort < 0 || proxyPort > 65535:
			return fmt.Errorf("--proxy-port %d: not a TCP port (1-65535)", proxyPort)
		}
		findDevDir(cmd, dir)
		loaded, loadErr := cluster.Load(*dir)
		fresh := loadErr != nil
		var grownNote string
		if !fresh && (!cmd.Flags().Changed("shards") || shards < len(loaded.Shards)) {
			// It may have grown (dev add-shard): --shards is the size of a
			// new cluster, and a reused one keeps the shards it has.
			if shards < len(loaded.Shards) && cmd.Flags().Changed("shards") {
				grownNote = fmt.Sprintf("asked for %d shards; %s holds %d (--shards sizes a new cluster; a reused one keeps every shard it has, those dev add-shard added too): reusing them all", shards, *dir, len(loaded.Shards))
			}
			shards = len(loaded.Shards)
		}
		prevCatalog := devConfigCatalog(*dir)
		if err := checkCatalogServer(loaded, prevCatalog, withCatalogServer); err != nil {
			return err
		}
		withCatalog = withCatalog || withCatalogServer
		spec := cluster.Spec{Shards: shards, PgBouncer: pgbouncer, CatalogServer: withCatalogServer, Fsync: fsync, Log: &lockedWriter{w: cmd.ErrOrStderr()}}
		var tlsFiles *cluster.TLSFiles
		if withTLS {
			f, err := cluster.WriteTLSFiles(devTLSDir(*dir))
			if err != nil {
				return err
			}
			tlsFiles = &f
			spec.Settings = f.PostgresSettings()
		}
		c, err := cluster.Up(ctx, *dir, spec)
		if err != nil {
			return err
		}
		catalogDSN := prevCatalog
		if withCatalog || prevCatalog != "" {
			catalogDSN = devCatalogDSN(c) // its server may have moved to another port
		}
		m, reused, err := devMap(c, *dir, buckets)
		cfgEpoch := uint64(0)
		if m != nil && reused {
			cfgEpoch = m.Epoch
		}
		var fromCatalog bool
		if err == nil && prevCatalog != "" {
			// The catalog is the source of truth: ranges moved by reshard
			// and shards added are in its map, maybe not yet in the
			// config's copy (and migrating by an older map is refused).
			var cm *shardmap.Map
			if cm, err = devCatalogMap(ctx, c, catalogDSN, buckets); err == nil && cm != nil {
				m, reused, fromCatalog = cm, true, true
			}
		}
		if err == nil {
			var rep *migrations.Report
			rep, err = migrations.Apply(ctx, m, migrations.Options{})
			if err != nil && rep != nil {
				_ = rep.WriteText(cmd.ErrOrStderr())
			}
		}
		var catalogNote string
		if err == nil && catalogDSN != "" {
			catalogNote, err = ensureDevCatalog(ctx, c, catalogDSN, m)
		}
		rewrite := !reused || withTLS || catalogDSN != prevCatalog || (fromCatalog && m.Epoch != cfgEpoch)
		if err == nil && reused && rewrite && !withTLS {
			// Rewritten for the catalog or its map only: keep the proxy's
			// TLS section.
			if prev, perr := config.Load(config.Options{Path: devConfigPath(*dir), Environ: []string{}}); perr == nil {
				tlsFiles, err = devTLSFiles(*dir, prev)
			}
		}
		if err == nil && rewrite {
			err = writeDevConfig(*dir, m, pgbouncer, c.Spec.User, tlsFiles, catalogDSN)
		}
		if err != nil {
			if fresh && ctx.Err() != nil {
				// Interrupted on a cluster this run started: leave nothing behind.
				_ = cluster.Down(context.WithoutCancel(ctx), *dir, false)
			}
			return err
		}
		out := cmd.OutOrStdout()
		verb := "started"
		if !fresh {
			verb = "reused"
		}
		if grownNote != "" {
			fmt.Fprintln(out, grownNote)
		}
		source := ""
		if fromCatalog {
			source = ", from the catalog"
		}
		fmt.Fprintf(out, "%s %d-shard cluster in %s (map epoch %d%s, %d buckets); config: %s\n",
			verb, len(c.Shards), *dir, m.Epoch, source, m.Buckets, devConfigPath(*dir))
		if err := writeShardTable(out, m); err != nil {
			return err
		}
		if names := unregistered(c, m); len(names) > 0 {
			fmt.Fprintf(out, "\nnot in the map (an interrupted dev add-shard): %s; `pgshard dev add-shard --dir %s` finishes adding it\n",
				strings.Join(names, ", "), *dir)
		}
		if catalogNote != "" {
			fmt.Fprintf(out, "\n%s\n", catalogNote)
		}
		if catalogDSN != prevCatalog {
			// The proxy takes its map source at start (catalog.dsn, the
			// rule on config.Proxy.Catalog): one started before the
			// catalog was named, or by another address, must restart.
			stopped, err := stopDevProxy(ctx, *dir)
			if err != nil {
				return err
			}
			if stopped && !withProxy {
				fmt.Fprintf(out, "\nstopped the dev proxy: the config's map source changed; `pgshard dev up --proxy --dir %s` starts it on the new one\n", *dir)
			}
		}
		if withProxy {
			r, reused, err := startDevProxy(ctx, *dir, proxyBin, c.Spec.User, poolMode, proxyPort)
			if err != nil {
				return err
			}
			verb := "started"
			if reused {
				verb = "reused"
			}
			fmt.Fprintf(out, "\nproxy %s: %s (pid %d, log %s)\n", verb, devProxyDSN(r, c.Spec.User, c.Spec.Database), r.PID, devProxyLog(*dir))
			if catalogDSN != "" {
				fmt.Fprintf(out, "it follows the catalog %s (catalog.dsn; each new epoch is a new map, reshard moves included)\n", store.RedactDSN(catalogDSN))
			} else {
				fmt.Fprintln(out, "it routes by the config's map (dev up --catalog makes it follow a catalog)")
			}
			if r.AdminDatabase != "" {
				fmt.Fprintf(out, "admin console: %s\n", devProxyDSN(r, c.Spec.User, r.AdminDatabase))
			}
			if r.MetricsAddr != "" {
				fmt.Fprintf(out, "metrics: http://%s/metrics\n", r.MetricsAddr)
			}
			if r.TLS != "" && r.TLS != "disable" {
				fmt.Fprintf(out, "TLS (%s): sslmode=verify-full sslrootcert=%s\n", r.TLS, filepath.Join(devTLSDir(*dir), "ca.crt"))
			}
		}
		fmt.Fprintf(out, "\nstop it with: pgshard dev down --dir %s\n", *dir)
		return nil
	}
	return cmd
}

// devMap returns the map for the cluster: the one in DIR/pgshard.yaml when it
// still describes these shards (it may have been replanned), else an even
// split. reused reports the former.
func devMap(c *cluster.Cluster, dir string, buckets int) (*shardmap.Map, bool, error) {
	fresh, err := c.Map(buckets)
	if err != nil {
		return nil, false, err
	}
	cfg, err := config.Load(config.Options{Path: devConfigPath(dir), Environ: []string{}})
	if err != nil || cfg.Map == nil {
		return fresh, false, nil
	}
	if sameShards(cfg.Map, fresh) || coversShards(cfg.Map, fresh) {
		return cfg.Map, true, nil
	}
	return fresh, false, nil
}

// coversShards reports whether every shard of the config's map is one of
// the cluster's, unchanged, and the cluster has more: shards that dev
// add-shard started but did not register yet (interrupted), which the map
// must not get by a re-split.
func coversShards(cfgMap, running *shardmap.Map) bool {
	if cfgMap.Buckets != running.Buckets || len(cfgMap.Shards) >= len(running.Shards) {
		return false
	}
	for _, s := range cfgMap.Shards {
		c, err := running.ShardByName(s.Name)
		if err != nil {
			return false
		}
		x, y := s, *c
		x.Empty, y.Empty = false, false
		if x != y {
			return false
		}
	}
	return true
}

// unregistered lists the cluster's shards that m does not have.
func unregistered(c *cluster.Cluster, m *shardmap.Map) []string {
	var out []string
	for _, s := range c.Shards {
		if _, err := m.ShardByName(s.Name); err != nil {
			out = append(out, s.Name)
		}
	}
	return out
}

func sameShards(a, b *shardmap.Map) bool {
	if len(a.Shards) != len(b.Shards) || a.Buckets != b.Buckets {
		return false
	}
	for i := range a.Shards {
		x, y := a.Shards[i], b.Shards[i]
		x.Empty, y.Empty = false, false // a shard added empty is still the shard
		if x != y {
			return false
		}
	}
	return true
}

// devAdminDatabase is the dev proxy's admin console database (the data
// database of a dev cluster is called pgshard, the console's default name).
const devAdminDatabase = "pgshard_admin"

// devTLSDir holds the dev cluster's CA and certificates (dev up --tls).
func devTLSDir(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return filepath.Join(dir, "tls")
}

func writeDevConfig(dir string, m *shardmap.Map, pooler bool, user string, tlsFiles *cluster.TLSFiles, catalogDSN string) error {
	data, err := m.Marshal()
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("# Written by `pgshard dev up`. Used by pgshard commands run in this\n")
	b.WriteString("# directory's parent (or pass --config / set PGSHARD_CONFIG).\n")
	fmt.Fprintf(&b, "store:\n  use_pooler: %t\n", pooler)
	b.WriteString("proxy:\n")
	b.WriteString("  # The admin console: psql -d " + devAdminDatabase + " (the data database is pgshard).\n")
	fmt.Fprintf(&b, "  admin_users: [%s]\n  admin_database: %s\n", user, devAdminDatabase)
	b.WriteString("  # Prometheus metrics on a free port (dev status --json: metrics_url).\n")
	b.WriteString("  metrics_listen: 127.0.0.1:0\n")
	if pooler {
		fmt.Fprintf(&b, "  # Read each PgBouncer's SHOW POOLS/STATS (SHOW SHARDS, metrics).\n  pgbouncer:\n    admin_user: %s\n", user)
	}
	if tlsFiles != nil {
		fmt.Fprintf(&b, "  # TLS: verify with sslmode=verify-full sslrootcert=%s\n", tlsFiles.CA)
		fmt.Fprintf(&b, "  tls:\n    mode: allow\n    cert_file: %s\n    key_file: %s\n", tlsFiles.Cert, tlsFiles.Key)
	}
	if catalogDSN != "" {
		b.WriteString("# The shard map's catalog (dev up --catalog); the map below is a copy of\n")
		b.WriteString("# its current epoch, for the commands that read the map from this file.\n")
		fmt.Fprintf(&b, "catalog:\n  dsn: %s\n", catalogDSN)
	}
	b.WriteString("shardmap:\n")
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if line != "" {
			b.WriteString("  " + line)
		}
	}
	tmp := devConfigPath(dir) + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, devConfigPath(dir))
}

// devShardJSON is one shard in `dev status --json`.
type devShardJSON struct {
	Name      string   `json:"name"`
	Ordinal   int      `json:"ordinal"`
	DSN       string   `json:"dsn"`
	PoolerDSN string   `json:"pooler_dsn"`
	Buckets   []int    `json:"buckets"` // [lo, hi] of the first range
	Ranges    [][2]int `json:"ranges"`
	PID       int      `json:"pid"`
	Ready     bool     `json:"ready"`
	PoolerPID int      `json:"pooler_pid,omitempty"`
	PoolerOK  bool     `json:"pooler_ready,omitempty"`
	// Unregistered: the cluster runs the shard but the map does not have
	// it (a dev add-shard was interrupted before registering it).
	Unregistered bool `json:"unregistered,omitempty"`
}

type devStatusJSON struct {
	Dir      string         `json:"dir"`
	Config   string         `json:"config"`
	Epoch    uint64         `json:"map_epoch"`
	NBuckets int            `json:"bucket_count"`
	Shards   []devShardJSON `json:"shards"`
	// ProxyDSN connects to the dev proxy (dev up --proxy), "" if none runs.
	ProxyDSN string `json:"proxy_dsn,omitempty"`
	ProxyPID int    `json:"proxy_pid,omitempty"`
	// AdminDSN connects to the dev proxy's admin console; MetricsURL is its
	// Prometheus endpoint ("" if off or no proxy runs).
	AdminDSN   string `json:"admin_dsn,omitempty"`
	MetricsURL string `json:"metrics_url,omitempty"`
	// ProxyTLS is the proxy's client TLS mode; TLSCA the CA to verify it
	// (and the shards' PostgreSQL) with, after dev up --tls.
	ProxyTLS string `json:"proxy_tls,omitempty"`
	TLSCA    string `json:"tls_ca,omitempty"`
	// CatalogDSN is the config's catalog.dsn (dev up --catalog), "" for
	// none.
	CatalogDSN string `json:"catalog_dsn,omitempty"`
	// CatalogServer is the cluster's catalog server (dev up
	// --catalog-server), nil without one.
	CatalogServer *devCatalogServerJSON `json:"catalog_server,omitempty"`
}

// devCatalogServerJSON is the catalog server in `dev status --json`.
type devCatalogServerJSON struct {
	// DSN connects to its maintenance database (postgres).
	DSN   string `json:"dsn"`
	Log   string `json:"log"`
	PID   int    `json:"pid"`
	Ready bool   `json:"ready"`
}

func newDevStatusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the local cluster: shards, DSNs, bucket ranges, liveness",
		Args:  cobra.NoArgs,
	}
	dir := addDirFlag(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		findDevDir(cmd, dir)
		st, err := devStatus(cmd.Context(), *dir)
		if err != nil {
			return noDevCluster(cmd, *dir, err)
		}
		if asJSON {
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		}
		return writeDevStatus(cmd.OutOrStdout(), st)
	}
	return cmd
}

func devStatus(ctx context.Context, dir string) (*devStatusJSON, error) {
	c, err := cluster.Load(dir)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Load(config.Options{Path: devConfigPath(dir), Environ: []string{}, RequireMap: true})
	if err != nil {
		return nil, fmt.Errorf("cluster in %s has no usable config (run pgshard dev up again): %w", dir, err)
	}
	m := cfg.Map
	st := &devStatusJSON{Dir: dir, Config: cfg.Path, Epoch: m.Epoch, NBuckets: m.Buckets}
	if r := readDevProxy(dir); r != nil {
		st.ProxyDSN, st.ProxyPID = devProxyDSN(r, c.Spec.User, c.Spec.Database), r.PID
		if r.AdminDatabase != "" {
			st.AdminDSN = devProxyDSN(r, c.Spec.User, r.AdminDatabase)
		}
		if r.MetricsAddr != "" {
			st.MetricsURL = "http://" + r.MetricsAddr + "/metrics"
		}
		st.ProxyTLS = r.TLS
	}
	if ca := filepath.Join(devTLSDir(dir), "ca.crt"); fileExists(ca) {
		st.TLSCA = ca
	}
	st.CatalogDSN = cfg.Catalog.DSN
	if l, ok := c.CatalogStatus(ctx); ok {
		st.CatalogServer = &devCatalogServerJSON{DSN: l.Shard.DSN("postgres", c.Spec.User), Log: l.Shard.LogPath(),
			PID: l.Postgres.PID, Ready: l.Postgres.Ready}
	}
	live := map[string]cluster.ShardStatus{}
	for _, l := range c.Status(ctx) {
		live[l.Shard.Name] = l
	}
	for _, s := range m.Shards {
		j := devShardJSON{Name: s.Name, Ordinal: s.Ordinal, DSN: s.DSN, PoolerDSN: s.PoolerDSN, Ranges: [][2]int{}}
		for _, r := range m.RangesOf(s.Name) {
			j.Ranges = append(j.Ranges, [2]int{r.Lo, r.Hi})
		}
		if len(j.Ranges) > 0 {
			j.Buckets = []int{j.Ranges[0][0], j.Ranges[0][1]}
		}
		if l, ok := live[s.Name]; ok {
			j.PID, j.Ready = l.Postgres.PID, l.Postgres.Ready
			j.PoolerPID, j.PoolerOK = l.Pooler.PID, l.Pooler.Ready
		}
		st.Shards = append(st.Shards, j)
	}
	for _, name := range unregistered(c, m) {
		l := live[name]
		st.Shards = append(st.Shards, devShardJSON{Name: name, Ordinal: l.Shard.Ordinal, Ranges: [][2]int{}, Unregistered: true,
			DSN: l.Shard.DSN(c.Spec.Database, c.Spec.User), PoolerDSN: l.Shard.PoolerDSN(c.Spec.Database, c.Spec.User),
			PID: l.Postgres.PID, Ready: l.Postgres.Ready, PoolerPID: l.Pooler.PID, PoolerOK: l.Pooler.Ready})
	}
	return st, nil
}

func writeDevStatus(w io.Writer, st *devStatusJSON) error {
	fmt.Fprintf(w, "cluster %s, map epoch %d, %d buckets, config %s\n", st.Dir, st.Epoch, st.NBuckets, st.Config)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tORDINAL\tBUCKETS\tPOSTGRES\tPGBOUNCER\tDSN\tPOOLER DSN")
	for _, s := range st.Shards {
		var rs []string
		for _, r := range s.Ranges {
			rs = append(rs, fmt.Sprintf("%d-%d", r[0], r[1]))
		}
		switch {
		case s.Unregistered:
			rs = []string{"not in the map"}
		case len(rs) == 0:
			rs = []string{"none (empty)"}
		}
		pg := liveness(s.PID, s.Ready)
		pb := "-"
		if s.PoolerDSN != "" {
			pb = liveness(s.PoolerPID, s.PoolerOK)
		}
		pooler := s.PoolerDSN
		if pooler == "" {
			pooler = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Ordinal, strings.Join(rs, ","), pg, pb, s.DSN, pooler)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if st.ProxyDSN != "" {
		fmt.Fprintf(w, "proxy: %s (pid %d)\n", st.ProxyDSN, st.ProxyPID)
	}
	if st.AdminDSN != "" {
		fmt.Fprintf(w, "admin console: %s\n", st.AdminDSN)
	}
	if st.MetricsURL != "" {
		fmt.Fprintf(w, "metrics: %s\n", st.MetricsURL)
	}
	if st.TLSCA != "" {
		fmt.Fprintf(w, "TLS CA: %s\n", st.TLSCA)
	}
	if st.CatalogDSN != "" {
		fmt.Fprintf(w, "catalog: %s\n", store.RedactDSN(st.CatalogDSN))
	}
	if cs := st.CatalogServer; cs != nil {
		fmt.Fprintf(w, "catalog server: %s, %s (log %s)\n", liveness(cs.PID, cs.Ready), cs.DSN, cs.Log)
	}
	return nil
}

// absPath is p made absolute, or p when that fails.
func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func liveness(pid int, ready bool) string {
	switch {
	case ready:
		return fmt.Sprintf("up (pid %d)", pid)
	case pid > 0:
		return fmt.Sprintf("NOT READY (pid %d)", pid)
	}
	return "down"
}

func newDevDownCmd() *cobra.Command {
	var purge bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop everything the local cluster started (by PID)",
		Args:  cobra.NoArgs,
	}
	dir := addDirFlag(cmd)
	cmd.Flags().BoolVar(&purge, "purge", false, "also delete the state directory (data, logs, config)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		findDevDir(cmd, dir)
		if _, err := os.Stat(*dir); errors.Is(err, os.ErrNotExist) {
			where := "--dir " + *dir
			if !cmd.Flags().Changed("dir") {
				where = "no cluster here or above; pass --dir DIR for one elsewhere"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "nothing to stop: %s does not exist (%s)\n", absPath(*dir), where)
			return nil
		}
		if stopped, err := stopDevProxy(cmd.Context(), *dir); err != nil {
			return err
		} else if stopped {
			fmt.Fprintln(cmd.OutOrStdout(), "stopped the proxy")
		}
		if err := cluster.Down(cmd.Context(), *dir, purge); err != nil {
			return err
		}
		msg := "stopped the cluster in " + *dir
		if purge {
			msg += " and removed it"
		}
		fmt.Fprintln(cmd.OutOrStdout(), msg)
		return nil
	}
	return cmd
}

// lockedWriter serializes writes: the cluster logs progress from one
// goroutine per shard, and the command's stderr need not be safe for that.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
