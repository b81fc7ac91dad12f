// N data-plane processes on one port, supervised by one parent (node:cluster). This uWS build binds its
// listen sockets with SO_REUSEPORT, so every worker listens on the same port itself and the kernel spreads
// connections between them; cluster is used for fork, IPC and prom-client's AggregatorRegistry, not for
// its own handle sharing (uWS sockets never go through it). The parent owns what must exist once per
// machine: the embedded database (PGlite socket server) and the dev chain; workers connect to them.
import cluster, { type Worker } from 'node:cluster'
import { createServer, type Server } from 'node:http'
import { createServer as createNetServer } from 'node:net'
import { AggregatorRegistry } from 'prom-client'
import { type DevChain, startDevChain } from '../chain/dev-chain.ts'
import type { Config } from '../config/schema.ts'
import { type EmbeddedDatabase, startEmbeddedDatabase } from '../db/embedded.ts'
import { configDollars } from '../money.ts'
import type { Logger } from '../observability/logger.ts'

/** What a worker reads from its environment (set by the parent on fork). */
export interface WorkerEnv {
  index: number
  databaseUrl: string
  embedded: boolean
}

const ENV_INDEX = 'TOLLGATE_WORKER_INDEX'
const ENV_DB = 'TOLLGATE_WORKER_DATABASE_URL'
const ENV_EMBEDDED = 'TOLLGATE_WORKER_EMBEDDED'

/** This process's worker settings, or null when it is not a supervised worker. */
export function workerEnv(): WorkerEnv | null {
  if (!cluster.isWorker || process.env[ENV_INDEX] === undefined) return null
  return {
    index: Number(process.env[ENV_INDEX]),
    databaseUrl: process.env[ENV_DB] ?? '',
    embedded: process.env[ENV_EMBEDDED] === '1',
  }
}

export interface Supervisor {
  port: number
  adminPort: number
  /** The live worker process ids, by index. */
  pids(): number[]
  /** Resolves once every worker answered 'ready' since the last (re)start. */
  ready: Promise<void>
  restarts(): number
  stop(): Promise<void>
}

/** Restart delay after a crash: doubles per quick crash, back to the minimum after a worker lived a while. */
const BACKOFF_MIN_MS = 100
const BACKOFF_MAX_MS = 10_000
const HEALTHY_AFTER_MS = 30_000

export async function startSupervisor(
  config: Config,
  options: { count: number; logger: Logger; env?: Record<string, string> },
): Promise<Supervisor> {
  const { logger } = options
  const { owned, embedded, devChain } = await startShared(config)
  // Port 0 must become one concrete port every worker shares.
  const port = config.server.port || (await freePort(config.server.host))
  const env: Record<string, string> = {
    ...options.env,
    PORT: String(port),
    // Workers keep their own admin ports private (random); the parent's admin port aggregates them.
    ADMIN_PORT: '0',
    [ENV_DB]: embedded?.url ?? config.database.url ?? '',
    [ENV_EMBEDDED]: embedded ? '1' : '0',
    ...(devChain ? { RPC_URL: devChain.rpcUrl, USDC_ADDRESS: devChain.usdcAddress } : {}),
  }
  const workers = new Map<number, Worker>()
  const readyWaiters = new Set<number>()
  let resolveReady: () => void = () => {}
  const ready = new Promise<void>((r) => {
    resolveReady = r
  })
  let restarts = 0
  let stopping = false
  const relay = createParentRelay(
    () => [...workers.entries()].filter(([i]) => !readyWaiters.has(i)).map(([, w]) => w),
    logger,
  )

  const fork = (index: number, backoffMs: number) => {
    const startedAt = Date.now()
    const worker = cluster.fork({ ...env, [ENV_INDEX]: String(index) })
    workers.set(index, worker)
    readyWaiters.add(index)
    worker.on('message', (msg: unknown) => {
      const kind = (msg as { tollgate?: string })?.tollgate
      if (kind === 'ready') {
        readyWaiters.delete(index)
        if (readyWaiters.size === 0) resolveReady()
      } else {
        relay.onMessage(worker, msg as RelayMessage)
      }
    })
    worker.once('exit', (code, signal) => {
      if (workers.get(index) === worker) workers.delete(index)
      if (stopping) return
      const lived = Date.now() - startedAt
      const delay = lived > HEALTHY_AFTER_MS ? BACKOFF_MIN_MS : Math.min(backoffMs * 2, BACKOFF_MAX_MS)
      logger.warn('worker exited; restarting', {
        worker: index,
        pid: worker.process.pid,
        code,
        signal,
        delay_ms: delay,
      })
      restarts++
      setTimeout(() => {
        if (!stopping) fork(index, delay)
      }, delay).unref()
    })
  }
  for (let i = 0; i < options.count; i++) fork(i, BACKOFF_MIN_MS / 2)

  const pids = () => [...workers.entries()].sort(([a], [b]) => a - b).map(([, w]) => w.process.pid ?? 0)
  const admin = await startParentAdmin(config, () => ({
    ok: workers.size === options.count && readyWaiters.size === 0,
    detail: { pids: pids(), restarts },
  }))
  return {
    port,
    adminPort: (admin.address() as { port: number }).port,
    pids,
    ready,
    restarts: () => restarts,
    async stop() {
      stopping = true
      await Promise.all(
        [...workers.values()].map(
          (w) =>
            new Promise<void>((resolve) => {
              if (w.isDead()) return resolve()
              w.once('exit', () => resolve())
              w.process.kill('SIGTERM')
              setTimeout(() => w.process.kill('SIGKILL'), config.server.shutdown_grace_ms).unref()
            }),
        ),
      )
      await new Promise<void>((r) => admin.close(() => r()))
      for (const s of owned.reverse()) await s()
    },
  }
}

