// The failover round: a private primary and a streaming standby (plain PostgreSQL replication), tollgate on a
// multi-host DATABASE_URL with target_session_attrs=read-write, paid load (one fresh tx-hash proof per call,
// clients retrying 5xx, 409 and network errors). First a steady phase measures paid calls/s and latency in
// the replication mode under test; then, under paced load, the standby is promoted and the old primary
// stopped (immediate: a crash) while tollgate still writes to it. Afterwards a fresh instance (cold caches:
// only the new primary's memory) is offered every proof again, and each proof is judged from what the
// upstream actually served and what the new primary's books say; `npm run reconcile` runs on the new primary.
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { makeProofs } from '../../bench/proofs.ts'
import { type DevChain, startDevChain } from '../../src/chain/dev-chain.ts'
import { postJson } from '../helpers/api.ts'
import { type ChildService, freePort, startChildService } from '../helpers/child-service.ts'
import { type CountingUpstream, startCountingUpstream } from './counting-upstream.ts'
import { balancesAgainstEntries, runReconcile } from './harness.ts'
import { type PgCluster, startPgCluster } from './pg-cluster.ts'
import {
  type PgStandby,
  type ReplicationMode,
  setReplicationMode,
  startStandby,
  waitForStreaming,
} from './pg-standby.ts'

const PRICE_ATOMIC = 1_000n // $0.001

export interface FailoverOptions {
  mode: ReplicationMode
  /** Proofs of the steady phase (closed loop at `concurrency`), measuring calls/s and latency. */
  steadyProofs: number
  /** Proofs of the failover phase, paced over `roundMs`; the failover starts 30 % into it. */
  failoverProofs: number
  roundMs: number
  concurrency: number
  log(line: string): void
}

export interface FailoverResult {
  mode: ReplicationMode
  /** Steady phase: served calls per second with `concurrency` clients, and their latency. */
  paidPerS: number
  p50Ms: number
  p99Ms: number
  proofs: number
  served: number
  /** Proofs the upstream served more than once (load and replay on a fresh instance together). */
  servedTwice: number
  /** Of those, served again only on replay: the new primary had no claim for a proof already served. */
  replayServedAgain: number
  /** Proofs the upstream served whose claim the new primary does not have (acknowledged, then lost). */
  claimsLost: number
  /**
   * Never served, yet claimed on the new primary: a claim the standby applied whose acknowledgement died with
   * the old primary. Its instance cannot know whether it was served, so the proof is refused and, once its
   * retry window closes, refunded (no double serve, no charge).
   */
  inDoubt: number
  servedNotCaptured: number
  capturedNotServed: number
  chargedNotServed: number
  gaveUp: number
  status503: number
  networkErrors: number
  /** From the promotion's start until the first paid call served after the old primary stopped. */
  outageMs: number
  promoteMs: number
  reconcileExit: number | null
  balancesChecked: number
  balanceDrift: number
  crashed: number
}

