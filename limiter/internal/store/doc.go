// Package store is the seam between limiter's client runtime and the
// places leases live: the Store interface, the request and reply of each
// operation, and the key layout of a name. Two packages implement Store:
// redisstore (one Redis deployment: a node, a Sentinel group or a Cluster) and
// quorum (Redlock: N independent nodes, each a redisstore.Store). Both run the
// same Lua scripts (in redisstore), so there is one lease algorithm.
//
// Nothing here talks to Redis, and nothing is exported outside limiter.
package store
