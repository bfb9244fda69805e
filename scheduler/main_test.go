package scheduler_test

import (
	"testing"

	"github.com/redsem/redsem/internal/redistest"
)

// TestMain starts the redis-server the runnable Examples find in
// REDIS_ADDR (each test starts servers of its own).
func TestMain(m *testing.M) { redistest.Main(m, nil) }
