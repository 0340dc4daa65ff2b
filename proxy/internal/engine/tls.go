package engine

import (
	"crypto/tls"
	"fmt"

	"github.com/pgshard/pgshard/proxy/internal/auth"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// TLS towards clients. A client that wants TLS sends an SSLRequest before
// its startup packet; the proxy answers 'S' and runs the TLS handshake
// (TLS 1.2 or newer, Config.TLS's certificate) when proxy.tls.mode is
// allow or require, 'N' when it is disable. With require, a startup packet
// that did not come over TLS is refused with 28000. After the handshake
// the session reads and writes through the TLS connection (the raw-socket
// fast path of pgwire.RawIO is for plain connections only).
//
// TLS towards the shards is the DSNs' business: pgconn negotiates it per
// sslmode (verify-full with sslrootcert checks the server against a CA)
// before the proxy takes the connection over.

// startTLS answers an SSLRequest: 'N' when TLS is off (ts nil or
// disabled) or already on, else 'S' and the server side of the TLS
// handshake (bounded by the startup deadline); the client connection is
// then the TLS connection.
func (c *clientConn) startTLS(ts *auth.TLSSetup) error {
	if ts == nil || ts.Mode == auth.TLSDisable || c.tlsOn {
		_, err := c.conn.Write([]byte{'N'})
		return err
	}
	if _, err := c.conn.Write([]byte{'S'}); err != nil {
		return err
	}
	tc := tls.Server(c.conn, ts.Conf)
	if err := tc.Handshake(); err != nil {
		return fmt.Errorf("TLS handshake with %s: %w", c.conn.RemoteAddr(), err)
	}
	c.conn = tc
	c.io = tc
	c.rd = pgwire.NewMsgReader(tc, c.limit)
	c.tlsOn = true
	return nil
}
