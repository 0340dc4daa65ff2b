package proxy

// Several databases on one listener: Config.ExtraDatabases are logical
// databases of their own — an unsharded passthrough to one backend
// database (a map with one shard: every statement is routable there), or
// a sharded database with its own map — like PgBouncer's [databases]. The
// startup packet's dbname picks one; each is a Server of its own (pools,
// routing, health probes), sharing the listener and the logins. Its
// sessions belong to the main Server (SHOW CLIENTS, cancel keys,
// max_clients, pins, graceful shutdown); its pools, routing and
// statistics are its own. A reload keeps the extra databases as they are
// (a changed list is reported as needing a restart), so sessions on them
// are never moved.
//
//	listener ─▶ Server (sessions, console, lifecycle)
//	              └─ generation (Config.Map) ─dbname─▶ sub-Server per ExtraDatabase
//	                                                          (Serve on an idle listener
//	                                                           in the main Serve's group:
//	                                                           pools, monitors, reaper)

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
)

// Database is one logical database served besides the main one.
type Database struct {
	// Name is the database name clients send (dbname).
	Name string
	// Config configures it like a Server of its own: Map, Analyzer,
	// HintKeyType, UsePooler, DefaultShard, PoolMode, VerifyIdentity and
	// the limits. Listen, Users, MetricsListen, Logger and MaxClients are
	// the main server's.
	Config Config
}

// extraDatabases are the servers of Config.ExtraDatabases, by name.
type extraDatabases map[string]*Server

// newExtraDatabases builds the sub-servers of cfg.ExtraDatabases.
func newExtraDatabases(cfg *Config) (extraDatabases, error) {
	var dbs extraDatabases
	for _, d := range cfg.ExtraDatabases {
		if d.Name == "" {
			return nil, fmt.Errorf("proxy config: ExtraDatabases: a database has no name")
		}
		if _, dup := dbs[d.Name]; dup {
			return nil, fmt.Errorf("proxy config: ExtraDatabases: database %q is listed twice", d.Name)
		}
		c := d.Config
		c.Listen, c.Users, c.MetricsListen, c.Logger = cfg.Listen, cfg.Users, "", cfg.Logger.With("database", d.Name)
		c.MaxClients, c.ExtraDatabases, c.Databases = cfg.MaxClients, nil, nil
		// The main server owns the listener, TLS, the console and reloads.
		c.HandoverSocket, c.AdminUsers, c.TLS, c.Reload = "", nil, TLSConfig{}, nil
		sub, err := New(c)
		if err != nil {
			return nil, fmt.Errorf("database %q: %w", d.Name, err)
		}
		if dbs == nil {
			dbs = extraDatabases{}
		}
		dbs[d.Name] = sub
	}
	return dbs, nil
}

// or returns the server of database name: a sub-server, or main.
func (dbs extraDatabases) or(name string, main *Server) *Server {
	if sub := dbs[name]; sub != nil {
		return sub
	}
	return main
}

// verify checks the identity records of the sub-servers that ask for it.
func (dbs extraDatabases) verify(ctx context.Context) (down []string, err error) {
	for name, sub := range dbs {
		if !sub.current().cfg.VerifyIdentity {
			continue
		}
		d, err := sub.Verify(ctx)
		for _, x := range d {
			down = append(down, name+"/"+x)
		}
		if err != nil {
			return down, fmt.Errorf("database %q: %w", name, err)
		}
	}
	return down, nil
}

// serve runs the sub-servers' background work until ctx ends; the main
// listener hands them their clients.
func (dbs extraDatabases) serve(ctx context.Context, g interface{ Go(func() error) }) {
	for _, sub := range dbs {
		g.Go(func() error { return sub.Serve(ctx, newIdleListener()) })
	}
}

// sameDatabases reports whether two ExtraDatabases lists configure the
// same databases (names, maps, pool modes, pooler use, default shards).
func sameDatabases(a, b []Database) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i].Config, b[i].Config
		if a[i].Name != b[i].Name || x.PoolMode != y.PoolMode || x.UsePooler != y.UsePooler ||
			x.DefaultShard != y.DefaultShard || x.MaxPinned != y.MaxPinned || (x.Map == nil) != (y.Map == nil) {
			return false
		}
		if x.Map != nil {
			mx, err1 := x.Map.Marshal()
			my, err2 := y.Map.Marshal()
			if err1 != nil || err2 != nil || !bytes.Equal(mx, my) {
				return false
			}
		}
	}
	return true
}

// idleListener accepts nothing: a sub-server's Serve runs on it.
type idleListener struct {
	once sync.Once
	done chan struct{}
}

func newIdleListener() *idleListener { return &idleListener{done: make(chan struct{})} }

func (l *idleListener) Accept() (net.Conn, error) {
	<-l.done
	return nil, net.ErrClosed
}

func (l *idleListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *idleListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
