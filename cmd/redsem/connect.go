package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// connOptions are the connection flags.
type connOptions struct {
	addr        string
	addrSet     bool // -addr was given: it wins over REDIS_URL
	cluster     string
	user        string
	password    string
	passwordSet bool // -password was given, maybe empty
	tls         bool
	tlsCA       string
	tlsInsecure bool
}

// client returns the go-redis client the flags and environment describe
// and where it connects, for messages (never with a password). Which
// server: -cluster, else -addr when given, else REDIS_URL when set, else
// -addr's default. -user and -password override the URL's; the password
// falls back to REDIS_PASSWORD. Errors are usage errors: nothing has been
// sent yet.
func (o connOptions) client(getenv func(string) string) (redis.UniversalClient, string, error) {
	tc, err := o.tlsConfig()
	if err != nil {
		return nil, "", err
	}
	if o.cluster != "" {
		if o.addrSet {
			return nil, "", usagef("-addr and -cluster exclude each other")
		}
		var addrs []string
		for _, a := range strings.Split(o.cluster, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) == 0 {
			return nil, "", usagef("-cluster: no address in %q", o.cluster)
		}
		opt := &redis.ClusterOptions{Addrs: addrs, TLSConfig: tc, ContextTimeoutEnabled: true}
		opt.Username, opt.Password = o.auth(opt.Username, opt.Password, getenv)
		return redis.NewClusterClient(opt), "cluster " + strings.Join(addrs, ","), nil
	}

	opt := &redis.Options{Addr: o.addr}
	if u := getenv("REDIS_URL"); u != "" && !o.addrSet {
		if opt, err = redis.ParseURL(u); err != nil {
			var ue *url.Error // its text holds the URL, password and all
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return nil, "", usagef("REDIS_URL: %v", err)
		}
	}
	switch {
	case tc == nil:
	case opt.TLSConfig == nil:
		opt.TLSConfig = tc
	default: // rediss:// set ServerName: keep it, add the flags
		if tc.RootCAs != nil {
			opt.TLSConfig.RootCAs = tc.RootCAs
		}
		opt.TLSConfig.InsecureSkipVerify = tc.InsecureSkipVerify
	}
	opt.ContextTimeoutEnabled = true
	opt.Username, opt.Password = o.auth(opt.Username, opt.Password, getenv)
	return redis.NewClient(opt), opt.Addr, nil
}

// auth applies -user, -password and REDIS_PASSWORD to what a URL gave.
func (o connOptions) auth(user, password string, getenv func(string) string) (string, string) {
	if o.user != "" {
		user = o.user
	}
	switch {
	case o.passwordSet:
		password = o.password
	case password == "":
		password = getenv("REDIS_PASSWORD")
	}
	return user, password
}

// tlsConfig is nil unless a TLS flag is given; -tls-ca and -tls-insecure
// imply -tls.
func (o connOptions) tlsConfig() (*tls.Config, error) {
	if !o.tls && o.tlsCA == "" && !o.tlsInsecure {
		return nil, nil
	}
	// InsecureSkipVerify only on the operator's explicit -tls-insecure.
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.tlsInsecure} //nolint:gosec
	if o.tlsCA != "" {
		pem, err := os.ReadFile(o.tlsCA)
		if err != nil {
			return nil, usagef("-tls-ca: %v", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usagef("-tls-ca %s: no PEM certificate in it", o.tlsCA)
		}
	}
	return tc, nil
}
