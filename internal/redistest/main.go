package redistest

import (
	"errors"
	"fmt"
	"os"
)

// StartMain starts a server for a TestMain, before any testing.TB exists
// (runnable Examples need one). Call stop after m.Run. A missing
// redis-server is an error carrying InstallHint, for TestMain to fail on.
func StartMain() (addr string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "redistest-main-")
	if err != nil {
		return "", nil, err
	}
	for attempt := 0; attempt < startAttempts; attempt++ {
		port, perr := freePort(false)
		if perr != nil {
			err = perr
			break
		}
		p, lerr := launch(port, dir, nil)
		if errors.Is(lerr, errAddrInUse) {
			err = lerr
			continue
		}
		if lerr != nil {
			err = lerr
			break
		}
		return addrOf(port), func() {
			_ = p.kill()
			_ = os.RemoveAll(dir)
		}, nil
	}
	_ = os.RemoveAll(dir)
	return "", nil, fmt.Errorf("redistest: %w", err)
}
