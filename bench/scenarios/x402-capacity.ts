// `npm run bench -- x402-capacity`: the capacity of x402 `exact` calls settled before the answer (the default)
// against settle-after, at the same open-loop offered load, on a chain that mines like Base (a block every
// 2 s), so the latency a buyer waits for its mined transaction is in the figure.
//
// Why not the closed loop of the other scenarios: once the answer waits for a block, 32 connections each
// waiting ~1-2 s measure the block time, not the server. Here requests leave on a schedule (bench/paced.ts),
// the rate steps up, and a mode's capacity is the highest rate it sustains with every call answered 200,
// p99 under two block intervals and the load generator on time. Per step: latency, transactions per call
// (every transaction mined from the step's first block until its settlements drained, an upper bound: a
// payout of the leader's would count too), and CPU µs per call of tollgate (+ PostgreSQL on a server).
// The x402 reference (@x402/express with its facilitator in-process, settling each call before its answer)
// is stepped the same way on the same chain: the capacity ratio the reference is compared by.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type Chain, createPublicClient, createWalletClient, type Hex, http, publicActions } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { createPaymentHeader, selectPaymentRequirements } from 'x402/client'
import { PaymentRequirementsSchema } from 'x402/types'
import { type DevChain, fundDevGas, startDevChain } from '../../src/chain/dev-chain.ts'
import { settlerSlotKey } from '../../src/chain/settler-keys.ts'
import { cpuMeter, machineBusy, postgresBackends, withChildren } from '../cpu.ts'
import { paced } from '../paced.ts'
import { type StatementCost, statementsMeterFromEnv } from '../pg-statements.ts'
import { machine, writeResults } from '../report.ts'
import { ROOT } from '../targets/processes.ts'
import type { Target } from '../targets/target.ts'
import { devChainOf, startTollgate, type Tollgate } from '../targets/tollgate.ts'
import { startUpstream } from '../targets/upstream.ts'
import { startX402Reference } from '../targets/x402-reference.ts'
import { type Counters, inside as insideOf, readCounters, settlementOutcome } from './inside.ts'
import { publishedExactClient } from './x402-reference.ts'

const BLOCK_S = 2
/**
 * Base's block gas limit (140 M, docs.base.org "Block Building"), not anvil's default 30 M: at 750 calls/s the
 * settlements alone fill 30 M blocks, the base fee climbs past every cap signed, and the bench measures
 * anvil's limit instead of tollgate's (seen: 330 nonces dropped and filled in one 750/s step).
 */
const GAS_LIMIT = 140_000_000n

interface Step {
  rate: number
  achieved_rps: number
  requests: number
  errors: number
  p50_ms: number
  p90_ms: number
  p99_ms: number
  late_sends_pct: number
  /** Answers with another status than 200, by status. */
  wrong_status: Record<string, number>
  /** The first body of each wrong status (which 503 it was). */
  wrong_sample: Record<string, string>
  transactions: number
  tx_per_call: number
  settled: number | null
  settle_failed: number | null
  drain_ms: number | null
  /**
   * Calls settled a second, from the step's start until its settlements drained (or the drain's limit): what
   * the chain took in this mode. Settle-before-answer settles within the step; settle-after's intake is a
   * burst its job settles at ~100 a second after it (one batch_max a block).
   */
  settled_rps: number | null
  cpu_us_per_call: Record<string, number>
  /**
   * The same from the step's start until its settlements drained: settle-after books most of its calls after
   * the step (its job settles about one step of batch_max a block), which cpu_us_per_call leaves out. The
   * idle work of the drain (timers, the chain watch) is in it too: an upper bound.
   */
  cpu_us_per_call_drained: Record<string, number>
  /** The machine's CPU busy during the step, % of all cores. */
  machine_busy_pct: number
  /** Claim/capture statements per call and what each carried (the batch writer's counters). */
  books_writes_per_call: number
  claims_per_write: number
  captures_per_write: number
  /** BENCH_PG_STATEMENTS=1: the costliest statements of the step, per call (and until drained). */
  statements?: StatementCost[]
  statements_drained?: StatementCost[]
  /** Mean ms of each settle-before-answer phase (queue, capture, send, receipt) and calls per group. */
  phases_ms: Record<string, number>
  /** HTTP requests to the RPC node per 100 calls, by method ('batch': one carrying several calls). */
  rpc_requests_per_100: Record<string, number>
  calls_per_group: number
  sustained: boolean
  /**
   * Sustained, and the chain kept up: every call the step took was settled within two block intervals of
   * its last answer (drain_ms). Settle-after never is at these rates: its job settles ~100 calls a second.
   */
  settled_in_step: boolean
}

