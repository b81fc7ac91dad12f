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
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type Chain, createPublicClient, createWalletClient, type Hex, http, publicActions } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { createPaymentHeader, selectPaymentRequirements } from 'x402/client'
import { PaymentRequirementsSchema } from 'x402/types'
import { type DevChain, fundDevGas, startDevChain } from '../../src/chain/dev-chain.ts'
import { settlerSlotKey } from '../../src/chain/settler-keys.ts'
import { cpuMeter, postgresBackends, withChildren } from '../cpu.ts'
import { paced } from '../paced.ts'
import { machine, writeResults } from '../report.ts'
import { ROOT } from '../targets/processes.ts'
import { startTollgate, type Tollgate } from '../targets/tollgate.ts'
import { startUpstream } from '../targets/upstream.ts'
import { readCounters, settlementOutcome } from './inside.ts'

const BLOCK_S = 2

interface Step {
  rate: number
  achieved_rps: number
  requests: number
  errors: number
  p50_ms: number
  p90_ms: number
  p99_ms: number
  late_sends_pct: number
  transactions: number
  tx_per_call: number
  settled: number
  settle_failed: number
  drain_ms: number
  cpu_us_per_call: Record<string, number>
  /** Mean ms of each settle-before-answer phase (queue, capture, send, receipt) and calls per group. */
  phases_ms: Record<string, number>
  calls_per_group: number
  sustained: boolean
}

interface ModeResult {
  mode: string
  workers: number
  /** The highest offered rate sustained (every call 200, p99 < 2 blocks, sends on time); 0: none. */
  capacity_rps: number
  steps: Step[]
}

function options(args: string[]) {
  const get = (flag: string) => {
    const i = args.indexOf(flag)
    return i >= 0 ? args[i + 1] : undefined
  }
  return {
    rates: (get('--rates') ?? '100,250,500,750,1000,1250,1500').split(',').map(Number),
    seconds: Number(get('--seconds') ?? 8),
    workers2: !args.includes('--no-workers2'),
  }
}

