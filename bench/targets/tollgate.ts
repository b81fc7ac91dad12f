// Target: a tollgate process (built JavaScript by default, or tsx), its own database (a fresh database on
// BENCH_DATABASE_URL's server, else embedded PGlite), one merchant and metered endpoints on the upstream.
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import postgres from 'postgres'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { postJson } from './api.ts'
import { freePort, ROOT, startNode, startTs } from './processes.ts'
import type { Target } from './target.ts'

export interface Tollgate extends Target {
  adminPort: number
  apiKey: string
  /** Metered URL of an endpoint on the upstream path ('/data', '/1k', '/256k'); batch: offers batch-settlement. */
  metered(
    path: string,
    options?: {
      batch?: boolean
      pricing?: Record<string, unknown>
      mcp?: Record<string, unknown>
      /** x402 `exact` settled after the answer (the explicit choice); the service default otherwise. */
      settleAfter?: boolean
      identityRules?: unknown[]
      /** WebSocket session terms (sessions allowed); needs usage `pricing`. */
      websocket?: Record<string, unknown>
      /** In the discovery listing (its paid calls counted for it). */
      listed?: boolean
      /** The pass it sells (price, calls, duration_s). */
      pass?: Record<string, unknown>
    },
  ): Promise<string>
  post(path: string, body: unknown, key?: string): Promise<any>
  /**
   * VACUUM (ANALYZE) of its database (a server one; nothing on PGlite), between scenarios, as pgbench does
   * before its runs: the dead rows one scenario leaves would otherwise be vacuumed by autovacuum during a
   * later one (measured: an upstream-only run charged 376 µs of this instance's database CPU per request).
   */
  maintain(): Promise<void>
  /**
   * batch-settlement channels whose charged vouchers are not all claimed on chain yet (a server database;
   * null on PGlite, which the bench cannot read beside the instance).
   */
  unclaimedChannels(): Promise<number | null>
}

/** A dev chain as startTollgate's `chain`: its node, token, treasury and first payer. */
export function devChainOf(chain: DevChain): TollgateOptions['chain'] {
  return {
    rpcUrl: chain.rpcUrl,
    usdcAddress: chain.usdcAddress,
    treasuryKey: chain.treasury.privateKey,
    payer: chain.payers[0]!.address,
  }
}

export interface TollgateOptions {
  name: string
  dir: string
  chain: { rpcUrl: string; usdcAddress: string; treasuryKey: string; payer: string }
  upstream: string
  /** false: the transfer watcher is idle, so every proof is verified over RPC (cold). */
  watch: boolean
  runtime: 'built' | 'tsx'
  workers?: number
  profileDir?: string
  /** Set: traces are exported there (BENCH_TRACING=1). */
  otlpEndpoint?: string
  /** Run the leader's jobs (payouts, settlements); default: only the instance named warm does. */
  jobs?: boolean
  /** identity.* settings (the signed-agent scenario's key directory). */
  identity?: Record<string, unknown>
  /** Signs offers and receipts with this key (RECEIPT_SIGNING_KEY); unsigned otherwise. */
  receiptKey?: string
  /** The per-address rate limits at their defaults (every other instance turns them off). */
  rateLimits?: boolean
}

