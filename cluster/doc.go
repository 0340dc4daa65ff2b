// Package cluster runs a local multi-shard PostgreSQL cluster: N PostgreSQL
// servers on free loopback ports and, optionally, one PgBouncer per shard in
// transaction pooling mode and one more PostgreSQL of no shard's, the
// catalog server ([Spec.CatalogServer], [Cluster.Catalog]: a home for the
// shard map's catalog that no shard's crash takes down; [Cluster.StopCatalog]
// and [Cluster.StartCatalog] crash and restart it, for chaos). Integration
// tests, the chaos suite and the demo (`pgshard dev up`) all use it.
//
// Two providers start the same [Spec]:
//
//   - [Local] runs the installed binaries (initdb, postgres, pgbouncer) as
//     detached processes in a state directory. Everything it starts is
//     recorded by PID in DIR/cluster.json, so another process can find,
//     stop ([Down]) or fault ([Cluster.StopShard], ...) the cluster later.
//     When the calling process is root the servers run as the "postgres" OS
//     user, since PostgreSQL and PgBouncer refuse to run as root.
//   - [Containers] runs postgres:15 and PgBouncer containers through
//     testcontainers-go where a Docker engine is healthy. Its containers live
//     only as long as the process that started them, and it does not support
//     the fault hooks.
//
// Layout of a local cluster directory:
//
//	DIR/cluster.json          state: spec, binaries, ports and PIDs
//	DIR/.lock                 serializes Up, Down and fault hooks on DIR
//	DIR/shardN/data/          PGDATA (copied from a cached initdb template)
//	DIR/shardN/postgres.log   server log
//	DIR/shardN/pgbouncer.ini  pooler config, userlist.txt, pgbouncer.log, pgbouncer.pid
//	DIR/catalog/data/         the catalog server's PGDATA (Spec.CatalogServer)
//	DIR/catalog/postgres.log  its server log
//
// Every server listens on 127.0.0.1 only, with Unix sockets disabled, and
// trusts loopback connections: it is a development cluster, never a
// production deployment.
//
// Files: spec.go (Spec and its defaults), cluster.go (Cluster, Shard and
// their DSNs, the catalog server's status), binaries.go (finding initdb,
// postgres, pgbouncer), local.go (the Local provider's Up, the catalog
// server's included), add.go (AddShard: one more shard in a running local
// cluster), local_ops.go (Load, Down and the fault hooks: stop, start,
// kill a shard, its PgBouncer or the catalog server), template.go (cached initdb templates),
// proc.go (processes by PID and start time, stops with grace periods),
// state.go (DIR/cluster.json), tls.go (a local CA and server
// certificates), containers.go (the testcontainers provider, which runs no
// catalog server).
//
// Package cluster/clustertest builds on this package to share one cluster
// per test binary.
package cluster