interface ModeResult {
  mode: string
  workers: number
  /**
   * The highest offered rate answered in time: every call of it and of every lower step answered 200, p99
   * under two block intervals and p50 under one (for settle-before-answer: the added latency a buyer waits
   * for its mined transaction is at most a block). 0: none.
   */
  capacity_rps: number
  /**
   * The same, and at every such step the chain kept up: every call the step took was settled within two
   * block intervals of its last answer. What a mode settles, not only answers: settle-after, whose job
   * settles ~100 calls a second after the answers, has none at these rates (its settled_rps is the figure).
   */
  settled_capacity_rps: number
  /** The most calls a second the mode's settlements carried in a step (settled_rps), sustained or not. */
  settled_rps: number
  steps: Step[]
}

/** Capacities of a mode from its steps (a pure function: `--report <file>` derives them again). */
function derive(mode: string, workers: number, steps: Step[]): ModeResult {
  const inTime = (s: Step) => s.errors === 0 && s.p99_ms < 2 * BLOCK_S * 1000 && s.p50_ms < BLOCK_S * 1000
  // The reference settles each call before its answer (no counters to drain): answered is settled.
  const settled = (s: Step) => inTime(s) && (s.drain_ms === null || s.drain_ms <= 2 * BLOCK_S * 1000)
  const highest = (ok: (s: Step) => boolean) => {
    let rate = 0
    for (const s of [...steps].sort((a, b) => a.rate - b.rate)) {
      if (!ok(s)) break
      rate = s.rate
    }
    return rate
  }
  return {
    mode,
    workers,
    capacity_rps: highest(inTime),
    settled_capacity_rps: highest(settled),
    settled_rps: Math.max(0, ...steps.map((s) => s.settled_rps ?? 0)),
    steps,
  }
}

/** What is measured in one mode: a paid URL, its proofs, and whose CPU a call costs. */
interface Subject {
  mode: string
  workers: number
  url: string
  header: string
  sign(n: number): Promise<string[]>
  pids(): number[]
  /** tollgate's admin port (its counters); null for the reference. */
  adminPort: number | null
}

function options(args: string[]) {
  const get = (flag: string) => {
    const i = args.indexOf(flag)
    return i >= 0 ? args[i + 1] : undefined
  }
  const list = (v: string) => v.split(',').map(Number)
  return {
    rates: list(get('--rates') ?? '100,250,500,750,1000,1250,1500'),
    referenceRates: list(get('--reference-rates') ?? '5,10,20,40,80,160'),
    seconds: Number(get('--seconds') ?? 8),
    /** One worker's modes to step (`--modes before_answer` for a short look at the settler alone; '' none). */
    modes: (get('--modes') ?? 'before_answer,after').split(',').filter(Boolean) as Array<
      'before_answer' | 'after'
    >,
    /** The same for the two-worker instance: settle-after there too, the ratio's other side. */
    workers2Modes: (get('--workers2-modes') ?? 'before_answer,after').split(',').filter(Boolean) as Array<
      'before_answer' | 'after'
    >,
    workers2: !args.includes('--no-workers2'),
    reference: !args.includes('--no-reference'),
    report: get('--report'),
  }
}

