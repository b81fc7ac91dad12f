// The chaos run: a private PostgreSQL server, anvil behind a cuttable RPC proxy, an upstream that counts
// what it serves, and two tollgate server processes on one database. Paid calls (one fresh tx-hash proof
// each, transfers mined before the load) go through both instances with clients that retry on 5xx, 409
// and network errors, while one fault is injected per round. Afterwards every proof is replayed on both
// instances and each round is judged from the upstream's counts and the database (claims, calls, ledger),
// plus `npm run reconcile`'s exit code. Every fourth proof pays a usage-priced call instead (tokens read from
// an OpenAI-style stream long enough for a fault to land mid-stream, the proof a prepaid ceiling): its
// charge is checked against the usage the client received, and its unused ceiling against the refunds booked.
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import postgres from 'postgres'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { makeProofs } from '../../bench/proofs.ts'
import { type DevChain, startDevChain } from '../../src/chain/dev-chain.ts'
import { checkBalances } from '../../src/control-plane/jobs/reconcile-balances.ts'
import { createSql } from '../../src/db/sql.ts'
import { postJson } from '../helpers/api.ts'
import { type ChildService, freePort, pidAlive, startChildService } from '../helpers/child-service.ts'
import { entryArgs } from '../helpers/entry.ts'
import { type RpcProxy, startRpcProxy } from '../helpers/rpc-proxy.ts'
import { type CountingUpstream, STREAM_PROMPT_TOKENS, startCountingUpstream } from './counting-upstream.ts'
import { type PgCluster, startPgCluster } from './pg-cluster.ts'

const ROOT = join(import.meta.dirname, '..', '..')
const PRICE_ATOMIC = 1_000n // $0.001
/**
 * The usage-priced endpoint: $1 / M input and $10 / M output tokens (1 and 10 base units a token), a ceiling
 * of the proofs' value. Its streams have 20 to 60 output tokens: 300 to 700 base units, the rest refunded.
 */
const USAGE_PRICING = {
  model: 'usage',
  unit: 'tokens',
  max_price: 0.001,
  input_price_per_million: 1,
  output_price_per_million: 10,
}
const usageCharge = (prompt: number, completion: number) => BigInt(prompt + completion * 10)

export type FaultName = 'kill' | 'pg-restart' | 'rpc' | 'upstream'

export interface ChaosOptions {
  /** Fresh proofs in all, split evenly over the rounds. */
  proofs: number
  /** One fault per round, in order. */
  faults: FaultName[]
  /** The load of a round is spread over at least this long, so the fault lands under load. */
  roundMs: number
  /** Clients in flight at once. */
  concurrency: number
  log(line: string): void
}

export interface RoundResult {
  fault: FaultName
  proofs: number
  served: number
  servedTwice: number
  /** Served by the upstream, never captured: calls in flight on a killed process (the stated bound). */
  servedNotCapturedKilledInFlight: number
  /** Served by the upstream, never captured, with no kill to explain it. */
  servedNotCaptured: number
  capturedNotServed: number
  /** An owner share booked for a proof the upstream never served. */
  chargedNotServed: number
  /** Proofs whose client gave up (no 2xx and no final 402 before its deadline). */
  gaveUp: number
  status503: number
  /** 503 answers outside the fault window (plus a recovery grace). */
  status503Outside: number
  /** 503 answers without a Retry-After header (metered calls and the API). */
  status503NoRetryAfter: number
  /** 500 answers from the API probe (GET /api/v1/account): a dependency fault is not a bug. */
  api500: number
  /** /readyz of instance a answered 503 at least once during the round / answered 200 after it. */
  readyRedSeen: boolean
  readyAfter: boolean
  /** Names of the readiness checks seen failing during the round. */
  readyFailed: string[]
  networkErrors: number
  /** Network errors (refused, reset, client timeout) of attempts wholly outside the fault window and its grace. */
  networkOutside: number
  /** Attempts abandoned by the client after CLIENT_TIMEOUT_MS without an answer (a stall). */
  clientTimeouts: number
  /** The last 503 after the fault window closed, ms after it (null: none after it): how fast calls resumed. */
  last503AfterMs: number | null
  /** The slowest /readyz answer of the round, ms (a probe that got none counts its client timeout). */
  readyzMaxMs: number
  reconcileExit: number | null
  /** Running balances (accounts, wallets) recomputed from their entries after the round, and how many differ. */
  balancesChecked: number
  balanceDrift: number
  crashed: number
  faultMs: number
  /** Usage-priced proofs of the round, served by the upstream, and whose client received the whole stream. */
  usageProofs: number
  usageServed: number
  usageCompleted: number
  /** Completed streams in flight when the fault was injected (started before it, ended after). */
  usageMidStream: number
  /** Served by the upstream, no call row or a zero charge (a kill in flight aside): served unpaid. */
  usageServedUnpaid: number
  /** Call rows charged above their ceiling, or with a ceiling other than the proof's value. */
  usageOverCeiling: number
  /** Completed streams whose call row's charge or output tokens differ from the usage the client received. */
  usageChargeMismatch: number
  /** Usage call rows whose refund entries are not exactly one of ceiling − charge (none when that is 0). */
  usageRefundMismatch: number
  /** Base units charged and refunded on the round's usage calls. */
  usageCharged: bigint
  usageRefunded: bigint
}

