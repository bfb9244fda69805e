package main

import (
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
)

// The demo runs to the end on a real Redis, and its own check (never two
// exports at once) holds.
func TestDemo(t *testing.T) {
	srv := redistest.StartServer(t)
	if err := run(srv.Addr(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
}