export async function runX402Capacity(args: string[]): Promise<void> {
  const o = options(args)
  if (o.report) return rederive(o.report)
  // The built JavaScript is what production runs; build it when src/ changed since.
  execFileSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--if-stale'], { stdio: 'inherit' })
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-capacity-'))
  const chain = await startDevChain({
    chainId: 84532,
    payers: 1,
    payerFunding: 100_000_000_000n,
    blockTimeSeconds: BLOCK_S,
    gasLimit: GAS_LIMIT,
  })
  const upstream = await startUpstream(30 * 60_000)
  const modes: ModeResult[] = []
  try {
    await fundSettlers(chain)
    // Each mode on an instance and database of its own, started after the last one stopped: settle-after
    // leaves an unsettled backlog behind its last steps (its job settles ~100 a second), and on a shared
    // database that backlog engages the intake throttle (503 settlement_backlog) in the next mode. One at a
    // time because all derive their settler keys from the one treasury key: run side by side they would
    // share slot 0's nonces.
    const runs = [
      ...o.modes.map((mode) => ({ mode, workers: 1 })),
      ...(o.workers2 ? o.workers2Modes.map((mode) => ({ mode, workers: 2 })) : []),
    ]
    for (const { mode, workers } of runs) {
      const t = await startInstance(chain, dir, upstream.base, `capacity-${mode}-w${workers}`, workers)
      try {
        modes.push(
          await stepUp(chain, await tollgateSubject(chain, t, upstream.base, mode, workers), o.rates, o),
        )
      } finally {
        await t.stop()
      }
    }
    if (o.reference) {
      const ref = await startX402Reference({ chain, upstream: upstream.base, maxMs: 30 * 60_000 })
      try {
        modes.push(await stepUp(chain, await referenceSubject(chain, ref), o.referenceRates, o))
      } finally {
        await ref.stop()
      }
    }
  } finally {
    await upstream.stop()
    await chain.stop()
    rmSync(dir, { recursive: true, force: true })
  }
  report(args, o, modes)
}

function summarize(modes: ModeResult[]) {
  const of = (mode: string, workers: number) => modes.find((m) => m.mode === mode && m.workers === workers)
  const capacity = (mode: string, workers = 1) => of(mode, workers)?.capacity_rps ?? null
  const settledCapacity = (mode: string, workers = 1) => of(mode, workers)?.settled_capacity_rps ?? null
  const settled = (mode: string, workers = 1) => of(mode, workers)?.settled_rps ?? null
  const ratio = (a: number | null, b: number | null) =>
    a !== null && b !== null && b > 0 ? Math.round((a / b) * 100) / 100 : null
  return {
    block_interval_s: BLOCK_S,
    capacity_ratio_before_to_after: ratio(capacity('before_answer'), capacity('after')),
    capacity_ratio_workers2_to_after_workers2: ratio(capacity('before_answer', 2), capacity('after', 2)),
    capacity_ratio_workers2_to_after: ratio(capacity('before_answer', 2), capacity('after')),
    capacity_ratio_before_to_reference: ratio(capacity('before_answer'), capacity('reference')),
    // What the chain took: settle-after answers a burst its job settles afterwards, ~100 calls a second.
    settled_ratio_before_to_after: ratio(settledCapacity('before_answer'), settled('after')),
    settled_ratio_workers2_to_after_workers2: ratio(settledCapacity('before_answer', 2), settled('after', 2)),
  }
}

/**
 * `--report <file>`: the capacities and summary of a committed run derived again from its steps by this
 * code's definitions (derive, summarize), the measurements untouched; the file says when and by what.
 */
function rederive(file: string): void {
  const run = JSON.parse(readFileSync(file, 'utf8')) as { modes: ModeResult[]; [k: string]: unknown }
  const modes = run.modes.map((m) => derive(m.mode, m.workers, m.steps))
  const summary = summarize(modes)
  const out = {
    ...run,
    summary,
    modes,
    derived_again: {
      command: `npm run bench -- x402-capacity --report ${file}`,
      at: new Date().toISOString(),
    },
  }
  writeFileSync(file, `${JSON.stringify(out, null, 2)}\n`)
  process.stdout.write(`${JSON.stringify({ summary, modes: modes.map(brief) }, null, 2)}\n`)
}

