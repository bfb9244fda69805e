package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/dashboard"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// Mount the dashboard under /redsem/ of a service's own mux, read-only,
// beside its other handlers; every link on its pages is relative.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	c, err := limiter.New(rdb, limiter.Prefix("example:"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close(context.Background())
	if err := inspect.New(c).SetLimit(context.Background(), "api:github", 3); err != nil {
		fmt.Println(err)
		return
	}

	d, err := dashboard.New(c, dashboard.Source("redis:6379"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	mux := http.NewServeMux()
	mux.Handle("/redsem/", http.StripPrefix("/redsem", d))
	srv := httptest.NewServer(mux) // your service's server
	defer srv.Close()

	res, err := http.Get(srv.URL + "/redsem/api/overview")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Println(res.StatusCode, strings.Contains(string(body), `"name":"api:github","semaphore":true,"fleet_limit":3`))
	// Output: 200 true
}