export async function runX402Capacity(args: string[]): Promise<void> {
  const o = options(args)
  // The built JavaScript is what production runs; build it when src/ changed since.
  execFileSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--if-stale'], { stdio: 'inherit' })
  const dir = (await import('node:fs')).mkdtempSync(
    `${(await import('node:os')).tmpdir()}/tollgate-capacity-`,
  )
  const chain = await startDevChain({
    chainId: 84532,
    payers: 1,
    payerFunding: 100_000_000_000n,
    blockTimeSeconds: BLOCK_S,
  })
  const upstream = await startUpstream(30 * 60_000)
  const modes: ModeResult[] = []
  try {
    await fundSettlers(chain)
    const one = await startInstance(chain, dir, upstream.base, 'warm', 1)
    try {
      modes.push(await stepUp(chain, one, upstream.base, 'before_answer', 1, o))
      modes.push(await stepUp(chain, one, upstream.base, 'after', 1, o))
    } finally {
      await one.stop()
    }
    if (o.workers2) {
      // Its own instance after the first stopped: both derive their settler keys from the one treasury key
      // on databases of their own, so run side by side they would both claim slot 0 and share its nonces.
      const two = await startInstance(chain, dir, upstream.base, 'workers2', 2)
      try {
        modes.push(await stepUp(chain, two, upstream.base, 'before_answer', 2, o))
      } finally {
        await two.stop()
      }
    }
  } finally {
    await upstream.stop()
    await chain.stop()
    rmSync(dir, { recursive: true, force: true })
  }
  const before = modes.find((m) => m.mode === 'before_answer' && m.workers === 1)!
  const after = modes.find((m) => m.mode === 'after')!
  const summary = {
    capacity_ratio_before_to_after:
      after.capacity_rps > 0 ? Math.round((before.capacity_rps / after.capacity_rps) * 100) / 100 : null,
    block_interval_s: BLOCK_S,
  }
  process.stdout.write(`\n${JSON.stringify({ summary, modes: modes.map(brief) }, null, 2)}\n`)
  const file = writeResults(
    new URL('../results/', import.meta.url).pathname,
    machine({
      command: `npm run bench -- x402-capacity ${args.join(' ')}`.trim(),
      database: process.env.BENCH_DATABASE_URL ? 'postgresql server' : 'embedded pglite',
      load_generator: 'bench/paced.ts (open loop), latencies from each request’s due time',
      chain: `anvil --block-time ${BLOCK_S}`,
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
    steps: m.steps.map(
      (s) =>
        `${s.rate}/s: p50 ${s.p50_ms} p99 ${s.p99_ms} ms, err ${s.errors}, tx/call ${s.tx_per_call}, group ${s.calls_per_group}, phases ${JSON.stringify(s.phases_ms)}, cpu ${JSON.stringify(s.cpu_us_per_call)}${s.sustained ? '' : ' ✗'}`,
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

function startInstance(
  chain: DevChain,
  dir: string,
  upstream: string,
  name: 'warm' | 'workers2',
  workers: number,
) {
  return startTollgate({
    name,
    dir,
    chain: {
      rpcUrl: chain.rpcUrl,
      usdcAddress: chain.usdcAddress,
      treasuryKey: chain.treasury.privateKey,
      payer: chain.payers[0]!.address,
    },
    upstream,
    watch: true,
    runtime: 'built',
    workers,
    // The settle-after mode needs the leader's settlement job on this instance.
    jobs: true,
  })
}

async function stepUp(
  chain: DevChain,
  t: Tollgate,
  upstream: string,
  mode: 'before_answer' | 'after',
  workers: number,
  o: ReturnType<typeof options>,
): Promise<ModeResult> {
  const ep = await t.post(
    '/api/v1/endpoints',
    { upstream_url: `${upstream}/data`, price: '0.001', x402_settlement: mode },
    t.apiKey,
  )
  const url = ep.metered_url as string
  const signer = await payerFor(chain, url)
  // A short unmeasured run first: the path compiled and connected, the settler's nonce read.
  await paced({
    url,
    rate: 50,
    durationS: 2,
    connections: 64,
    perRequest: { header: 'x-payment', values: await signer.sign(100) },
    expectStatus: 200,
  })
  await settlementOutcome(t.adminPort, await readCounters(t.adminPort))
  const steps: Step[] = []
  let capacity = 0
  for (const rate of o.rates) {
    const step = await measureStep(chain, t, url, signer, rate, o.seconds)
    steps.push(step)
    process.stdout.write(
      `  ${mode} workers ${workers} ${brief({ mode, workers, capacity_rps: 0, steps: [step] }).steps[0]}\n`,
    )
    if (!step.sustained) break
    capacity = rate
  }
  return { mode, workers, capacity_rps: capacity, steps }
}

async function payerFor(chain: DevChain, url: string) {
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
    /** n fresh authorizations, as the published x402 client signs them. */
    async sign(n: number): Promise<string[]> {
      const out: string[] = []
      for (let i = 0; i < n; i += 200) {
        out.push(
          ...(await Promise.all(
            Array.from({ length: Math.min(200, n - i) }, () => createPaymentHeader(wallet, 1, requirements)),
          )),
        )
      }
      return out
    },
  }
}

async function measureStep(
  chain: DevChain,
  t: Tollgate,
  url: string,
  signer: Awaited<ReturnType<typeof payerFor>>,
  rate: number,
  seconds: number,
): Promise<Step> {
  const values = await signer.sign(Math.round(rate * seconds))
  const client = createPublicClient({ transport: http(chain.rpcUrl) })
  const firstBlock = (await client.getBlockNumber()) + 1n
  const before = await readCounters(t.adminPort)
  const meter = cpuMeter({
    tollgate: () => withChildren(t.pid ? [t.pid] : []),
    ...(process.env.BENCH_DATABASE_URL ? { postgres: () => postgresBackends(`_${process.pid}`) } : {}),
  })
  // Enough connections that none is waited for: the rate times a few blocks of latency.
  const connections = Math.min(8_000, Math.max(64, Math.ceil(rate * BLOCK_S * 3)))
  const m = await paced({
    url,
    rate,
    durationS: seconds,
    connections,
    warmupS: 2,
    perRequest: { header: 'x-payment', values },
    expectStatus: 200,
  })
  const cpu = meter.stop(m.requests)
  const after = await readCounters(t.adminPort)
  const delta = (key: string) => (after.get(key) ?? 0) - (before.get(key) ?? 0)
  const phase = 'tollgate_x402_settle_before_answer_phase_seconds'
  const phases_ms: Record<string, number> = {}
  for (const p of ['queue', 'capture', 'send', 'receipt']) {
    const n = delta(`${phase}_count{phase="${p}"}`)
    if (n > 0) phases_ms[p] = Math.round((delta(`${phase}_sum{phase="${p}"}`) / n) * 1e4) / 10
  }
  const groups = delta('tollgate_x402_settle_before_answer_batch_size_count')
  const calls_per_group =
    groups > 0
      ? Math.round((delta('tollgate_x402_settle_before_answer_batch_size_sum') / groups) * 10) / 10
      : 0
  const outcome = await settlementOutcome(t.adminPort, before, 120_000)
  // Let the last settlement's block in, then count every transaction mined since the step began.
  await new Promise((r) => setTimeout(r, BLOCK_S * 1000 + 500))
  const lastBlock = await client.getBlockNumber()
  let transactions = 0
  for (let b = firstBlock; b <= lastBlock; b++) {
    transactions += (await client.getBlock({ blockNumber: b })).transactions.length
  }
  const calls = values.length
  return {
    rate,
    achieved_rps: m.rps,
    requests: m.requests,
    errors: m.errors,
    p50_ms: m.p50_ms,
    p90_ms: m.p90_ms,
    p99_ms: m.p99_ms,
    late_sends_pct: m.late_sends_pct,
    transactions,
    tx_per_call: Math.round((transactions / calls) * 10_000) / 10_000,
    settled: outcome.settled,
    settle_failed: outcome.failed,
    drain_ms: outcome.drain_ms,
    cpu_us_per_call: cpu,
    phases_ms,
    calls_per_group,
    // Latency is counted from each request's due time, so a late send only makes the figure worse: it is
    // reported, not a condition (on a shared machine the 1 ms scheduler is often 2 ms late).
    sustained: m.errors === 0 && m.p99_ms < 2 * BLOCK_S * 1000,
  }
}