export async function startTollgate(o: TollgateOptions): Promise<Tollgate> {
  const port = await freePort()
  const adminPort = await freePort()
  const configFile = join(o.dir, `${o.name}.json`)
  writeFileSync(
    configFile,
    JSON.stringify({
      database: { data_dir: join(o.dir, `${o.name}-pglite`) },
      chain: { poll_interval_ms: o.watch ? 250 : 3_600_000 },
      // Every scenario comes from one address: the 402 and checkout scenarios would meet the limits.
      ...(o.rateLimits ? {} : { rate_limits: { enabled: false } }),
      server: { workers: o.workers ?? 1 },
      // Every instance signs with the one treasury key: only the warm one runs payouts and settlements, so
      // their nonces never collide across instances (that would be a bench artefact, not a finding).
      jobs: { enabled: o.jobs ?? o.name === 'warm' },
      // Channels claimed every second instead of every minute: the claim books the calls the x402-batch
      // scenario served, which a minute later loaded whichever scenario ran then (the x402 reference's: its
      // PostgreSQL 3,180 µs a call, and the machine shared with the booking of 80,000 calls).
      x402: { batch_claim_interval_ms: 1_000 },
      ...(o.identity ? { identity: o.identity } : {}),
    }),
  )
  const databaseUrl = await freshServerDatabase(o.name)
  const env: Record<string, string> = {
    NODE_ENV: 'development',
    NETWORK: 'base-sepolia',
    PORT: String(port),
    ADMIN_PORT: String(adminPort),
    RPC_URL: o.chain.rpcUrl,
    USDC_ADDRESS: o.chain.usdcAddress,
    TREASURY_PRIVATE_KEY: o.chain.treasuryKey,
    ALLOW_PRIVATE_UPSTREAMS: 'true',
    LOG_LEVEL: 'warn',
    TOLLGATE_CONFIG: configFile,
    ...(databaseUrl ? { DATABASE_URL: databaseUrl.url } : {}),
    ...(o.receiptKey ? { RECEIPT_SIGNING_KEY: o.receiptKey } : {}),
    ...(o.otlpEndpoint ? { OTEL_EXPORTER_OTLP_ENDPOINT: o.otlpEndpoint } : {}),
    // Built: as `npm start` runs it, with its node flags.
    ...nodeArgs(o.profileDir, o.runtime === 'built' ? startFlags() : []),
  }
  const start = o.runtime === 'built' ? startNode : startTs
  const child = await start(
    o.runtime === 'built' ? 'dist/main.js' : 'src/main.ts',
    env,
    /tollgate listening on/,
    120_000,
  )
  const base = `http://127.0.0.1:${port}`
  const post = (path: string, body: unknown, key?: string) => postJson(base, o.name, path, body, key)
  const reg = await post('/api/v1/register', {
    wallet_address: o.chain.payer,
    business_name: `Bench ${o.name}`,
  })
  const endpoints = new Map<string, string>()
  return {
    name: `tollgate-${o.name}`,
    base,
    pid: child.proc.pid ?? null,
    adminPort,
    apiKey: reg.api_key,
    post,
    async metered(path, options) {
      // One endpoint per path and options (pricing rules and terms included), created on first use.
      const key = JSON.stringify([path, options ?? {}])
      let url = endpoints.get(key)
      if (!url) {
        const price = options?.mcp
          ? { kind: 'mcp', mcp: options.mcp }
          : options?.pricing
            ? { pricing: options.pricing }
            : { price: '0.001' }
        const ep = await post(
          '/api/v1/endpoints',
          {
            upstream_url: `${o.upstream}${path}`,
            ...price,
            batch_settlement: options?.batch === true,
            ...(options?.settleAfter ? { x402_settlement: 'after' } : {}),
            ...(options?.identityRules ? { identity_rules: options.identityRules } : {}),
            ...(options?.websocket ? { websocket: options.websocket } : {}),
            ...(options?.listed ? { listed: true } : {}),
            ...(options?.pass ? { pass: options.pass } : {}),
          },
          reg.api_key,
        )
        url = ep.metered_url as string
        endpoints.set(key, url)
      }
      return url
    },
    async maintain() {
      if (!databaseUrl) return
      const db = postgres(databaseUrl.url, { max: 1, onnotice: () => {} })
      try {
        await db.unsafe('VACUUM (ANALYZE)')
      } finally {
        await db.end()
      }
    },
    async unclaimedChannels() {
      if (!databaseUrl) return null
      const db = postgres(databaseUrl.url, { max: 1, onnotice: () => {} })
      try {
        const [row] = await db<{ n: number }[]>`
          SELECT count(*)::int AS n FROM batch_channels WHERE claimed_atomic < charged_atomic`
        return row!.n
      } finally {
        await db.end()
      }
    },
    async stop() {
      await child.stop()
      await databaseUrl?.drop()
    },
  }
}

/** The node flags `npm start` runs the server with (package.json's start script, before dist/main.js). */
export function startFlags(): string[] {
  const words = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.start as string).split(
    ' ',
  )
  return words.slice(1, words.indexOf('dist/main.js'))
}

/**
 * The node flags of a measured process: a CPU profile when asked, and BENCH_NODE_FLAGS (say, V8 heap
 * settings to compare in alternating runs).
 */
export function nodeArgs(
  profileDir: string | undefined,
  serverFlags: string[] = [],
): { BENCH_NODE_ARGS?: string } {
  const flags = [
    ...serverFlags,
    ...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []),
    ...(process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter(Boolean),
  ]
  return flags.length ? { BENCH_NODE_ARGS: flags.join(' ') } : {}
}

/** A fresh database on BENCH_DATABASE_URL's server for one instance, dropped after; null → embedded PGlite. */
async function freshServerDatabase(name: string): Promise<{ url: string; drop(): Promise<void> } | null> {
  const server = process.env.BENCH_DATABASE_URL
  if (!server) return null
  const db = `tollgate_bench_${name.replace(/\W/g, '_')}_${process.pid}`
  const admin = postgres(server, { max: 1, onnotice: () => {} })
  await admin.unsafe(`DROP DATABASE IF EXISTS ${db}`)
  await admin.unsafe(`CREATE DATABASE ${db}`)
  await admin.end()
  const url = new URL(server)
  url.pathname = `/${db}`
  return {
    url: url.toString(),
    async drop() {
      const a = postgres(server, { max: 1, onnotice: () => {} })
      await a.unsafe(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => {})
      await a.end()
    },
  }
}