interface ProofState {
  hash: string
  done: 'served' | 'refused' | 'gave_up' | null
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
/** How long a client keeps retrying one proof. */
const RETRY_WINDOW_MS = 45_000

interface Rig {
  primary: PgCluster
  standby: PgStandby
  chain: DevChain
  upstream: CountingUpstream
  /** A tollgate process on both hosts; an exit before the rig stops counts as a crash. */
  spawn(): Promise<ChildService>
  a: ChildService
  endpointId: string
  hashes: string[]
  crashed(): number
}

/**
 * Primary, standby (in `mode`), dev chain, counting upstream, one tollgate instance with an endpoint, and
 * `proofs` mined transfers. Everything started is stopped by `cleanups` (run in reverse).
 */
async function startRig(
  options: { mode: ReplicationMode; proofs: number; log(line: string): void },
  cleanups: Array<() => Promise<unknown>>,
  stopping: () => boolean,
): Promise<Rig> {
  const { mode, log } = options
  const primary: PgCluster = await startPgCluster()
  cleanups.push(() => primary.destroy())
  const standby: PgStandby = await startStandby(primary)
  cleanups.push(() => standby.destroy())
  await setReplicationMode(primary, standby, mode)
  await waitForStreaming(primary, standby, mode !== 'async')
  const chain: DevChain = await startDevChain({
    payers: 1,
    payerFunding: PRICE_ATOMIC * BigInt(options.proofs + 10),
    treasuryFunding: 1_000_000n,
  })
  cleanups.push(() => chain.stop())
  const upstream: CountingUpstream = await startCountingUpstream()
  cleanups.push(() => upstream.close())
  // Both hosts, the standby first: the driver must skip it while it is a standby, and find it once promoted.
  const databaseUrl = `postgres://postgres@127.0.0.1:${standby.port},127.0.0.1:${primary.port}/postgres?target_session_attrs=read-write`
  log(`[${mode}] primary :${primary.port}, standby :${standby.port}; tollgate on ${databaseUrl}`)

  let crashed = 0
  const spawn = async () => {
    const child = await startChildService({
      databaseUrl,
      treasuryKey: chain.treasury.privateKey,
      rpcUrl: chain.rpcUrl,
      usdcAddress: chain.usdcAddress,
      settings: {
        proxy: { allow_private_upstreams: true, upstream_timeout_ms: 2_000 },
        chain: { poll_interval_ms: 200, rpc_timeout_ms: 2_000 },
        log: { level: 'warn' },
      },
      port: await freePort(),
    })
    child.exited.then((signal) => {
      if (stopping()) return
      crashed++
      log(`!! tollgate pid ${child.pid} exited (${signal ?? 'exit'}):\n${child.output().slice(-3000)}`)
    })
    cleanups.push(() => child.kill('SIGTERM'))
    return child
  }
  const a = await spawn()

  const owner = privateKeyToAccount(generatePrivateKey()).address
  const reg = await postJson(a.url, '/api/v1/register', {
    wallet_address: owner,
    business_name: 'Failover',
  })
  const endpoint = await postJson(
    a.url,
    '/api/v1/endpoints',
    { upstream_url: `${upstream.url}/work`, price: 0.001 },
    reg.api_key as string,
  )
  const hashes = await makeProofs({
    rpcUrl: chain.rpcUrl,
    chainId: chain.chainId,
    usdc: chain.usdcAddress,
    payerKey: chain.payers[0]!.privateKey,
    treasury: chain.treasury.address,
    value: PRICE_ATOMIC,
    count: options.proofs,
  })
  // The watcher pre-verifies the transfers: the load then needs no RPC (a settle period, not a condition).
  await sleep(2_000)
  return {
    primary,
    standby,
    chain,
    upstream,
    spawn,
    a,
    endpointId: endpoint.id as string,
    hashes,
    crashed: () => crashed,
  }
}

export async function runFailover(options: FailoverOptions): Promise<FailoverResult> {
  const { mode } = options
  // Each line says when, from the start: a run that overstays its timeout shows which step it was in.
  const began = Date.now()
  const log = (line: string) => options.log(`+${((Date.now() - began) / 1000).toFixed(1)} s ${line}`)
  const cleanups: Array<() => Promise<unknown>> = []
  // Set before the cleanups stop the instances: their exits then are not crashes.
  let stopping = false
  try {
    const rig = await startRig(
      { mode, proofs: options.steadyProofs + options.failoverProofs, log },
      cleanups,
      () => stopping,
    )
    log(`[${mode}] rig ready`)
    const { primary, standby, chain, upstream, spawn, a, endpointId, hashes } = rig
    const proofs: ProofState[] = hashes.map((hash) => ({ hash, done: null }))
    const steady = proofs.slice(0, options.steadyProofs)
    const round = proofs.slice(options.steadyProofs)
    const stats = { s503: 0, network: 0, servedAt: [] as number[] }

    // Steady phase: as fast as `concurrency` clients go, every call's latency kept.
    const latencies: number[] = []
    const t0 = Date.now()
    await drive(a, endpointId, steady, { concurrency: options.concurrency, spreadMs: 0, stats, latencies })
    const steadyS = (Date.now() - t0) / 1000
    const servedSteady = steady.filter((p) => p.done === 'served').length
    latencies.sort((x, y) => x - y)
    const pct = (q: number) =>
      latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0
    log(
      `[${mode}] steady: ${servedSteady} served in ${steadyS.toFixed(1)} s, p50 ${pct(0.5).toFixed(1)} ms, p99 ${pct(0.99).toFixed(1)} ms`,
    )

    // Failover phase.
    stats.servedAt = []
    const window = { from: 0, stopped: 0, promoteMs: 0 }
    const load = drive(a, endpointId, round, {
      concurrency: options.concurrency,
      spreadMs: options.roundMs,
      stats,
      latencies: [],
    })
    const fault = (async () => {
      // 30 % into the round's load: the failover lands under load.
      await sleep(options.roundMs * 0.3)
      window.from = Date.now()
      await standby.promote()
      window.promoteMs = Date.now() - window.from
      // Until this returns the old primary still takes tollgate's writes: what replication mode is for.
      await primary.stop('immediate')
      window.stopped = Date.now()
      log(`[${mode}]   standby promoted in ${window.promoteMs} ms, old primary stopped (immediate)`)
    })()
    await Promise.all([load, fault])
    log(`[${mode}] failover round done`)
    const firstAfter = stats.servedAt.filter((t) => t >= window.stopped).sort((x, y) => x - y)[0]
    const outageMs = firstAfter === undefined ? -1 : firstAfter - window.from
    // Captures are batched: give them time to land before the books are read.
    await sleep(2_000)

    const books = await import('postgres').then((m) =>
      m.default(standby.url, {
        max: 1,
        onnotice: () => {},
        // Reads only, on the new primary: bounded all the same, a stuck read fails instead of hanging.
        connect_timeout: 10,
        connection: { statement_timeout: 30_000 },
      }),
    )
    cleanups.push(() => books.end({ timeout: 1 }))
    // What the new primary remembers before anything is offered again.
    const claims = new Map(
      (await books<{ proof_key: string; status: string }[]>`SELECT proof_key, status FROM claims`).map(
        (r) => [r.proof_key, r.status],
      ),
    )

    // Every proof again, on a fresh instance (no cache remembers anything): the new primary's word only.
    const servedBefore = new Map(upstream.served)
    const c = await spawn()
    const replay = proofs.map((p) => ({ hash: p.hash, done: null }) as ProofState)
    await drive(c, endpointId, replay, {
      concurrency: options.concurrency,
      spreadMs: 0,
      stats: { s503: 0, network: 0, servedAt: [] },
      latencies: [],
      once: true,
    })
    log(`[${mode}] replay done`)
    // A fixed wait on purpose, for a negative: a replay that reached the upstream late is still counted.
    await sleep(1_000)

    const calls = new Set(
      (
        await books<
          { proof_key: string }[]
        >`SELECT DISTINCT call_proof_key(proof_key, proof) AS proof_key FROM calls`
      ).map((r) => r.proof_key),
    )
    const charged = new Set(
      (
        await books<{ proof_key: string }[]>`
          SELECT call_proof_key(c.proof_key, c.proof) AS proof_key FROM ledger_entries l
          JOIN calls c ON l.source_type = 'call' AND l.source_id = c.id
          WHERE l.kind = 'owner_share'
          UNION
          SELECT call_proof_key(c.proof_key, c.proof) AS proof_key FROM ledger_entries l
          JOIN calls c ON l.source_type IN ('capture_batch', 'settlement_batch') AND l.source_id = c.ledger_batch_id::text
            AND l.account_id = c.account_id
          WHERE l.kind = 'owner_share'`
      ).map((r) => r.proof_key),
    )
    const result: FailoverResult = {
      mode,
      paidPerS: servedSteady / steadyS,
      p50Ms: pct(0.5),
      p99Ms: pct(0.99),
      proofs: proofs.length,
      served: 0,
      servedTwice: 0,
      replayServedAgain: 0,
      claimsLost: 0,
      inDoubt: 0,
      servedNotCaptured: 0,
      capturedNotServed: 0,
      chargedNotServed: 0,
      gaveUp: proofs.filter((p) => p.done === 'gave_up').length,
      status503: stats.s503,
      networkErrors: stats.network,
      outageMs,
      promoteMs: window.promoteMs,
      reconcileExit: await runReconcile(standby.url, chain, log),
      balancesChecked: 0,
      balanceDrift: 0,
      crashed: rig.crashed(),
    }
    log(`[${mode}] reconcile exit ${result.reconcileExit}`)
    const balances = await balancesAgainstEntries(standby.url)
    result.balancesChecked = balances.checked
    result.balanceDrift = balances.drifted
    for (const p of proofs) {
      const key = `tx:${p.hash.toLowerCase()}`
      const before = servedBefore.get(p.hash) ?? 0
      const served = upstream.served.get(p.hash) ?? 0
      if (served > 0) result.served++
      if (served > 1) result.servedTwice++
      if (before > 0 && served > before) result.replayServedAgain++
      if (before > 0 && !claims.has(key)) result.claimsLost++
      if (served > 0 && !calls.has(key)) result.servedNotCaptured++
      if (served === 0 && calls.has(key)) result.capturedNotServed++
      if (served === 0 && claims.get(key) === 'claimed') result.inDoubt++
      if (served === 0 && charged.has(key)) result.chargedNotServed++
    }
    log(`[${mode}] ${JSON.stringify(result)}`)
    return result
  } finally {
    stopping = true
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {})
  }
}