function report(args: string[], o: ReturnType<typeof options>, modes: ModeResult[]): void {
  const summary = summarize(modes)
  process.stdout.write(`\n${JSON.stringify({ summary, modes: modes.map(brief) }, null, 2)}\n`)
  const file = writeResults(
    join(ROOT, 'bench', 'results'),
    machine({
      command: `npm run bench -- x402-capacity ${args.join(' ')}`.trim(),
      database: process.env.BENCH_DATABASE_URL ? 'postgresql server' : 'embedded pglite',
      load_generator: 'bench/paced.ts (open loop), latencies from each request’s due time',
      chain: `anvil --block-time ${BLOCK_S} --gas-limit ${GAS_LIMIT}`,
      seconds_per_step: o.seconds,
    }),
    [],
    { summary, modes },
    `${new Date().toISOString().replace(/:/g, '-').replace(/\..*/, '')}-x402-capacity.json`,
  )
  process.stdout.write(`results: ${file}\n`)
}

function brief(m: ModeResult) {
  return {
    mode: m.mode,
    workers: m.workers,
    capacity_rps: m.capacity_rps,
    settled_capacity_rps: m.settled_capacity_rps,
    settled_rps: m.settled_rps,
    steps: m.steps.map(
      (s) =>
        `${s.rate}/s: p50 ${s.p50_ms} p99 ${s.p99_ms} ms, err ${s.errors}${s.errors ? ` ${JSON.stringify(s.wrong_status)} ${JSON.stringify(s.wrong_sample)}` : ''}, settled/s ${s.settled_rps}, tx/call ${s.tx_per_call}, group ${s.calls_per_group}, phases ${JSON.stringify(s.phases_ms)}, rpc/100 ${JSON.stringify(s.rpc_requests_per_100)}, cpu ${JSON.stringify(s.cpu_us_per_call)} drained ${JSON.stringify(s.cpu_us_per_call_drained)} busy ${s.machine_busy_pct}% writes/call ${s.books_writes_per_call}${s.sustained ? '' : ' ✗'}${s.settled_in_step ? ' settled' : ''}`,
    ),
  }
}

/** The settler slots' derived keys start without gas on a chain that is not NETWORK=local: fund four. */
async function fundSettlers(chain: DevChain): Promise<void> {
  const client = createPublicClient({ transport: http(chain.rpcUrl) })
  for (let slot = 0; slot < 4; slot++) {
    const key = settlerSlotKey({ settlerKey: null, treasuryKey: chain.treasury.privateKey as Hex }, slot)!
    await fundDevGas(client as never, privateKeyToAccount(key).address, 10n ** 20n)
  }
}

function startInstance(chain: DevChain, dir: string, upstream: string, name: string, workers: number) {
  return startTollgate({
    name,
    dir,
    chain: devChainOf(chain),
    upstream,
    watch: true,
    runtime: 'built',
    workers,
    // The settle-after mode needs the leader's settlement job on this instance.
    jobs: true,
    profileDir: process.env.BENCH_PROFILE_DIR,
  })
}

async function tollgateSubject(
  chain: DevChain,
  t: Tollgate,
  upstream: string,
  mode: 'before_answer' | 'after',
  workers: number,
): Promise<Subject> {
  const ep = await t.post(
    '/api/v1/endpoints',
    { upstream_url: `${upstream}/data`, price: '0.001', x402_settlement: mode },
    t.apiKey,
  )
  const url = ep.metered_url as string
  const body = (await (await fetch(url)).json()) as { accepts: unknown[] }
  const requirements = selectPaymentRequirements(
    body.accepts.map((a) => PaymentRequirementsSchema.parse(a)),
    'base-sepolia',
    'exact',
  )
  const wallet = createWalletClient({
    account: privateKeyToAccount(chain.payers[0]!.privateKey as Hex),
    chain: { ...baseSepolia, id: chain.chainId } as Chain,
    transport: http(chain.rpcUrl),
  }).extend(publicActions)
  return {
    mode,
    workers,
    url,
    header: 'x-payment',
    // Fresh authorizations, as the published x402 client signs them.
    sign: (n) => inChunks(n, () => createPaymentHeader(wallet, 1, requirements)),
    pids: () => withChildren(t.pid ? [t.pid] : []),
    adminPort: t.adminPort,
  }
}