export interface ChaosResult {
  rounds: RoundResult[]
  /** Serves during the replay of proofs the upstream had already served: a proof served twice. */
  replayServedAgain: number
  /**
   * Serves during the replay of proofs the load never got served (their client stopped at a 402): not a
   * double serve, but a 402 that was not final. Reported with each attempt's trail.
   */
  replayFirstServes: number
  crashed: number
  /** Output tails of instances that died unexpectedly. */
  crashOutput: string[]
  ok: boolean
}

interface Instance {
  name: string
  port: number
  child: ChildService
  /** Bumped on every deliberate kill: an attempt that started on an older generation was killed. */
  generation: number
  expectExit: boolean
}

interface ProofState {
  hash: string
  round: number
  killedInFlight: boolean
  done: 'served' | 'refused' | 'gave_up' | null
  /** What each attempt saw, e.g. 'a:200', 'b:409', 'a:net' (load) and 'replay a:402': printed for a suspect. */
  trail: string[]
  /** Output tokens asked of the token stream: a usage-priced proof; 0 for a fixed-price one. */
  events: number
  /** What the client of a usage-priced proof received in full: the usage chunk, and when the stream ran. */
  received: { prompt: number; completion: number; from: number; to: number } | null
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** A paid call's client gives up after this long without an answer: an outage must answer 503 sooner. */
const CLIENT_TIMEOUT_MS = 6_000
/** The fault window opens when the fault is injected, less this (a request already in flight). */
const WINDOW_LEAD_MS = 500
/** Calls must answer normally again within this of the fault's end (PostgreSQL accepting connections). */
export const RECOVERY_GRACE_MS = 2_000

interface LoadStats {
  /** Each 503: when it was answered, by which instance, to what (paid call or API probe), and its error code. */
  s503: Array<{ at: number; who: string; code: string }>
  /** Each network error: when its attempt started and ended, and whether the client timed out. */
  network: Array<{ from: number; to: number; timeout: boolean }>
  noRetryAfter: number
  readyzMaxMs: number
}

export async function runChaos(options: ChaosOptions): Promise<ChaosResult> {
  const { log } = options
  const cleanups: Array<() => Promise<unknown>> = []
  const cleanup = async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {})
  }
  try {
    const started = Date.now()
    const cluster: PgCluster = await startPgCluster()
    cleanups.push(() => cluster.destroy())
    const chain: DevChain = await startDevChain({
      payers: 1,
      payerFunding: PRICE_ATOMIC * BigInt(options.proofs + 10),
      treasuryFunding: 1_000_000n,
    })
    cleanups.push(() => chain.stop())
    const rpc: RpcProxy = await startRpcProxy(chain.rpcUrl)
    cleanups.push(() => rpc.close())
    const upstream: CountingUpstream = await startCountingUpstream()
    cleanups.push(() => upstream.close())
    log(`cluster ${cluster.url}, anvil ${chain.rpcUrl} behind ${rpc.url}, upstream ${upstream.url}`)

    const settings = {
      proxy: { allow_private_upstreams: true, upstream_timeout_ms: 2_000 },
      chain: { poll_interval_ms: 200, rpc_timeout_ms: 2_000 },
      log: { level: 'warn' },
    }
    const crashOutput: string[] = []
    let crashed = 0
    let roundCrashes = 0
    const spawnChild = (port: number) =>
      startChildService({
        databaseUrl: cluster.url,
        treasuryKey: chain.treasury.privateKey,
        rpcUrl: rpc.url,
        usdcAddress: chain.usdcAddress,
        settings,
        port,
      })
    /** (Re)starts an instance on its port and watches the new process. */
    const restart = async (inst: Instance) => {
      inst.child = await spawnChild(inst.port)
      inst.expectExit = false
      watch(inst)
    }
    // An instance that exits without being told to is a crash: counted, its output kept, restarted.
    const watch = (inst: Instance) => {
      const child = inst.child
      child.exited.then(async (signal) => {
        if (inst.expectExit || stopping) return
        crashed++
        roundCrashes++
        crashOutput.push(
          `${inst.name} (pid ${child.pid}, ${signal ?? 'exit'}):\n${child.output().slice(-3000)}`,
        )
        log(`!! ${inst.name} crashed (${signal ?? 'exit'}); restarting`)
        inst.generation++
        await restart(inst)
      })
    }
    let stopping = false
    const instances: Instance[] = []
    for (const name of ['a', 'b']) {
      const inst = { name, port: await freePort(), generation: 0, expectExit: false } as Instance
      await restart(inst)
      instances.push(inst)
    }
    cleanups.push(async () => {
      stopping = true
      for (const i of instances) await i.child.kill('SIGTERM')
    })
    log(`instances up: a pid ${instances[0]!.child.pid}, b pid ${instances[1]!.child.pid}`)

    const api = (path: string, body: unknown, key?: string) =>
      postJson(instances[0]!.child.url, path, body, key)
    const reg = await api('/api/v1/register', {
      wallet_address: privateKeyToAccount(generatePrivateKey()).address,
      business_name: 'Chaos Co',
    })
    const endpoint = await api(
      '/api/v1/endpoints',
      { upstream_url: `${upstream.url}/work`, price: 0.001 },
      reg.api_key as string,
    )
    const usageEndpoint = await api(
      '/api/v1/endpoints',
      { upstream_url: `${upstream.url}/v1/chat/completions`, pricing: USAGE_PRICING },
      reg.api_key as string,
    )
    const endpointId = endpoint.id as string
    const usageEndpointId = usageEndpoint.id as string
    if (!usageEndpointId) throw new Error(`usage endpoint: ${JSON.stringify(usageEndpoint)}`)

    const hashes = await makeProofs({
      rpcUrl: chain.rpcUrl,
      chainId: chain.chainId,
      usdc: chain.usdcAddress,
      payerKey: chain.payers[0]!.privateKey,
      treasury: chain.treasury.address,
      value: PRICE_ATOMIC,
      count: options.proofs,
    })
    log(`${hashes.length} proofs mined in ${Math.round((Date.now() - started) / 1000)} s`)
    // Let both watchers see the transfers: the load then needs no RPC unless the watcher missed one. A settle
    // period, not a condition: a missed transfer is allowed (verified by RPC then), so nothing is awaited.
    await sleep(2_000)

    const perRound = Math.floor(hashes.length / options.faults.length)
    const proofs: ProofState[] = hashes.map((hash, i) => ({
      hash,
      round: Math.min(Math.floor(i / perRound), options.faults.length - 1),
      killedInFlight: false,
      done: null,
      trail: [],
      events: i % 4 === 3 ? 20 + ((i * 7) % 41) : 0,
      received: null,
    }))
    const ids = { fixed: endpointId, usage: usageEndpointId }

    const db = postgres(cluster.url, { max: 2, onnotice: () => {} })
    cleanups.push(() => db.end({ timeout: 1 }))

    const rounds: RoundResult[] = []
    for (const [r, fault] of options.faults.entries()) {
      const mine = proofs.filter((p) => p.round === r)
      roundCrashes = 0
      const stats: LoadStats = { s503: [], network: [], noRetryAfter: 0, readyzMaxMs: 0 }
      const window = { from: Number.POSITIVE_INFINITY, to: 0 }
      log(`round ${r + 1}: ${fault}, ${mine.length} proofs`)
      const roundStart = Date.now()
      const load = drive(mine, {
        instances,
        ids,
        concurrency: options.concurrency,
        spreadMs: options.roundMs,
        stats,
      })
      const injected = (async () => {
        // The fault lands 30 % into the round's load: its timing is part of the run.
        await sleep(options.roundMs * 0.3)
        window.from = Date.now()
        await inject(fault, { instances, cluster, rpc, upstream, restart, log })
        window.to = Date.now()
      })()
      const probing = { on: true, readyRed: false, api500: 0, failed: new Set<string>() }
      const probe = probeLoop(instances[0]!, reg.api_key as string, probing, stats)
      await Promise.all([load, injected])
      probing.on = false
      await probe
      // Captures are batched: give them time to land before the books are read. Not a condition to poll:
      // an in-doubt claim stays 'claimed' by design, so "no claim left open" never has to become true.
      await sleep(2_000)
      const reconcileExit = await runReconcile(cluster.url, chain, log)
      const balances = await balancesAgainstEntries(cluster.url)
      const outsideWindow = (from: number, to: number) =>
        to < window.from - WINDOW_LEAD_MS || from > window.to + RECOVERY_GRACE_MS
      const outside503 = stats.s503.filter((s) => outsideWindow(s.at, s.at))
      const outside = outside503.length
      // What answered 503 outside the window, and why: the code names the dependency that was not back.
      for (const s of outside503)
        log(`   503 outside the window: ${s.who} ${s.code} at ${s.at - window.to} ms after the fault`)
      if (outside503.length > 0) {
        for (const inst of instances) {
          for (const line of errorLinesBetween(inst.child.output(), window.to, window.to + 10_000))
            log(`   ${inst.name} log: ${line}`)
        }
        for (const line of serverLogBetween(cluster.dir, window.to - 1_000, window.to + 10_000))
          log(`   postgres log: ${line}`)
      } else if (process.env.CHAOS_PG_LOG === '1') {
        for (const line of serverLogBetween(cluster.dir, window.to - 1_000, window.to + 10_000))
          log(`   postgres log: ${line}`)
      }
      const usageMine = mine.filter((p) => p.events > 0)
      const after503 = stats.s503.filter((s) => s.at > window.to).map((s) => s.at - window.to)
      rounds.push({
        fault,
        proofs: mine.length,
        served: 0,
        servedTwice: 0,
        servedNotCapturedKilledInFlight: 0,
        servedNotCaptured: 0,
        capturedNotServed: 0,
        chargedNotServed: 0,
        gaveUp: mine.filter((p) => p.done === 'gave_up').length,
        status503: stats.s503.length,
        status503Outside: outside,
        status503NoRetryAfter: stats.noRetryAfter,
        api500: probing.api500,
        readyRedSeen: probing.readyRed,
        readyAfter: await readyz(instances[0]!).then((st) => st === 200),
        readyFailed: [...probing.failed],
        networkErrors: stats.network.length,
        networkOutside: stats.network.filter((n) => outsideWindow(n.from, n.to)).length,
        clientTimeouts: stats.network.filter((n) => n.timeout).length,
        last503AfterMs: after503.length > 0 ? Math.max(...after503) : null,
        readyzMaxMs: stats.readyzMaxMs,
        reconcileExit,
        balancesChecked: balances.checked,
        balanceDrift: balances.drifted,
        crashed: roundCrashes,
        faultMs: window.to - window.from,
        usageProofs: usageMine.length,
        usageServed: 0,
        usageCompleted: usageMine.filter((p) => p.received).length,
        usageMidStream: usageMine.filter(
          (p) => p.received && p.received.from < window.from && p.received.to > window.from,
        ).length,
        usageServedUnpaid: 0,
        usageOverCeiling: 0,
        usageChargeMismatch: 0,
        usageRefundMismatch: 0,
        usageCharged: 0n,
        usageRefunded: 0n,
      })
      log(
        `round ${r + 1} done in ${Math.round((Date.now() - roundStart) / 1000)} s, reconcile exit ${reconcileExit}`,
      )
    }

    // Every proof once more on both instances: a spent proof must never be served again.
    const servedBefore = new Map(upstream.served)
    await replayAll(proofs, instances, ids, options.concurrency)
    // A fixed wait on purpose, for a negative: a replay that reached an upstream late is still counted.
    await sleep(2_000)
    let replayServedAgain = 0
    let replayFirstServes = 0
    for (const p of proofs) {
      const was = servedBefore.get(p.hash) ?? 0
      const now = upstream.served.get(p.hash) ?? 0
      if (was > 0) replayServedAgain += now - was
      else replayFirstServes += now
    }
    await explainSuspects(db, proofs, upstream, servedBefore, log)

    await judge(db, proofs, upstream, rounds)
    await judgeUsage(db, proofs, upstream, rounds)
    const ok =
      rounds.every(
        (r) => r.servedTwice === 0 && r.chargedNotServed === 0 && answeredInTime(r) && usageSound(r),
      ) &&
      crashed === 0 &&
      replayServedAgain === 0
    for (const inst of instances)
      if (!inst.expectExit && !pidAlive(inst.child.pid)) log(`!! ${inst.name} is not running at the end`)
    return { rounds, replayServedAgain, replayFirstServes, crashed, crashOutput, ok }
  } finally {
    await cleanup()
  }
}

