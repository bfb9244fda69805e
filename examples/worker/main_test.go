package main

import (
	"os"
	"testing"

	"github.com/redsem/redsem/internal/redistest"
)

// The demo runs to the end and its own checks (peaks <= limits, no 429)
// hold, on
// a real Redis and on the embedded default.
func TestDemo(t *testing.T) {
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	t.Run("redis-server", func(t *testing.T) {
		srv := redistest.StartServer(t)
		c := config{addr: srv.Addr(), servers: 3, concurrency: 4, tasks: 40, limit: 3, rate: 20, perCustomer: 1, customers: 4, metrics: "127.0.0.1:0"}
		if err := run(c, out); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("embedded", func(t *testing.T) {
		c := config{servers: 2, concurrency: 4, tasks: 20, limit: 2, rate: 20, perCustomer: 1, customers: 3, metrics: "127.0.0.1:0"}
		if err := run(c, out); err != nil {
			t.Fatal(err)
		}
	})
}
