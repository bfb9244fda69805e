package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// single builds the client of o and env and returns its options.
func single(t *testing.T, o connOptions, getenv func(string) string) *redis.Options {
	t.Helper()
	rdb, _, err := o.client(getenv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	c, ok := rdb.(*redis.Client)
	if !ok {
		t.Fatalf("client is %T, want *redis.Client", rdb)
	}
	opt := c.Options()
	if !opt.ContextTimeoutEnabled {
		t.Error("ContextTimeoutEnabled is off: -timeout would not bound socket reads")
	}
	return opt
}

func TestConnectSingle(t *testing.T) {
	def := connOptions{addr: "localhost:6379"}
	url := map[string]string{"REDIS_URL": "redis://u:p@redis.example:7000/3"}

	opt := single(t, def, env(nil))
	if opt.Addr != "localhost:6379" || opt.TLSConfig != nil || opt.Password != "" {
		t.Errorf("defaults: addr %q tls %v password %q", opt.Addr, opt.TLSConfig, opt.Password)
	}

	opt = single(t, def, env(url))
	if opt.Addr != "redis.example:7000" || opt.DB != 3 || opt.Username != "u" || opt.Password != "p" {
		t.Errorf("REDIS_URL: %q db %d user %q password %q", opt.Addr, opt.DB, opt.Username, opt.Password)
	}

	explicit := connOptions{addr: "other:1", addrSet: true}
	if opt = single(t, explicit, env(url)); opt.Addr != "other:1" || opt.Password != "" {
		t.Errorf("-addr must win over REDIS_URL: %q, password %q", opt.Addr, opt.Password)
	}

	// -user and -password override the URL's, even an explicitly empty one.
	o := def
	o.user, o.password, o.passwordSet = "ops", "", true
	if opt = single(t, o, env(url)); opt.Username != "ops" || opt.Password != "" {
		t.Errorf("-user/-password over the URL: %q %q", opt.Username, opt.Password)
	}
	// REDIS_PASSWORD fills in only when nothing else gave a password.
	if opt = single(t, def, env(map[string]string{"REDIS_PASSWORD": "fromenv"})); opt.Password != "fromenv" {
		t.Errorf("REDIS_PASSWORD: %q", opt.Password)
	}
	withEnv := map[string]string{"REDIS_PASSWORD": "fromenv", "REDIS_URL": url["REDIS_URL"]}
	if opt = single(t, def, env(withEnv)); opt.Password != "p" {
		t.Errorf("the URL's password must win over REDIS_PASSWORD: %q", opt.Password)
	}
	o = def
	o.password, o.passwordSet = "flag", true
	if opt = single(t, o, env(withEnv)); opt.Password != "flag" {
		t.Errorf("-password must win: %q", opt.Password)
	}
}

func TestConnectTLS(t *testing.T) {
	def := connOptions{addr: "localhost:6379"}
	rediss := env(map[string]string{"REDIS_URL": "rediss://cache.example:6380"})

	opt := single(t, def, rediss)
	if opt.TLSConfig == nil || opt.TLSConfig.ServerName != "cache.example" || opt.TLSConfig.InsecureSkipVerify {
		t.Fatalf("rediss:// TLS config: %+v", opt.TLSConfig)
	}
	o := def
	o.tlsInsecure = true
	if opt = single(t, o, rediss); !opt.TLSConfig.InsecureSkipVerify || opt.TLSConfig.ServerName != "cache.example" {
		t.Errorf("-tls-insecure on rediss://: %+v", opt.TLSConfig)
	}
	o = def
	o.tls = true
	if opt = single(t, o, env(nil)); opt.TLSConfig == nil || opt.TLSConfig.InsecureSkipVerify {
		t.Errorf("-tls: %+v", opt.TLSConfig)
	}

	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, selfSignedPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	o = def
	o.tlsCA = ca // implies -tls
	if opt = single(t, o, env(nil)); opt.TLSConfig == nil || opt.TLSConfig.RootCAs == nil {
		t.Errorf("-tls-ca: %+v", opt.TLSConfig)
	}

	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{filepath.Join(dir, "missing.pem"), notPEM} {
		o.tlsCA = file
		if _, _, err := o.client(env(nil)); !isUsage(err) || !strings.Contains(err.Error(), "-tls-ca") {
			t.Errorf("-tls-ca %s: %v, want a usage error naming -tls-ca", file, err)
		}
	}
}

func TestConnectCluster(t *testing.T) {
	o := connOptions{addr: "localhost:6379", cluster: " a:1, b:2,", user: "ops", tls: true}
	rdb, where, err := o.client(env(map[string]string{"REDIS_PASSWORD": "pw", "REDIS_URL": "redis://ignored:1"}))
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("-cluster gave a %T", rdb)
	}
	opt := cc.Options()
	if !reflect.DeepEqual(opt.Addrs, []string{"a:1", "b:2"}) || opt.Username != "ops" || opt.Password != "pw" ||
		opt.TLSConfig == nil || !opt.ContextTimeoutEnabled || where != "cluster a:1,b:2" {
		t.Errorf("cluster options: %+v (%s)", opt, where)
	}

	o.addrSet = true
	if _, _, err := o.client(env(nil)); !isUsage(err) {
		t.Errorf("-addr with -cluster: %v, want a usage error", err)
	}
	o = connOptions{cluster: " , "}
	if _, _, err := o.client(env(nil)); !isUsage(err) {
		t.Errorf("-cluster without addresses: %v, want a usage error", err)
	}
}

func TestConnectBadURLHidesPassword(t *testing.T) {
	for _, u := range []string{"redis://u:hunter2@host:notaport", "http://u:hunter2@host"} {
		_, _, err := connOptions{}.client(env(map[string]string{"REDIS_URL": u}))
		if !isUsage(err) || !strings.Contains(err.Error(), "REDIS_URL") {
			t.Errorf("REDIS_URL %s: %v, want a usage error naming REDIS_URL", u, err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("REDIS_URL error shows the password: %v", err)
		}
	}
}

func isUsage(err error) bool {
	var ue usageError
	return errors.As(err, &ue)
}

func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