/** The x402 reference (@x402/express, its facilitator in-process), paid by the reference's own client. */
async function referenceSubject(chain: DevChain, ref: Target): Promise<Subject> {
  const url = `${ref.base}/data`
  const r = await fetch(url)
  const client = publishedExactClient(chain)
  const required = client.getPaymentRequiredResponse((name) => r.headers.get(name), await r.json())
  const first = client.encodePaymentSignatureHeader(await client.createPaymentPayload(required))
  const header = Object.keys(first)[0]!
  return {
    mode: 'reference',
    workers: 1,
    url,
    header,
    sign: (n) =>
      inChunks(
        n,
        async () => client.encodePaymentSignatureHeader(await client.createPaymentPayload(required))[header]!,
      ),
    pids: () => withChildren(ref.pid ? [ref.pid] : []),
    adminPort: null,
  }
}

async function inChunks(n: number, one: () => Promise<string>): Promise<string[]> {
  const out: string[] = []
  for (let i = 0; i < n; i += 200)
    out.push(...(await Promise.all(Array.from({ length: Math.min(200, n - i) }, one))))
  return out
}

async function stepUp(
  chain: DevChain,
  subject: Subject,
  rates: number[],
  o: ReturnType<typeof options>,
): Promise<ModeResult> {
  // A short unmeasured run first: the path compiled and connected, the settler's nonce read.
  await paced({
    url: subject.url,
    rate: Math.min(50, rates[0]!),
    durationS: 2,
    connections: 64,
    perRequest: { header: subject.header, values: await subject.sign(100) },
    expectStatus: 200,
  })
  if (subject.adminPort !== null)
    await settlementOutcome(subject.adminPort, await readCounters(subject.adminPort))
  const steps: Step[] = []
  for (const rate of rates) {
    const step = await measureStep(chain, subject, rate, o.seconds)
    steps.push(step)
    const line = brief(derive(subject.mode, subject.workers, [step]))
    process.stdout.write(`  ${subject.mode} workers ${subject.workers} ${line.steps[0]}\n`)
    // Stepped on while every call is answered 200 within two blocks: the capacities are derived after.
    if (!step.sustained) break
  }
  return derive(subject.mode, subject.workers, steps)
}

/** Mean ms of each settle-before-answer phase and calls per group, from tollgate's counters. */
function phases(before: Counters, after: Counters) {
  const delta = (key: string) => (after.get(key) ?? 0) - (before.get(key) ?? 0)
  const phase = 'tollgate_x402_settle_before_answer_phase_seconds'
  const phases_ms: Record<string, number> = {}
  for (const p of ['queue', 'sign', 'capture', 'turn', 'broadcast', 'send', 'receipt']) {
    const n = delta(`${phase}_count{phase="${p}"}`)
    if (n > 0) phases_ms[p] = Math.round((delta(`${phase}_sum{phase="${p}"}`) / n) * 1e4) / 10
  }
  const groups = delta('tollgate_x402_settle_before_answer_batch_size_count')
  const calls_per_group =
    groups > 0
      ? Math.round((delta('tollgate_x402_settle_before_answer_batch_size_sum') / groups) * 10) / 10
      : 0
  return { phases_ms, calls_per_group }
}

/** HTTP requests to the node per 100 calls, by method, from tollgate's counters. */
function rpcRequests(before: Counters, after: Counters, calls: number): Record<string, number> {
  const out: Record<string, number> = {}
  const prefix = 'tollgate_rpc_requests_total{method="'
  for (const [key, value] of after) {
    if (!key.startsWith(prefix)) continue
    const n = value - (before.get(key) ?? 0)
    if (n > 0) out[key.slice(prefix.length, -2)] = Math.round((n / Math.max(1, calls)) * 1000) / 10
  }
  return out
}