/**
 * Outside its fault window (and the recovery grace) a round saw no 503 and no network error; a database
 * restart never made a client wait out its timeout (an outage answers 503 at once, not a stall).
 */
export function answeredInTime(r: RoundResult): boolean {
  return (
    r.status503Outside === 0 && r.networkOutside === 0 && (r.fault !== 'pg-restart' || r.clientTimeouts === 0)
  )
}

/** The usage-priced calls of a round: none served unpaid, none above its ceiling, charged as measured, refunded once. */
export function usageSound(r: RoundResult): boolean {
  return (
    r.usageServedUnpaid === 0 &&
    r.usageOverCeiling === 0 &&
    r.usageChargeMismatch === 0 &&
    r.usageRefundMismatch === 0
  )
}

/**
 * One paid call of a proof: a GET of the fixed-price endpoint, or for a usage-priced proof a streamed chat
 * completion (usage asked for, so the client sees the usage chunk it is charged by). A usage client's
 * answer counts as received only with its usage chunk and [DONE].
 */
async function paidCall(
  url: string,
  p: ProofState,
  ids: { fixed: string; usage: string },
): Promise<{ status: number; retryAfter: string | null; text: string }> {
  const signal = AbortSignal.timeout(CLIENT_TIMEOUT_MS)
  if (p.events === 0) {
    const res = await fetch(`${url}/m/${ids.fixed}/work?p=${p.hash}`, {
      headers: { 'x-payment': p.hash },
      signal,
    })
    return { status: res.status, retryAfter: res.headers.get('retry-after'), text: await res.text() }
  }
  const from = Date.now()
  const res = await fetch(`${url}/m/${ids.usage}?p=${p.hash}&n=${p.events}`, {
    method: 'POST',
    headers: { 'x-payment': p.hash, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'chaos',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'count' }],
    }),
    signal,
  })
  const text = await res.text()
  if (res.status < 300 && text.includes('data: [DONE]')) {
    for (const event of text.split('\n\n')) {
      const data = event.startsWith('data: ') ? event.slice(6) : ''
      if (!data.startsWith('{')) continue
      const usage = (JSON.parse(data) as { usage?: { prompt_tokens: number; completion_tokens: number } })
        .usage
      if (usage) {
        p.received = {
          prompt: usage.prompt_tokens,
          completion: usage.completion_tokens,
          from,
          to: Date.now(),
        }
      }
    }
  }
  return { status: res.status, retryAfter: res.headers.get('retry-after'), text }
}

