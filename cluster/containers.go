package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	dockernet "github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
	"golang.org/x/sync/errgroup"
)

// Container images of the testcontainers provider; the environment
// variables PGSHARD_POSTGRES_IMAGE and PGSHARD_PGBOUNCER_IMAGE override them.
const (
	PostgresImage  = "postgres:15"
	PgBouncerImage = "edoburu/pgbouncer:1.18.0"
)

const containersName = "testcontainers"

// Containers returns the provider that runs each shard as a postgres:15
// container (testcontainers-go's postgres module) and, with Spec.PgBouncer,
// a PgBouncer container per shard in transaction mode, all on one Docker
// network, with their ports published on 127.0.0.1 only.
//
// It needs a healthy Docker engine. Its containers are removed by Down, and
// by testcontainers' reaper when the starting process exits, so the cluster
// cannot outlive it: dir is not used and no state file is written. The fault
// hooks return ErrNotSupported (a restarted container would get new ports).
func Containers() Provider { return containersProvider{} }

type containersProvider struct{}

func (containersProvider) Name() string { return containersName }

// Available runs the testcontainers provider's health check (bounded to
// 15 s), inside a recover: the Docker client panics on some broken setups.
func (containersProvider) Available(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: testcontainers: Docker health check panicked: %v", ErrUnavailable, r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	p, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return fmt.Errorf("%w: testcontainers: no Docker engine: %w", ErrUnavailable, err)
	}
	defer p.Close()
	if err := p.Health(ctx); err != nil {
		return fmt.Errorf("%w: testcontainers: Docker engine is not healthy: %w", ErrUnavailable, err)
	}
	return nil
}

// AvailableFor is Available: the images are pulled on demand.
func (p containersProvider) AvailableFor(ctx context.Context, _ Spec) error { return p.Available(ctx) }