/**
 * Endpoint changes between workers. Each worker caches endpoints for itself; a change made through one
 * worker's API must reach the others before that API call answers, or a disabled or repriced endpoint would
 * be served at its old terms by a sibling until its cache entry expires. On a PostgreSQL server NOTIFY
 * reaches every instance too, but after the answer; the embedded database has no NOTIFY between processes at
 * all. So the worker that made the change asks the parent, the parent tells every other worker, and the
 * change's API call answers once each one has dropped its entry (or RELAY_TIMEOUT_MS passed: a stopped
 * worker must not hold every endpoint change hostage; its entry still expires with the cache's TTL).
 */
export type RelayMessage =
  /** worker → parent: this endpoint changed (seq: the worker's own numbering of its announcements). */
  | { tollgate: 'endpoint_changed'; id: string; seq: number }
  /** parent → other workers: drop it; they answer 'endpoint_dropped' with the same seq. */
  | { tollgate: 'endpoint_drop'; id: string; seq: number }
  | { tollgate: 'endpoint_dropped'; seq: number }
  /** parent → announcing worker: every other worker dropped it (or the timeout passed). */
  | { tollgate: 'endpoint_relayed'; seq: number }

export const RELAY_TIMEOUT_MS = 2_000

function createParentRelay(readyWorkers: () => Worker[], logger: Logger) {
  let nextSeq = 0
  const pending = new Map<number, () => void>()
  const send = (worker: Worker, msg: RelayMessage) => {
    // A worker that died between the list and the send: nothing to drop there (a new one starts empty).
    if (worker.isConnected()) worker.send(msg, () => {})
  }
  const dropEverywhere = async (from: Worker, id: string) => {
    const acks = readyWorkers()
      .filter((w) => w !== from && w.isConnected())
      .map((w) => {
        const seq = nextSeq++
        return new Promise<boolean>((resolve) => {
          const timer = setTimeout(() => {
            pending.delete(seq)
            resolve(false)
          }, RELAY_TIMEOUT_MS)
          pending.set(seq, () => {
            clearTimeout(timer)
            pending.delete(seq)
            resolve(true)
          })
          send(w, { tollgate: 'endpoint_drop', id, seq })
        })
      })
    const answered = await Promise.all(acks)
    const late = answered.filter((ok) => !ok).length
    if (late > 0) logger.warn('endpoint change not confirmed by every worker in time', { late })
  }
  return {
    onMessage(worker: Worker, msg: RelayMessage) {
      if (msg?.tollgate === 'endpoint_changed') {
        const { id, seq } = msg
        dropEverywhere(worker, id).then(() => send(worker, { tollgate: 'endpoint_relayed', seq }))
      } else if (msg?.tollgate === 'endpoint_dropped') {
        pending.get(msg.seq)?.()
      }
    },
  }
}