/**
 * Every proof the upstream served more than once, or served on replay: what its clients saw (each attempt's
 * instance, status and time into the round) and what its claim says.
 */
async function explainSuspects(
  db: postgres.Sql,
  proofs: ProofState[],
  upstream: CountingUpstream,
  servedBeforeReplay: Map<string, number>,
  log: (line: string) => void,
): Promise<void> {
  for (const p of proofs) {
    const served = upstream.served.get(p.hash) ?? 0
    if (served < 2 && served === (servedBeforeReplay.get(p.hash) ?? 0)) continue
    const [claim] = await db`
      SELECT status, attempts, releases, claimed_at, lease_until, retry_until, captured_at
      FROM claims WHERE proof_key = ${`tx:${p.hash.toLowerCase()}`}`
    log(`!! ${p.hash} served ${served}×: ${p.trail.join(' ')} | claim ${JSON.stringify(claim ?? null)}`)
  }
}

async function inject(
  fault: FaultName,
  ctx: {
    instances: Instance[]
    cluster: PgCluster
    rpc: RpcProxy
    upstream: CountingUpstream
    restart(inst: Instance): Promise<void>
    log(line: string): void
  },
): Promise<void> {
  if (fault === 'kill') {
    const victim = ctx.instances[1]!
    const pid = victim.child.pid
    victim.expectExit = true
    victim.generation++
    await victim.child.kill('SIGKILL')
    ctx.log(`   SIGKILL ${victim.name} pid ${pid}: gone=${!pidAlive(pid)}`)
    // Down for a second under load: the outage is the fault.
    await sleep(1_000)
    await ctx.restart(victim)
    ctx.log(`   ${victim.name} restarted as pid ${victim.child.pid}`)
  } else if (fault === 'pg-restart') {
    const t = Date.now()
    await ctx.cluster.restart('fast', 1_000)
    ctx.log(`   PostgreSQL restarted (fast, 1 s down) in ${Date.now() - t} ms`)
  } else if (fault === 'rpc') {
    // The outage lengths are the fault under test.
    await ctx.rpc.setMode('refuse')
    await sleep(5_000)
    await ctx.rpc.setMode('blackhole')
    await sleep(4_000)
    await ctx.rpc.setMode('pass')
    ctx.log('   RPC refused 5 s, black-holed 4 s, restored')
  } else {
    // The failure lengths are the fault under test.
    ctx.upstream.setMode('fail')
    await sleep(3_000)
    ctx.upstream.setMode('hang')
    await sleep(3_000)
    ctx.upstream.setMode('ok')
    ctx.log('   upstream 500s 3 s, hung 3 s, restored')
  }
}

