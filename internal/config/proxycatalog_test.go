package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/internal/config"
)

// TestProxyCatalog: proxy.catalog replaces the map file for the proxy
// (CatalogMap), excludes shardmap_file and shardmap, defaults to
// catalog.dsn (off opts out), and its lease TTL and the fence mode are
// checked; unknown keys stay errors.
func TestProxyCatalog(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "map.yaml", mapYAML)
	const dsn = "postgres://u@h/cat"
	for _, tc := range []struct {
		name, body string
		want       string // error substring; "" = loads
	}{
		{"catalog alone", "proxy:\n  catalog: " + dsn + "\n", ""},
		{"catalog, ttl and fence", "proxy:\n  catalog: " + dsn + "\n  catalog_lease_ttl: 3s\n  fence: off\n", ""},
		{"catalog and map file", "shardmap_file: map.yaml\nproxy:\n  catalog: " + dsn + "\n", "proxy.catalog and shardmap_file/shardmap"},
		{"catalog and inline map", "shardmap:\n" + indent(mapYAML) + "proxy:\n  catalog: " + dsn + "\n", "proxy.catalog and shardmap_file/shardmap"},
		{"bad fence", "shardmap_file: map.yaml\nproxy:\n  fence: maybe\n", `proxy.fence: want auto, on or off (got "maybe")`},
		{"short ttl", "proxy:\n  catalog: " + dsn + "\n  catalog_lease_ttl: 10ms\n", "proxy.catalog_lease_ttl: must be at least 30ms"},
		{"unknown key", "proxy:\n  catalog: " + dsn + "\n  catalog_dsn: x\n", "proxy.catalog_dsn"},
		{"no map, no catalog", "proxy:\n  fence: on\n", "set shardmap_file, shardmap or proxy.catalog"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Load(config.Options{Path: write(t, dir, "c.yaml", tc.body), Environ: []string{}, RequireMap: true, CatalogMap: true})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want one containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Proxy.Catalog != dsn || c.Map != nil {
				t.Fatalf("catalog %q, map %v: want the catalog and no map (the proxy loads it)", c.Proxy.Catalog, c.Map)
			}
		})
	}
	// The rule with catalog.dsn: unset, proxy.catalog is catalog.dsn (a
	// map beside it is a copy); set, it wins; off keeps the config's map.
	const cluster = "postgres://u@h/cluster-cat"
	for _, tc := range []struct {
		name, body string
		environ    []string
		want       string // the catalog the proxy follows
		wantMap    bool
	}{
		{"catalog.dsn alone", "catalog:\n  dsn: " + cluster + "\n", nil, cluster, false},
		{"catalog.dsn and a map copy", "shardmap_file: map.yaml\ncatalog:\n  dsn: " + cluster + "\n", nil, cluster, true},
		{"proxy.catalog overrides catalog.dsn", "catalog:\n  dsn: " + cluster + "\nproxy:\n  catalog: " + dsn + "\n", nil, dsn, false},
		{"off keeps the map", "shardmap_file: map.yaml\ncatalog:\n  dsn: " + cluster + "\nproxy:\n  catalog: off\n", nil, "", true},
		{"off from the environment", "shardmap_file: map.yaml\ncatalog:\n  dsn: " + cluster + "\n", []string{"PGSHARD_PROXY_CATALOG=OFF"}, "", true},
		{"neither", "shardmap_file: map.yaml\n", nil, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append([]string{}, tc.environ...)
			c, err := config.Load(config.Options{Path: write(t, dir, "c.yaml", tc.body), Environ: env, RequireMap: true, CatalogMap: true})
			if err != nil {
				t.Fatal(err)
			}
			if c.Proxy.Catalog != tc.want || (c.Map != nil) != tc.wantMap {
				t.Fatalf("proxy follows %q (map %v), want %q (map: %t)", c.Proxy.Catalog, c.Map != nil, tc.want, tc.wantMap)
			}
		})
	}
	// Without CatalogMap (every other command) a catalog is no map.
	if _, err := config.Load(config.Options{Path: write(t, dir, "c.yaml", "proxy:\n  catalog: "+dsn+"\n"), Environ: []string{}, RequireMap: true}); err == nil {
		t.Fatal("RequireMap without CatalogMap accepted a config whose only map source is proxy.catalog")
	}
	c, err := config.Load(config.Options{Path: write(t, dir, "c.yaml", "{}\n"), Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Proxy.Fence != "auto" || c.Proxy.CatalogLeaseTTL != 10*time.Second || c.Proxy.Catalog != "" {
		t.Fatalf("defaults: fence %q, ttl %v, catalog %q", c.Proxy.Fence, c.Proxy.CatalogLeaseTTL, c.Proxy.Catalog)
	}
}