async function measureStep(chain: DevChain, subject: Subject, rate: number, seconds: number): Promise<Step> {
  const values = await subject.sign(Math.round(rate * seconds))
  const client = createPublicClient({ transport: http(chain.rpcUrl) })
  const firstBlock = (await client.getBlockNumber()) + 1n
  const admin = subject.adminPort
  const before = admin === null ? null : await readCounters(admin)
  const server = process.env.BENCH_DATABASE_URL
  const statements = await statementsMeterFromEnv()
  const meter = cpuMeter({
    server: subject.pids,
    // The chain's share: settle-before-answer's transactions are executed within the step, settle-after's
    // mostly after it.
    anvil: () => [chain.pid],
    // The bench itself: the load generator shares the cores.
    bench: () => [process.pid],
    ...(server ? { postgres: () => postgresBackends(`_${process.pid}`) } : {}),
  })
  const busy = machineBusy()
  // Enough connections that none is waited for: the rate times a few blocks of latency.
  const connections = Math.min(8_000, Math.max(64, Math.ceil(rate * BLOCK_S * 3)))
  const m = await paced({
    url: subject.url,
    rate,
    durationS: seconds,
    connections,
    warmupS: 2,
    perRequest: { header: subject.header, values },
    expectStatus: 200,
  })
  const cpu = meter.stop(m.requests)
  const machine_busy_pct = busy.stopPct(performance.now())
  const stepStatements = await statements?.read(m.requests)
  const counters = admin === null ? null : await readCounters(admin)
  const books = counters === null || before === null ? null : insideOf(before, counters)
  const inside =
    counters === null || before === null
      ? { phases_ms: {}, calls_per_group: 0, rpc_requests_per_100: {} }
      : { ...phases(before, counters), rpc_requests_per_100: rpcRequests(before, counters, m.requests) }
  const outcome =
    admin === null || before === null ? null : await settlementOutcome(admin, before, 120_000, values.length)
  const cpuDrained = meter.stop(m.requests)
  const drainedStatements = await statements?.read(m.requests)
  await statements?.end()
  // Let the last settlement's block in, then count every transaction mined since the step began.
  await new Promise((r) => setTimeout(r, BLOCK_S * 1000 + 500))
  const lastBlock = await client.getBlockNumber()
  let transactions = 0
  for (let b = firstBlock; b <= lastBlock; b++) {
    transactions += (await client.getBlock({ blockNumber: b })).transactions.length
  }
  return {
    rate,
    achieved_rps: m.rps,
    requests: m.requests,
    errors: m.errors,
    p50_ms: m.p50_ms,
    p90_ms: m.p90_ms,
    p99_ms: m.p99_ms,
    late_sends_pct: m.late_sends_pct,
    wrong_status: m.wrong_status ?? {},
    wrong_sample: m.wrong_sample,
    transactions,
    tx_per_call: Math.round((transactions / values.length) * 10_000) / 10_000,
    settled: outcome?.settled ?? null,
    settle_failed: outcome?.failed ?? null,
    drain_ms: outcome?.drain_ms ?? null,
    settled_rps: outcome ? Math.round(outcome.settled / (seconds + outcome.drain_ms / 1000)) : null,
    cpu_us_per_call: cpu,
    cpu_us_per_call_drained: cpuDrained,
    machine_busy_pct,
    books_writes_per_call: books ? Math.round((books.books_writes / Math.max(1, m.requests)) * 1e4) / 1e4 : 0,
    claims_per_write: books?.claims_per_write ?? 0,
    captures_per_write: books?.captures_per_write ?? 0,
    ...(stepStatements ? { statements: stepStatements, statements_drained: drainedStatements } : {}),
    ...inside,
    // Latency is counted from each request's due time, so a late send only makes the figure worse: it is
    // reported, not a condition (on a shared machine the 1 ms scheduler is often 2 ms late).
    sustained: m.errors === 0 && m.p99_ms < 2 * BLOCK_S * 1000,
    settled_in_step:
      m.errors === 0 &&
      m.p99_ms < 2 * BLOCK_S * 1000 &&
      outcome !== null &&
      outcome.drain_ms <= 2 * BLOCK_S * 1000,
  }
}
