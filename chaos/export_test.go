package chaos

import "context"

// WatchPoolers runs the PgBouncer watch of a run (pooler_watch.go) on env
// until ctx is done, with the guard Run gives it set first; it returns
// how many PgBouncers it started again.
func WatchPoolers(ctx context.Context, env *Env) int {
	return watchPoolers(ctx, env)
}

// LookAtPoolers is one look of the watch (run with a guard set).
func LookAtPoolers(ctx context.Context, env *Env) int { return lookAtPoolers(ctx, env) }

// GuardPoolers gives env the pooler guard Run gives it before the faults.
func GuardPoolers(env *Env) { env.poolers = newPoolerGuard() }
