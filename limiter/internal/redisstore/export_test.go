package redisstore

import (
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// SetLinger shortens how long w keeps a channel after its last Drop.
func SetLinger(w store.ShardWakes, d time.Duration) { w.(*shardWakes).linger = d }

// OtherVersionLibrary is the function library a version whose release
// script differs from this one's would load.
func OtherVersionLibrary() string {
	var fns []libraryFunction
	for _, f := range libraryFunctions {
		sc := *f.sc
		if f.name == "release" {
			sc.body += "\n-- another version\n"
		}
		f.sc = &sc
		fns = append(fns, f)
	}
	return newLibrary(fns...)
}