/**
 * Clients: each proof until it is served (2xx) or refused (402), retrying 5xx, 409 and network errors
 * (`once`: one attempt each, for the replay). spreadMs 0 is a closed loop; otherwise each proof has its
 * start time.
 */
async function drive(
  inst: ChildService,
  endpointId: string,
  proofs: ProofState[],
  ctx: {
    concurrency: number
    spreadMs: number
    stats: { s503: number; network: number; servedAt: number[] }
    latencies: number[]
    once?: boolean
  },
): Promise<void> {
  const t0 = Date.now()
  const gapMs = ctx.spreadMs / Math.max(1, proofs.length)
  // The phase is bounded, not only each proof: with one retry window per proof, an instance that died
  // (or stopped answering) kept every client retrying proof after proof, 45 s each, for up to
  // proofs / concurrency × 45 s (over 18 minutes for the failover round), far past the test's timeout: it
  // hung instead of failing with its log. Once the instance has exited, or no proof has ended (served or
  // refused) for a whole retry window, what is left gives up at once; a slow instance still progresses.
  let lastEnded = t0
  let gone = false
  inst.exited.then(() => {
    gone = true
  })
  let next = 0
  const client = async () => {
    for (;;) {
      const k = next++
      const p = proofs[k]
      if (!p) return
      const due = t0 + k * gapMs
      if (due > Date.now()) await sleep(due - Date.now())
      const deadline = Date.now() + RETRY_WINDOW_MS
      while (p.done === null) {
        const now = Date.now()
        if (gone || now > deadline || now - lastEnded > RETRY_WINDOW_MS) {
          p.done = 'gave_up'
          break
        }
        const started = performance.now()
        try {
          const res = await fetch(`${inst.url}/m/${endpointId}/work?p=${p.hash}`, {
            headers: { 'x-payment': p.hash },
            signal: AbortSignal.timeout(6_000),
          })
          const text = await res.text()
          if (res.status < 300) {
            p.done = 'served'
            ctx.latencies.push(performance.now() - started)
            ctx.stats.servedAt.push(Date.now())
          } else if (res.status === 402) p.done = 'refused'
          else if (res.status === 503) ctx.stats.s503++
          else if (res.status < 500 && res.status !== 409)
            throw new Error(`unexpected ${res.status}: ${text.slice(0, 200)}`)
        } catch (err) {
          if ((err as Error).message.startsWith('unexpected')) throw err
          ctx.stats.network++
        }
        if (ctx.once && p.done === null) p.done = 'refused'
        if (p.done !== null) lastEnded = Date.now()
        // A retrying client's back-off, as agents do.
        if (p.done === null) await sleep(150 + Math.random() * 150)
      }
    }
  }
  await Promise.all(Array.from({ length: ctx.concurrency }, client))
}