/** Clients: each proof until it is served (2xx) or refused (402), retrying 5xx, 409 and network errors. */
async function drive(
  proofs: ProofState[],
  ctx: {
    instances: Instance[]
    ids: { fixed: string; usage: string }
    concurrency: number
    spreadMs: number
    stats: LoadStats
  },
): Promise<void> {
  const t0 = Date.now()
  const gapMs = ctx.spreadMs / Math.max(1, proofs.length)
  let next = 0
  const worker = async () => {
    for (;;) {
      const k = next++
      const p = proofs[k]
      if (!p) return
      const due = t0 + k * gapMs
      // Paced load: each proof has its start time.
      if (due > Date.now()) await sleep(due - Date.now())
      const deadline = Date.now() + 45_000
      for (let attempt = 0; p.done === null; attempt++) {
        if (Date.now() > deadline) {
          p.done = 'gave_up'
          break
        }
        const inst = ctx.instances[(k + attempt) % ctx.instances.length]!
        const generation = inst.generation
        const sentAt = Date.now()
        try {
          const res = await paidCall(inst.child.url, p, ctx.ids)
          const text = res.text
          p.trail.push(`${inst.name}:${res.status}@${Date.now() - t0}`)
          if (res.status < 300) p.done = 'served'
          else if (res.status === 402) p.done = 'refused'
          else if (res.status === 503) {
            ctx.stats.s503.push({ at: Date.now(), who: `${inst.name} paid`, code: errorCode(text) })
            if (!res.retryAfter) ctx.stats.noRetryAfter++
          } else if (res.status < 500 && res.status !== 409) {
            throw new Error(`unexpected ${res.status}: ${text.slice(0, 200)}`)
          }
        } catch (err) {
          if ((err as Error).message.startsWith('unexpected')) throw err
          const timeout = (err as Error).name === 'TimeoutError'
          p.trail.push(`${inst.name}:${timeout ? 'timeout' : 'net'}@${Date.now() - t0}`)
          ctx.stats.network.push({ from: sentAt, to: Date.now(), timeout })
          if (inst.generation !== generation) p.killedInFlight = true
        }
        // A retrying client's back-off, as agents do.
        if (p.done === null) await sleep(150 + Math.random() * 150)
      }
    }
  }
  await Promise.all(Array.from({ length: ctx.concurrency }, worker))
}

/** An instance's error log lines (pino JSON) logged between two times, at most 20, shortened. */
function errorLinesBetween(output: string, from: number, to: number): string[] {
  const lines: string[] = []
  for (const line of output.split('\n')) {
    if (!line.startsWith('{')) continue
    try {
      const entry = JSON.parse(line) as { time?: number | string }
      const at = typeof entry.time === 'string' ? Date.parse(entry.time) : entry.time
      if (at !== undefined && at >= from && at <= to) lines.push(line.slice(0, 600))
    } catch {}
  }
  return lines.slice(0, 20)
}