func (p containersProvider) Up(ctx context.Context, dir string, spec Spec) (_ *Cluster, err error) {
	spec = spec.withDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.CatalogServer {
		return nil, fmt.Errorf("testcontainers: a catalog server (Spec.CatalogServer): %w (the local provider runs one)", ErrNotSupported)
	}
	if err := p.Available(ctx); err != nil {
		return nil, err
	}
	cb := &containerBackend{pgs: make([]testcontainers.Container, spec.Shards), bouncers: make([]testcontainers.Container, spec.Shards)}
	c := &Cluster{Dir: dir, Provider: containersName, Spec: spec, backend: cb, Shards: make([]Shard, spec.Shards)}
	defer func() {
		if err != nil {
			_ = cb.down(context.WithoutCancel(ctx), c)
			if ctx.Err() != nil {
				err = fmt.Errorf("cluster up (testcontainers) interrupted: %w", ctx.Err())
			}
		}
	}()
	start := time.Now()
	nw, err := network.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("create docker network: %w", err)
	}
	cb.network = nw
	g, gctx := errgroup.WithContext(ctx)
	for i := range spec.Shards {
		g.Go(func() error {
			s, err := cb.upShard(gctx, nw, spec, i)
			if err != nil {
				return fmt.Errorf("shard%d: %w", i, err)
			}
			c.Shards[i] = s
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	spec.logf("cluster of %d shards up in containers (%v)", spec.Shards, time.Since(start).Round(time.Millisecond))
	return c, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// loopbackPorts publishes the container ports on 127.0.0.1 only, on
// ephemeral host ports.
func loopbackPorts(ports ...string) testcontainers.CustomizeRequestOption {
	return testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
		if hc.PortBindings == nil {
			hc.PortBindings = dockernet.PortMap{}
		}
		for _, p := range ports {
			hc.PortBindings[dockernet.MustParsePort(p)] = []dockernet.PortBinding{
				{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: "0"},
			}
		}
	})
}

// containerArgs renders the postgres settings as command-line flags (the
// container's listen address and port stay the image's).
func containerArgs(spec Spec) []string {
	args := []string{"postgres"}
	for _, line := range strings.Split(spec.postgresConf(5432), "\n") {
		k, v, ok := strings.Cut(line, " = ")
		if !ok || slices.Contains(ownedSettings, k) || strings.HasPrefix(k, "#") {
			continue
		}
		v = strings.ReplaceAll(strings.Trim(v, "'"), "''", "'")
		args = append(args, "-c", k+"="+v)
	}
	return args
}

type containerBackend struct {
	mu       sync.Mutex
	network  *testcontainers.DockerNetwork
	pgs      []testcontainers.Container
	bouncers []testcontainers.Container
}

func (cb *containerBackend) set(list []testcontainers.Container, i int, ctr testcontainers.Container) {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	list[i] = ctr
}

func mappedPort(ctx context.Context, ctr testcontainers.Container, port string) (int, error) {
	p, err := ctr.MappedPort(ctx, port)
	if err != nil {
		return 0, err
	}
	return int(p.Num()), nil
}

func (cb *containerBackend) upShard(ctx context.Context, nw *testcontainers.DockerNetwork, spec Spec, i int) (Shard, error) {
	name := "shard" + strconv.Itoa(i)
	s := Shard{Name: name, Ordinal: i, Host: "127.0.0.1"}
	spec.logf("starting %s in a %s container", name, envOr("PGSHARD_POSTGRES_IMAGE", PostgresImage))
	pg, err := tcpostgres.Run(ctx, envOr("PGSHARD_POSTGRES_IMAGE", PostgresImage),
		testcontainers.WithEnv(map[string]string{
			"POSTGRES_HOST_AUTH_METHOD": "trust",
			"POSTGRES_INITDB_ARGS":      "--encoding=UTF8 --locale=C",
		}),
		testcontainers.WithCmd(containerArgs(spec)...),
		network.WithNetwork([]string{name}, nw),
		loopbackPorts("5432/tcp"),
		tcpostgres.BasicWaitStrategies(),
	)
	if pg != nil {
		cb.set(cb.pgs, i, pg)
	}
	if err != nil {
		return s, err
	}
	if s.Port, err = mappedPort(ctx, pg, "5432/tcp"); err != nil {
		return s, err
	}
	if err := waitFor(ctx, name+" postgres container", pg.IsRunning, spec.StartTimeout, func() string { return "" },
		func(ctx context.Context) error { return pingConn(ctx, s.DSN("postgres", DefaultUser), "SELECT 1") }); err != nil {
		return s, err
	}
	if err := provision(ctx, s, spec, spec.Database); err != nil {
		return s, err
	}
	if !spec.PgBouncer {
		return s, nil
	}
	ini := bouncerConfig{
		pgHost: name, pgPort: 5432, listenAddr: "0.0.0.0", listenPort: 6432,
		authFile: "/etc/pgbouncer/userlist.txt", adminUser: spec.User,
	}.render()
	spec.logf("starting %s pgbouncer in a %s container", name, envOr("PGSHARD_PGBOUNCER_IMAGE", PgBouncerImage))
	pb, err := testcontainers.Run(ctx, envOr("PGSHARD_PGBOUNCER_IMAGE", PgBouncerImage),
		testcontainers.WithExposedPorts("6432/tcp"),
		testcontainers.WithFiles(
			testcontainers.ContainerFile{Reader: strings.NewReader(ini), ContainerFilePath: "/etc/pgbouncer/pgbouncer.ini", FileMode: 0o644},
			testcontainers.ContainerFile{Reader: strings.NewReader(authFile(spec)), ContainerFilePath: "/etc/pgbouncer/userlist.txt", FileMode: 0o644},
		),
		network.WithNetwork([]string{name + "-pgbouncer"}, nw),
		loopbackPorts("6432/tcp"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("6432/tcp").WithStartupTimeout(spec.StartTimeout)),
	)
	if pb != nil {
		cb.set(cb.bouncers, i, pb)
	}
	if err != nil {
		return s, err
	}
	if s.PoolerPort, err = mappedPort(ctx, pb, "6432/tcp"); err != nil {
		return s, err
	}
	err = waitFor(ctx, name+" pgbouncer container", pb.IsRunning, spec.StartTimeout, func() string { return "" },
		poolerReady(s.PoolerDSN("pgbouncer", spec.User), s.PoolerDSN(spec.Database, spec.User), "", true))
	return s, err
}

func errContainers(op string) error {
	return fmt.Errorf("%s: %w by the testcontainers provider", op, ErrNotSupported)
}

func (cb *containerBackend) stopShard(context.Context, *Cluster, int, StopMode) error {
	return errContainers("StopShard")
}

func (cb *containerBackend) startShard(context.Context, *Cluster, int) error {
	return errContainers("StartShard")
}

func (cb *containerBackend) stopPooler(context.Context, *Cluster, int, StopMode) error {
	return errContainers("StopPooler")
}

func (cb *containerBackend) startPooler(context.Context, *Cluster, int) error {
	return errContainers("StartPooler")
}

func (cb *containerBackend) alive(_ *Cluster, i int) (bool, bool) {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	running := func(c testcontainers.Container) bool { return c != nil && c.IsRunning() }
	return running(cb.pgs[i]), running(cb.bouncers[i])
}

// down terminates every container, then the network. It is idempotent.
func (cb *containerBackend) down(ctx context.Context, _ *Cluster) error {
	cb.mu.Lock()
	ctrs := slices.Concat(cb.bouncers, cb.pgs)
	clear(cb.bouncers)
	clear(cb.pgs)
	nw := cb.network
	cb.network = nil
	cb.mu.Unlock()
	errs := map[int]error{}
	var emu sync.Mutex
	var wg sync.WaitGroup
	for i, ctr := range ctrs {
		if ctr == nil {
			continue
		}
		wg.Go(func() {
			if err := ctr.Terminate(ctx, testcontainers.StopTimeout(10*time.Second)); err != nil {
				emu.Lock()
				errs[i] = err
				emu.Unlock()
			}
		})
	}
	wg.Wait()
	if nw != nil {
		if err := nw.Remove(ctx); err != nil {
			errs[len(ctrs)] = err
		}
	}
	var all []error
	for _, k := range slices.Sorted(maps.Keys(errs)) {
		all = append(all, errs[k])
	}
	return errors.Join(all...)
}