const COLUMNS: Array<[string, (r: FailoverResult) => string | number | null]> = [
  ['replication', (r) => r.mode],
  ['paid calls/s', (r) => r.paidPerS.toFixed(0)],
  ['p50 ms', (r) => r.p50Ms.toFixed(1)],
  ['p99 ms', (r) => r.p99Ms.toFixed(1)],
  ['proofs', (r) => r.proofs],
  ['served', (r) => r.served],
  ['served twice', (r) => r.servedTwice],
  ['claims lost', (r) => r.claimsLost],
  ['in doubt (refunded)', (r) => r.inDoubt],
  ['served, not captured', (r) => r.servedNotCaptured],
  ['captured, not served', (r) => r.capturedNotServed],
  ['charged, not served', (r) => r.chargedNotServed],
  ['gave up', (r) => r.gaveUp],
  ['503s', (r) => r.status503],
  ['net errors', (r) => r.networkErrors],
  ['promote ms', (r) => r.promoteMs],
  ['outage ms', (r) => r.outageMs],
  ['reconcile exit', (r) => r.reconcileExit],
  ['balance drift', (r) => `${r.balanceDrift} of ${r.balancesChecked}`],
  ['crashed', (r) => r.crashed],
]

export function formatFailover(results: FailoverResult[]): string {
  const rows = results.map((r) => COLUMNS.map(([, f]) => String(f(r))))
  const head = COLUMNS.map(([h]) => h)
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`
  return [line(head), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)].join('\n')
}

export interface CostResult {
  mode: ReplicationMode
  phases: number
  /** Medians over the phases of this mode. */
  paidPerS: number
  p50Ms: number
  p99Ms: number
  /** Each phase's calls/s, in run order (the spread says how much the shared machine moved). */
  perPhase: number[]
  /** One connection's INSERT + COMMIT on the primary, alone (median over phases of each phase's p50 / p99). */
  commitP50Ms: number
  commitP99Ms: number
  /** Median over rounds of this mode's calls/s over async's in the same round (paired: drift cancels). */
  vsAsync: number | null
  /** The same pairing for p99. */
  p99VsAsync: number | null
}

/**
 * What each replication mode costs: one primary, standby and tollgate instance, the mode switched between
 * phases (ALTER SYSTEM + reload), each phase a closed loop of `concurrency` clients on fresh proofs. The
 * modes take turns in every round, in a rotated order, so a machine shared with other work weighs on each
 * alike; the medians are reported.
 */
export async function measureReplicationCost(options: {
  modes: ReplicationMode[]
  rounds: number
  proofsPerPhase: number
  concurrency: number
  log(line: string): void
}): Promise<CostResult[]> {
  const { modes, log } = options
  const cleanups: Array<() => Promise<unknown>> = []
  let stopping = false
  try {
    const phases = modes.length * options.rounds
    const rig = await startRig(
      { mode: 'async', proofs: (phases + 2) * options.proofsPerPhase, log },
      cleanups,
      () => stopping,
    )
    const proofs: ProofState[] = rig.hashes.map((hash) => ({ hash, done: null }))
    const stats = { s503: 0, network: 0, servedAt: [] as number[] }
    const phase = async (k: number) => {
      const slice = proofs.slice(k * options.proofsPerPhase, (k + 1) * options.proofsPerPhase)
      const latencies: number[] = []
      const t0 = performance.now()
      await drive(rig.a, rig.endpointId, slice, {
        concurrency: options.concurrency,
        spreadMs: 0,
        stats,
        latencies,
      })
      const s = (performance.now() - t0) / 1000
      latencies.sort((x, y) => x - y)
      const q = (f: number) =>
        latencies[Math.min(latencies.length - 1, Math.floor(f * latencies.length))] ?? 0
      const commits = await commitLatencies(rig.primary.url, 200)
      return {
        paidPerS: slice.filter((p) => p.done === 'served').length / s,
        p50: q(0.5),
        p99: q(0.99),
        commitP50: commits.p50,
        commitP99: commits.p99,
      }
    }
    // Warm-up (JIT, pools, caches, the watcher catching up with the mined transfers), not counted.
    await phase(0)
    await phase(1)
    const samples = new Map<
      ReplicationMode,
      Array<{
        round: number
        paidPerS: number
        p50: number
        p99: number
        commitP50: number
        commitP99: number
      }>
    >(modes.map((m) => [m, []]))
    let k = 2
    for (let r = 0; r < options.rounds; r++) {
      for (let i = 0; i < modes.length; i++) {
        const mode = modes[(i + r) % modes.length]!
        await setReplicationMode(rig.primary, rig.standby, mode)
        await waitForStreaming(rig.primary, rig.standby, mode !== 'async')
        const sample = await phase(k++)
        samples.get(mode)!.push({ round: r, ...sample })
        log(
          `[cost] round ${r + 1} ${mode}: ${sample.paidPerS.toFixed(0)} calls/s, p50 ${sample.p50.toFixed(1)} ms, p99 ${sample.p99.toFixed(1)} ms; commit p50 ${sample.commitP50.toFixed(2)} ms, p99 ${sample.commitP99.toFixed(2)} ms`,
        )
      }
    }
    if (rig.crashed() > 0) throw new Error(`tollgate crashed ${rig.crashed()}× while measuring`)
    const median = (xs: number[]) => {
      const v = [...xs].sort((x, y) => x - y)
      return v.length % 2 ? v[(v.length - 1) / 2]! : (v[v.length / 2 - 1]! + v[v.length / 2]!) / 2
    }
    const base = samples.get('async')
    const paired = (xs: Array<{ round: number; paidPerS: number; p99: number }>, f: 'paidPerS' | 'p99') =>
      base ? median(xs.map((x) => x[f] / base.find((b) => b.round === x.round)![f])) : null
    return modes.map((mode) => {
      const xs = samples.get(mode)!
      return {
        vsAsync: paired(xs, 'paidPerS'),
        p99VsAsync: paired(xs, 'p99'),
        mode,
        phases: xs.length,
        paidPerS: median(xs.map((x) => x.paidPerS)),
        p50Ms: median(xs.map((x) => x.p50)),
        p99Ms: median(xs.map((x) => x.p99)),
        commitP50Ms: median(xs.map((x) => x.commitP50)),
        commitP99Ms: median(xs.map((x) => x.commitP99)),
        perPhase: xs.map((x) => Math.round(x.paidPerS)),
      }
    })
  } finally {
    stopping = true
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {})
  }
}

/** `n` single-row INSERT + COMMIT on one connection, one after another: the mode's own price per commit. */
async function commitLatencies(url: string, n: number): Promise<{ p50: number; p99: number }> {
  const { default: postgres } = await import('postgres')
  const db = postgres(url, { max: 1, onnotice: () => {} })
  try {
    await db`CREATE TABLE IF NOT EXISTS commit_probe (n int)`
    const times: number[] = []
    for (let i = 0; i < n; i++) {
      const t = performance.now()
      await db`INSERT INTO commit_probe VALUES (${i})`
      times.push(performance.now() - t)
    }
    times.sort((x, y) => x - y)
    return { p50: times[Math.floor(n / 2)]!, p99: times[Math.floor(n * 0.99)]! }
  } finally {
    await db.end({ timeout: 1 })
  }
}

export function formatCost(results: CostResult[], concurrency: number, proofsPerPhase: number): string {
  const head = [
    'replication',
    'phases',
    'paid calls/s (median)',
    'p50 ms',
    'p99 ms',
    'calls/s vs async (paired)',
    'p99 vs async (paired)',
    'commit p50 / p99 ms',
    'calls/s per phase',
  ]
  const ratio = (x: number | null) => (x === null ? '-' : `${x.toFixed(2)}×`)
  const rows = results.map((r) => [
    r.mode,
    String(r.phases),
    r.paidPerS.toFixed(0),
    r.p50Ms.toFixed(1),
    r.p99Ms.toFixed(1),
    ratio(r.vsAsync),
    ratio(r.p99VsAsync),
    `${r.commitP50Ms.toFixed(2)} / ${r.commitP99Ms.toFixed(2)}`,
    r.perPhase.join(' '),
  ])
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`
  return [
    `${concurrency} clients, ${proofsPerPhase} fresh proofs per phase, one instance, primary and standby on this machine`,
    line(head),
    `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`,
    ...rows.map(line),
  ].join('\n')
}

