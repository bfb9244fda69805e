package redistest

import (
	"fmt"
	"net"
	"strconv"
)

// clusterBusOffset is the distance Redis puts between a node's client port
// and its cluster bus port.
const clusterBusOffset = 10000

// freePort asks the kernel for an unused loopback port. The port is released
// before returning, so another process may grab it first; callers retry when
// redis-server reports "Address already in use".
//
// With needBus the port+10000 cluster bus port must also be valid and free,
// because cluster nodes listen on both.
func freePort(needBus bool) (int, error) {
	var lastErr error
	for attempt := 0; attempt < 200; attempt++ {
		port, err := listenFree("0")
		if err != nil {
			return 0, err
		}
		if !needBus {
			return port, nil
		}
		bus := port + clusterBusOffset
		if bus > 65535 {
			continue
		}
		if _, err := listenFree(strconv.Itoa(bus)); err != nil {
			lastErr = err
			continue
		}
		return port, nil
	}
	return 0, fmt.Errorf("redistest: no free port pair (port, port+%d) found: %v", clusterBusOffset, lastErr)
}

// listenFree binds 127.0.0.1:port, closes the listener and returns the port
// that was bound (useful for port "0").
func listenFree(port string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
