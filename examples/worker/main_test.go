package main

import (
	"testing"

	"github.com/redsem/redsem/internal/redistest"
)

// The demo runs to the end and its own check (peak <= limit) holds, on a
// real Redis and on the embedded default.
func TestDemo(t *testing.T) {
	t.Run("redis-server", func(t *testing.T) {
		srv := redistest.StartServer(t)
		if err := run(srv.Addr(), 3, 4, 40, 3, "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("embedded", func(t *testing.T) {
		if err := run("", 2, 4, 20, 2, "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	})
}
