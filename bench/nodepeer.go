package main

// The npm package redis-semaphore as a peer in the multi-process semaphore
// scenario: node/worker.js speaks the worker protocol of multiproc.go.
// It takes part only where `node` is on PATH (otherwise it is left out
// without a word); its packages are installed by `npm ci` in node/.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

const nodeLibName = "redis-semaphore (node)"

func init() {
	node, err := exec.LookPath("node")
	if err != nil {
		return
	}
	lib := MultiLib{
		Lib: Lib{
			Name: nodeLibName,
			Config: "npm redis-semaphore 5.8.0 Semaphore on ioredis 6.0.0 (node/worker.js), defaults: acquire polls " +
				"every 10ms, no queue; lockTimeout 10s; one ioredis client per process, one async task per goroutine",
			// Release is a plain ZREM; its scripts call ZREMRANGEBYSCORE,
			// ZCARD, ZSCORE, ZADD and PEXPIRE.
			Sends: []string{"zrem"},
		},
		Semaphore: true,
	}
	dir := nodeDir()
	switch {
	case dir == "":
		lib.Unavailable = "node/worker.js not found from the working directory (run from bench/)"
	case !exists(filepath.Join(dir, "node_modules", "redis-semaphore")) || !exists(filepath.Join(dir, "node_modules", "ioredis")):
		lib.Unavailable = fmt.Sprintf("packages not installed: run `npm ci` in %s", dir)
	default:
		worker := filepath.Join(dir, "worker.js")
		lib.Command = func(workerConfig) (*exec.Cmd, error) {
			cmd := exec.Command(node, worker)
			cmd.Dir = dir
			return cmd, nil
		}
	}
	MultiLibs = append(MultiLibs, lib)
}

// nodeDir is bench/node, seen from bench/ or from the repository root.
func nodeDir() string {
	for _, d := range []string{"node", filepath.Join("bench", "node")} {
		if exists(filepath.Join(d, "worker.js")) {
			abs, err := filepath.Abs(d)
			if err != nil {
				return ""
			}
			return abs
		}
	}
	return ""
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