export interface StandbyOutageResult {
  downMs: number
  proofs: number
  served: number
  gaveUp: number
  status503: number
  networkErrors: number
  /** The longest a served call took (first byte of its request to its answer), and the calls over 5 s. */
  slowestMs: number
  over5s: number
  crashed: number
}

/**
 * The synchronous standby stopped under paced paid load for `downMs`, then started again: what paid calls
 * see while the primary waits for it (the cost of the guarantee when its standby is away).
 */
export async function runStandbyOutage(options: {
  downMs: number
  proofs: number
  roundMs: number
  concurrency: number
  log(line: string): void
}): Promise<StandbyOutageResult> {
  const cleanups: Array<() => Promise<unknown>> = []
  let stopping = false
  try {
    const rig = await startRig(
      { mode: 'sync-on', proofs: options.proofs, log: options.log },
      cleanups,
      () => stopping,
    )
    const proofs: ProofState[] = rig.hashes.map((hash) => ({ hash, done: null }))
    const stats = { s503: 0, network: 0, servedAt: [] as number[] }
    const latencies: number[] = []
    const load = drive(rig.a, rig.endpointId, proofs, {
      concurrency: options.concurrency,
      spreadMs: options.roundMs,
      stats,
      latencies,
    })
    const fault = (async () => {
      await sleep(options.roundMs * 0.3)
      await rig.standby.stop('immediate')
      await sleep(options.downMs)
      await rig.standby.start()
      options.log(`[standby-outage] standby down ${options.downMs} ms, started again`)
    })()
    await Promise.all([load, fault])
    const result: StandbyOutageResult = {
      downMs: options.downMs,
      proofs: proofs.length,
      served: proofs.filter((p) => p.done === 'served').length,
      gaveUp: proofs.filter((p) => p.done === 'gave_up').length,
      status503: stats.s503,
      networkErrors: stats.network,
      slowestMs: Math.round(Math.max(0, ...latencies)),
      over5s: latencies.filter((l) => l > 5_000).length,
      crashed: rig.crashed(),
    }
    options.log(`[standby-outage] ${JSON.stringify(result)}`)
    return result
  } finally {
    stopping = true
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {})
  }
}