/**
 * The worker side of the relay: drops what siblings changed, and announces this worker's own changes.
 * Null outside a supervised worker (one process: its own cache is the only one on this machine).
 */
export function startEndpointRelay(drop: (id: string) => void): {
  announce(id: string): Promise<void>
  stop(): void
} | null {
  if (workerEnv() === null || !process.send) return null
  let nextSeq = 0
  const waiting = new Map<number, () => void>()
  const onMessage = (msg: RelayMessage) => {
    if (msg?.tollgate === 'endpoint_drop') {
      drop(msg.id)
      process.send?.({ tollgate: 'endpoint_dropped', seq: msg.seq } satisfies RelayMessage)
    } else if (msg?.tollgate === 'endpoint_relayed') {
      waiting.get(msg.seq)?.()
    }
  }
  process.on('message', onMessage)
  return {
    announce(id) {
      const seq = nextSeq++
      return new Promise<void>((resolve) => {
        // The parent answers within its own timeout; this one only guards against a parent gone.
        const timer = setTimeout(done, RELAY_TIMEOUT_MS * 2)
        function done() {
          clearTimeout(timer)
          waiting.delete(seq)
          resolve()
        }
        waiting.set(seq, done)
        // false from send() only means the channel is backed up (the message is queued); an error means
        // the parent is gone: nobody to wait for.
        process.send?.(
          { tollgate: 'endpoint_changed', id, seq } satisfies RelayMessage,
          (err: Error | null) => {
            if (err) done()
          },
        )
      })
    },
    stop() {
      process.removeListener('message', onMessage)
      for (const done of [...waiting.values()]) done()
    },
  }
}

/** What exists once per machine and every worker connects to: the embedded database, the dev chain. */
async function startShared(config: Config): Promise<{
  owned: Array<() => Promise<void>>
  embedded: EmbeddedDatabase | null
  devChain: DevChain | null
}> {
  const owned: Array<() => Promise<void>> = []
  let embedded: EmbeddedDatabase | null = null
  let devChain: DevChain | null = null
  try {
    if (!config.database.url) {
      embedded = await startEmbeddedDatabase({ dataDir: config.database.data_dir })
      owned.push(() => embedded!.stop())
    }
    if (config.chain.network === 'local' && !config.chain.rpc_url) {
      devChain = await startDevChain({
        payers: config.chain.dev_payers,
        payerFunding: configDollars(config.chain.dev_payer_funding),
      })
      owned.push(() => devChain!.stop())
    }
  } catch (err) {
    for (const s of owned.reverse()) await s()
    throw err
  }
  return { owned, embedded, devChain }
}

/**
 * The parent's admin port: /metrics sums every worker's registry over cluster IPC (prom-client's
 * AggregatorRegistry: counters and histograms add up, gauges too), /healthz, and /readyz (all workers up).
 */
async function startParentAdmin(
  config: Config,
  workersReady: () => { ok: boolean; detail: Record<string, unknown> },
): Promise<Server> {
  const aggregator = new AggregatorRegistry()
  const server = createServer((req, res) => {
    if (req.url === '/metrics') {
      aggregator.clusterMetrics().then(
        (text) => res.writeHead(200, { 'content-type': aggregator.contentType }).end(text),
        (err) => res.writeHead(500, { 'content-type': 'text/plain' }).end(String(err)),
      )
    } else if (req.url === '/healthz') {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}')
    } else if (req.url === '/readyz') {
      const { ok, detail } = workersReady()
      res.writeHead(ok ? 200 : 503, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          status: ok ? 'ready' : 'not_ready',
          checks: [{ name: 'workers', ok, ...detail }],
        }),
      )
    } else {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not_found"}')
    }
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(config.server.admin_port, config.server.host, () => resolve())
  })
  return server
}

function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createNetServer()
    s.once('error', reject)
    s.listen(0, host, () => {
      const { port } = s.address() as { port: number }
      s.close(() => resolve(port))
    })
  })
}