/** PostgreSQL's server.log lines (prefix '%m [%p] ', UTC) logged between two times, at most 40, shortened. */
function serverLogBetween(dir: string, from: number, to: number): string[] {
  let text = ''
  try {
    text = readFileSync(join(dir, 'server.log'), 'utf8')
  } catch {
    return []
  }
  const lines: string[] = []
  for (const line of text.split('\n')) {
    const at = Date.parse(line.slice(0, 23).replace(' ', 'T') + 'Z')
    if (at >= from && at <= to) lines.push(line.slice(0, 400))
  }
  return lines.slice(0, 40)
}

/** The error code of a JSON error body (`{"error":{"code":…}}`), or what the body starts with. */
function errorCode(text: string): string {
  try {
    const body = JSON.parse(text) as { error?: { code?: string; message?: string } }
    return `${body.error?.code ?? '?'}: ${body.error?.message ?? ''}`
  } catch {
    return text.slice(0, 80)
  }
}

async function readyz(inst: Instance, failed?: Set<string>, stats?: LoadStats): Promise<number> {
  const sentAt = Date.now()
  const took = () => {
    if (stats) stats.readyzMaxMs = Math.max(stats.readyzMaxMs, Date.now() - sentAt)
  }
  return fetch(`${inst.child.adminUrl}/readyz`, { signal: AbortSignal.timeout(12_000) }).then(
    async (r) => {
      const body = (await r.json().catch(() => ({}))) as { checks?: Array<{ name: string; ok: boolean }> }
      took()
      for (const c of body.checks ?? []) if (!c.ok) failed?.add(c.name)
      return r.status
    },
    () => {
      took()
      return 0
    },
  )
}

/** While a round runs: /readyz and an authenticated API read on instance a, every 300 ms. */
async function probeLoop(
  inst: Instance,
  apiKey: string,
  probing: { on: boolean; readyRed: boolean; api500: number; failed: Set<string> },
  stats: LoadStats,
): Promise<void> {
  while (probing.on) {
    const [ready, api] = await Promise.all([
      readyz(inst, probing.failed, stats),
      fetch(`${inst.child.url}/api/v1/account`, {
        headers: { authorization: `Bearer ${apiKey}` },
        signal: AbortSignal.timeout(12_000),
      }).then(
        (r) =>
          r.text().then((text) => ({ status: r.status, retryAfter: r.headers.get('retry-after'), text })),
        () => null,
      ),
    ])
    if (ready === 503) probing.readyRed = true
    if (api?.status === 500) probing.api500++
    if (api?.status === 503) {
      stats.s503.push({ at: Date.now(), who: `${inst.name} api`, code: errorCode(api.text) })
      if (!api.retryAfter) stats.noRetryAfter++
    }
    // The probe's sampling period.
    await sleep(300)
  }
}

