'use strict'
// A worker process of bench/'s multi-process semaphore scenario with the
// npm package redis-semaphore (Semaphore on ioredis) as the library. It
// speaks the protocol of bench/multiproc.go: the configuration comes as
// JSON in REDSEM_BENCH_WORKER; after the warm-up it writes "ready", waits
// for "go <start> <end>" (Unix ns) on stdin, runs its tasks (the
// goroutines of the Go workers) until end or until each made its share,
// and writes its report as one JSON line. Durations in the configuration
// are Go's: nanoseconds.

const Redis = require('ioredis')
const { Semaphore, TimeoutError } = require('redis-semaphore')
const readline = require('node:readline')
const { performance } = require('node:perf_hooks')

const cfg = JSON.parse(process.env.REDSEM_BENCH_WORKER)
const lockTTL = 10000 // ms, as every library in bench/

// Wall clock in Unix ns, microsecond precision: the clock of the Go
// workers' time.Now().UnixNano().
const nowNs = () => Math.round((performance.timeOrigin + performance.now()) * 1e6)
const sleepMs = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

function fail (err) {
  process.stdout.write(JSON.stringify({ proc: cfg.Proc, acqs: [], censored: [], gaveUp: 0, cmds: 0, err: String(err && err.stack || err) }) + '\n')
  process.exit(1)
}

async function main () {
  const [host, port] = [cfg.Addr.slice(0, cfg.Addr.lastIndexOf(':')), +cfg.Addr.slice(cfg.Addr.lastIndexOf(':') + 1)]
  const client = new Redis({ host, port, lazyConnect: true, maxRetriesPerRequest: 1 })
  // Client-side count of the commands sent, as the go-redis hook does.
  let sent = 0
  const sendCommand = client.sendCommand.bind(client)
  client.sendCommand = (cmd, stream) => { sent++; return sendCommand(cmd, stream) }
  await client.connect()

  const sems = []
  for (let g = 0; g < cfg.Goroutines; g++) {
    // Defaults besides the TTL: acquire polls every 10 ms for up to 10 s.
    sems.push(new Semaphore(client, cfg.Key, cfg.Limit, { lockTimeout: lockTTL }))
  }
  // Warm-up: every task takes and gives back a permit once.
  await Promise.all(sems.map(async (s) => { await s.acquire(); await s.release() }))

  const lines = readline.createInterface({ input: process.stdin })
  const it = lines[Symbol.asyncIterator]()
  process.stdout.write('ready\n')
  const { value: line, done } = await it.next()
  if (done) throw new Error('stdin closed before go')
  const m = /^go (\d+) (\d+)/.exec(line)
  if (!m) throw new Error(`bad start line ${JSON.stringify(line)}`)
  const start = Number(m[1]); const end = Number(m[2])
  const sentBefore = sent
  await sleepMs(Math.max((start - nowNs()) / 1e6, 0))

  const stop = new AbortController()
  const timer = setTimeout(() => stop.abort(), Math.max((end - nowNs()) / 1e6, 0))
  const holdMs = cfg.Hold / 1e6; const pauseMs = cfg.Pause / 1e6
  const rep = { proc: cfg.Proc, acqs: [], censored: [], gaveUp: 0, cmds: 0 }
  await Promise.all(sems.map(async (s, g) => {
    for (let i = 0; cfg.PerGoroutine === 0 || i < cfg.PerGoroutine; i++) {
      if (stop.signal.aborted) return
      const asked = nowNs()
      for (;;) {
        try {
          await s.acquire(stop.signal)
          break
        } catch (err) {
          if (stop.signal.aborted) {
            rep.censored.push({ g, a: asked })
            return
          }
          if (err instanceof TimeoutError) { rep.gaveUp++; continue }
          throw err
        }
      }
      const got = nowNs()
      if (got > end) {
        rep.censored.push({ g, a: asked })
        await s.release()
        return
      }
      await sleepMs(holdMs)
      const rel = nowNs()
      await s.release()
      rep.acqs.push({ g, a: asked, t: got, r: rel })
      if (pauseMs > 0 && !stop.signal.aborted) await sleepMs(pauseMs)
    }
  }))
  clearTimeout(timer)
  rep.cmds = sent - sentBefore
  client.disconnect()
  lines.close()
  process.stdout.write(JSON.stringify(rep) + '\n')
}

main().catch(fail)
