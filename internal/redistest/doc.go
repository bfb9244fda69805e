// Package redistest starts real redis-server processes for tests.
//
// Tests in this module talk to real Redis instead of mocks so that they
// exercise the actual wire protocol, Lua scripting, pub/sub and cluster
// redirections. Every server listens on a free loopback port, keeps no data
// on disk, and is killed (and its directory removed) when the test that
// started it finishes. Only testing.TB is used, so benchmarks can share the
// helpers with tests.
package redistest

// InstallHint is the message used when redis-server is missing.
//
// Tests fail (never skip) without redis-server: a silently skipped suite
// would hide that nothing was tested.
const InstallHint = "redis-server not found on PATH: install it with `apt-get install -y redis-server` (or run `make test`, which does)"