async function replayAll(
  proofs: ProofState[],
  instances: Instance[],
  ids: { fixed: string; usage: string },
  concurrency: number,
): Promise<void> {
  let next = 0
  const worker = async () => {
    for (;;) {
      const p = proofs[next++]
      if (!p) return
      for (const inst of instances) {
        // What the load's client received stays as it was: a replay must not rewrite it.
        const received = p.received
        await paidCall(inst.child.url, p, ids)
          .then((r) => p.trail.push(`replay ${inst.name}:${r.status}`))
          .finally(() => {
            p.received = received
          })
          .catch(() => p.trail.push(`replay ${inst.name}:net`))
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
}

/** The columns, from the upstream's counts and the books. */
async function judge(
  db: postgres.Sql,
  proofs: ProofState[],
  upstream: CountingUpstream,
  rounds: RoundResult[],
): Promise<void> {
  const calls = await db<{ proof_key: string; n: number }[]>`
    SELECT call_proof_key(proof_key, proof) AS proof_key, count(*)::int AS n FROM calls GROUP BY 1`
  const callCount = new Map(calls.map((c) => [c.proof_key, c.n]))
  // Charged: an owner share of its own, or (migration 0050) in the capture batch that booked it.
  const owner = await db<{ proof_key: string }[]>`
    SELECT call_proof_key(c.proof_key, c.proof) AS proof_key FROM ledger_entries l
    JOIN calls c ON l.source_type = 'call' AND l.source_id = c.id
    WHERE l.kind = 'owner_share'
    UNION
    SELECT call_proof_key(c.proof_key, c.proof) AS proof_key FROM ledger_entries l
    JOIN calls c ON l.source_type IN ('capture_batch', 'settlement_batch') AND l.source_id = c.ledger_batch_id::text
      AND l.account_id = c.account_id
    WHERE l.kind = 'owner_share'`
  const charged = new Set(owner.map((o) => o.proof_key))
  for (const p of proofs) {
    const round = rounds[p.round]!
    const key = `tx:${p.hash.toLowerCase()}`
    const served = upstream.served.get(p.hash) ?? 0
    const captured = callCount.get(key) ?? 0
    if (served > 0) round.served++
    if (served > 1) round.servedTwice++
    if (served > 0 && captured === 0) {
      if (p.killedInFlight) round.servedNotCapturedKilledInFlight++
      else round.servedNotCaptured++
    }
    if (served === 0 && captured > 0) round.capturedNotServed++
    if (served === 0 && charged.has(key)) round.chargedNotServed++
  }
}

/** The usage columns, from the call rows and their refund entries against what the clients received. */
async function judgeUsage(
  db: postgres.Sql,
  proofs: ProofState[],
  upstream: CountingUpstream,
  rounds: RoundResult[],
): Promise<void> {
  const rows = await db<
    {
      proof_key: string
      amount_atomic: string
      ceiling_atomic: string | null
      refund_atomic: string
      output_tokens: number | null
      refunds: number
      refunded: string
    }[]
  >`
    SELECT call_proof_key(c.proof_key, c.proof) AS proof_key, c.amount_atomic::text, c.ceiling_atomic::text, c.refund_atomic::text,
           (c.usage -> 'quantities' ->> 'output_tokens')::int AS output_tokens,
           count(l.id)::int AS refunds, coalesce(sum(l.amount_atomic), 0)::text AS refunded
    FROM calls c
    LEFT JOIN ledger_entries l ON l.source_type = 'call' AND l.source_id = c.id AND l.kind = 'refund'
    WHERE c.pricing_model = 'usage'
    GROUP BY c.id, c.created_at`
  const byKey = new Map<string, (typeof rows)[number][]>()
  for (const row of rows) byKey.set(row.proof_key, [...(byKey.get(row.proof_key) ?? []), row])
  for (const p of proofs) {
    if (p.events === 0) continue
    const round = rounds[p.round]!
    const calls = byKey.get(`tx:${p.hash.toLowerCase()}`) ?? []
    const served = upstream.served.get(p.hash) ?? 0
    if (served > 0) round.usageServed++
    const charged = calls.reduce((n, c) => n + BigInt(c.amount_atomic), 0n)
    if (served > 0 && charged === 0n && !p.killedInFlight) round.usageServedUnpaid++
    for (const c of calls) {
      const amount = BigInt(c.amount_atomic)
      const refund = BigInt(c.refund_atomic)
      round.usageCharged += amount
      round.usageRefunded += BigInt(c.refunded)
      if (c.ceiling_atomic !== String(PRICE_ATOMIC) || amount > PRICE_ATOMIC) round.usageOverCeiling++
      if (
        refund !== PRICE_ATOMIC - amount ||
        BigInt(c.refunded) !== refund ||
        c.refunds !== (refund > 0n ? 1 : 0)
      )
        round.usageRefundMismatch++
    }
    const got = p.received
    if (got) {
      const c = calls[0]
      if (
        !c ||
        calls.length !== 1 ||
        got.prompt !== STREAM_PROMPT_TOKENS ||
        got.completion !== p.events ||
        c?.output_tokens !== got.completion ||
        BigInt(c.amount_atomic) !== usageCharge(got.prompt, got.completion)
      ) {
        round.usageChargeMismatch++
      }
    }
  }
}

/**
 * The world a chaos test runs in: a fresh PostgreSQL cluster, a dev chain and an upstream, started together;
 * their stops are pushed on `cleanups` (the test's finally runs them).
 */
export async function startChaosWorld<U extends { close(): Promise<unknown> }>(
  chainOptions: Parameters<typeof startDevChain>[0],
  startUpstream: () => Promise<U>,
  cleanups: Array<() => Promise<unknown>>,
): Promise<{ cluster: PgCluster; chain: DevChain; upstream: U }> {
  const [cluster, chain, upstream] = await Promise.all([
    startPgCluster(),
    startDevChain(chainOptions),
    startUpstream(),
  ])
  cleanups.push(
    () => cluster.destroy(),
    () => chain.stop(),
    () => upstream.close(),
  )
  return { cluster, chain, upstream }
}

/** A tollgate child process on the cluster's database and this chain, with these settings. */
export function startChildOn(
  cluster: { url: string },
  chain: DevChain,
  settings: Record<string, unknown>,
  env?: Record<string, string>,
): Promise<ChildService> {
  return startChildService({
    ...(env ? { env } : {}),
    databaseUrl: cluster.url,
    treasuryKey: chain.treasury.privateKey,
    rpcUrl: chain.rpcUrl,
    usdcAddress: chain.usdcAddress,
    settings,
  })
}

/**
 * Two children from `start`, started together (migrations run once, under an advisory lock). The array is
 * the test's to change (a restarted child replaces its slot): `cleanups` SIGTERMs whatever it holds then.
 */
export async function startTwoChildren(
  start: () => Promise<ChildService>,
  cleanups: Array<() => Promise<unknown>>,
): Promise<ChildService[]> {
  const children = await Promise.all([start(), start()])
  cleanups.push(async () => {
    for (const c of children) await c.kill('SIGTERM')
  })
  return children
}

/** A merchant (a fresh wallet) registered at `url`, and one endpoint of `body`: its key and the endpoint. */
export async function merchantEndpoint(
  url: string,
  businessName: string,
  body: Record<string, unknown>,
): Promise<{ key: string; ep: any }> {
  const reg = await postJson(url, '/api/v1/register', {
    wallet_address: privateKeyToAccount(generatePrivateKey()).address,
    business_name: businessName,
  })
  const key = reg.api_key as string
  return { key, ep: await postJson(url, '/api/v1/endpoints', body, key) }
}

/**
 * Every running balance (account and wallet) against the sums of its ledger entries: the reconcile's own
 * check at full scope, so a drift the faults caused anywhere is counted (the ranged reconcile above checks
 * the accounts its range touched).
 */
export async function balancesAgainstEntries(
  databaseUrl: string,
): Promise<{ checked: number; drifted: number }> {
  const sql = createSql(databaseUrl, { max: 1 })
  try {
    const c = await checkBalances(sql, null)
    return {
      checked: c.accounts_checked + c.wallets_checked,
      drifted: c.drifted_accounts + c.drifted_wallets,
    }
  } finally {
    await sql.end({ timeout: 1 })
  }
}

export async function runReconcile(
  databaseUrl: string,
  chain: DevChain,
  log: (line: string) => void,
): Promise<number | null> {
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, [...entryArgs('cli/reconcile'), '--from', '1h'], {
      cwd: ROOT,
      env: {
        ...process.env,
        NODE_ENV: 'test',
        DATABASE_URL: databaseUrl,
        RPC_URL: chain.rpcUrl,
        USDC_ADDRESS: chain.usdcAddress,
        TREASURY_PRIVATE_KEY: chain.treasury.privateKey,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString()
    })
    proc.stderr!.on('data', (d: Buffer) => {
      out += d.toString()
    })
    const timer = setTimeout(() => proc.kill('SIGKILL'), 60_000)
    proc.on('exit', (code) => {
      clearTimeout(timer)
      // The differences it lists say what a non-zero exit was about.
      const at = out.indexOf('DIFFERENCES')
      if (code !== 0) log(`   reconcile exit ${code}:\n${out.slice(at < 0 ? -2000 : at).trim()}`)
      resolve(code)
    })
  })
}

const COLUMNS: Array<[string, (r: RoundResult) => string | number | null]> = [
  ['fault', (r) => r.fault],
  ['proofs', (r) => r.proofs],
  ['served', (r) => r.served],
  ['served twice', (r) => r.servedTwice],
  ['served, not captured', (r) => r.servedNotCaptured],
  ['… killed in flight', (r) => r.servedNotCapturedKilledInFlight],
  ['captured, not served', (r) => r.capturedNotServed],
  ['charged, not served', (r) => r.chargedNotServed],
  ['gave up', (r) => r.gaveUp],
  ['503s (outside fault)', (r) => `${r.status503} (${r.status503Outside})`],
  ['503 w/o Retry-After', (r) => r.status503NoRetryAfter],
  ['API 500s', (r) => r.api500],
  [
    'readyz during / after',
    (r) =>
      `${r.readyRedSeen ? `red (${r.readyFailed.join(',')})` : 'green'} / ${r.readyAfter ? 'ok' : 'RED'}`,
  ],
  ['net errors (outside)', (r) => `${r.networkErrors} (${r.networkOutside})`],
  ['client timeouts', (r) => r.clientTimeouts],
  ['last 503 after fault', (r) => (r.last503AfterMs === null ? '-' : `${r.last503AfterMs} ms`)],
  ['readyz max', (r) => `${r.readyzMaxMs} ms`],
  ['reconcile exit', (r) => r.reconcileExit],
  ['balance drift', (r) => `${r.balanceDrift} of ${r.balancesChecked}`],
  ['crashed', (r) => r.crashed],
  [
    'usage served / whole / mid-fault',
    (r) => `${r.usageServed} of ${r.usageProofs} / ${r.usageCompleted} / ${r.usageMidStream}`,
  ],
  ['usage unpaid', (r) => r.usageServedUnpaid],
  ['usage > ceiling', (r) => r.usageOverCeiling],
  ['usage charge ≠ measured', (r) => r.usageChargeMismatch],
  ['usage refund ≠ once', (r) => r.usageRefundMismatch],
  ['usage charged / refunded', (r) => `${r.usageCharged} / ${r.usageRefunded}`],
]

function sum(result: ChaosResult, f: (r: RoundResult) => number): number {
  return result.rounds.reduce((n, r) => n + f(r), 0)
}

export function formatTable(result: ChaosResult): string {
  const rows = result.rounds.map((r) => COLUMNS.map(([, f]) => String(f(r))))
  const head = COLUMNS.map(([h]) => h)
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`
  return [
    line(head),
    `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`,
    ...rows.map(line),
    '',
    `replay of every proof on both instances: ${result.replayServedAgain} served again, ${result.replayFirstServes} served for the first time (refused with a 402 during the load)`,
    `served, not captured: ${sum(result, (r) => r.servedNotCaptured)} (+ ${sum(result, (r) => r.servedNotCapturedKilledInFlight)} in flight on a killed process)`,
    `instances crashed: ${result.crashed}`,
    result.ok
      ? 'OK'
      : 'FAILED: served twice, charged-not-served, a usage call unpaid / above its ceiling / charged other than measured / not refunded once, a crashed instance, or a 503 / network error / client timeout outside the fault window',
  ].join('\n')
}
