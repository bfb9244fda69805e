package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// command sends one command over a fresh raw connection, TLS when conf is
// set, and returns its reply as a string.
//
// The helpers use raw RESP rather than go-redis so that readiness checks and
// statistics queries add nothing but the command itself to the server's
// commandstats (go-redis would also send HELLO, CLIENT SETINFO, ...), and so
// that a half-started server produces no go-redis pool log noise.
// Only simple strings, errors, integers and bulk strings are supported,
// which is all the helpers need.
func command(addr string, conf *tls.Config, timeout time.Duration, args ...string) (string, error) {
	conn, err := dial(addr, conf, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}

	if _, err := io.WriteString(conn, encode(args...)); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(conn))
}

// encode writes a command as a RESP array of bulk strings.
func encode(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// dial connects in plain TCP, or over TLS when conf is set: a TLS-only
// server refuses plain RESP. timeout covers the TLS handshake as well.
func dial(addr string, conf *tls.Config, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if conf == nil {
		return d.Dial("tcp", addr)
	}
	return tls.DialWithDialer(d, "tcp", addr, conf)
}

// readReply reads a single non-aggregate RESP2 reply.
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("redistest: empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis error: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("redistest: bad bulk length %q", line)
		}
		if n < 0 {
			return "", errors.New("redistest: nil reply")
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("redistest: unsupported reply type %q", line)
	}
}
