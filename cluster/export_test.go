package cluster

// SetBeforeServerStart installs f to be called with a server's kind
// ("postgres" or "pgbouncer") and port just before it is started, and
// returns a function that removes it.
func SetBeforeServerStart(f func(kind string, port int)) (restore func()) {
	old := beforeServerStart
	beforeServerStart = f
	return func() { beforeServerStart = old }
}
