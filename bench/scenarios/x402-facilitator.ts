// `npm run bench -- x402-facilitator`: verify+settle per second through tollgate's facilitator
// (/api/v1/facilitator/verify then /settle, over HTTP with the merchant's key, as HTTPFacilitatorClient sends
// them) against the reference facilitator (@x402/core's x402Facilitator with @x402/evm's exact scheme,
// in-process, settling on the same anvil from its own key), each at stepped open-loop rates on a chain that
// mines like Base (a block every 2 s, its 140 M gas limit). A payment is one verify then one settle; its
// latency runs from its due time to the settle's answer. Per step: payments answered success, transactions mined per settlement (every
// transaction from the step's first block until the last settlement's block), CPU µs per settlement (tollgate's
// process, with the PostgreSQL server's backends of its database when BENCH_DATABASE_URL is set; or this
// process for the in-process reference: its signer, viem and the load loop together). The payments are
// signed by --payers wallets in turn (8), for both.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { x402Client } from '@x402/core/client'
import { x402Facilitator } from '@x402/core/facilitator'
import { toFacilitatorEvmSigner } from '@x402/evm'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import { registerExactEvmScheme as registerFacilitatorScheme } from '@x402/evm/exact/facilitator'
import { Pool } from 'undici'
import {
  type Address,
  type Chain,
  createPublicClient,
  createWalletClient,
  type Hex,
  http,
  parseAbi,
  publicActions,
} from 'viem'
import { nonceManager, privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { type DevChain, fundDevGas, startDevChain } from '../../src/chain/dev-chain.ts'
import { settlerSlotKey } from '../../src/chain/settler-keys.ts'
import { cpuMeter, postgresBackends, withChildren } from '../cpu.ts'
import { type StatementCost, statementsMeterFromEnv } from '../pg-statements.ts'
import { ROOT } from '../targets/processes.ts'
import { devChainOf, startTollgate } from '../targets/tollgate.ts'
import { startUpstream } from '../targets/upstream.ts'

const BLOCK_S = 2
/** Base's block gas limit (as the capacity bench): anvil's default 30M holds ~250 settlements a second. */
const GAS_LIMIT = 140_000_000n
const NETWORK = 'eip155:84532'
const tokenAbi = parseAbi([
  'function name() view returns (string)',
  'function version() view returns (string)',
])

/** One payment's verify and settle; true when the settle answered success. */
type Pay = (i: number) => Promise<boolean>

interface Step {
  rate: number
  payments: number
  succeeded: number
  achieved_per_s: number
  p50_ms: number
  p99_ms: number
  /** The slowest payment: a long tail stretches the step and so lowers achieved_per_s. */
  max_ms: number
  transactions: number
  tx_per_settlement: number
  /** HTTP requests tollgate sent the node (after batching) a settlement, from the step's start to its last answer. */
  rpc_requests_per_settlement?: number
  cpu_us_per_settlement: Record<string, number>
  /** BENCH_PG_STATEMENTS=1 (tollgate on a server): the costliest statements of the step, per settlement. */
  statements?: StatementCost[]
  sustained: boolean
}

function options(args: string[]) {
  const get = (flag: string) => {
    const i = args.indexOf(flag)
    return i >= 0 ? args[i + 1] : undefined
  }
  const list = (v: string) => v.split(',').map(Number)
  return {
    rates: list(get('--rates') ?? '50,100,200,500'),
    referenceRates: list(get('--reference-rates') ?? '5,10,20,40'),
    seconds: Number(get('--seconds') ?? 6),
    // Paid before the first step, at its rate, outside every measurement, to both facilitators (as the x402
    // scenarios' BENCH_X402_WARM_UP): what a process pays once, not per settlement. tollgate's database
    // connections open as the load needs them, and each plans its statements afresh: in a 10 s step at
    // 600/s from a cold start, 13 connections planned payer_reserved's generic plan once each (41 ms apiece
    // over every claims partition) and the claim group's statement 60 times in 179 calls, about a third of
    // PostgreSQL's CPU in the step (pg_stat_statements with track_planning, and perf: standard_planner under
    // the bind of a prepared statement), none of it there once the connections are warm.
    warmUpSeconds: Number(get('--warm-up-seconds') ?? 4),
    // Payers signing in turn (a facilitator settles many wallets' payments; one payer alone makes every claim
    // sum that payer's unsettled payments, the reservation's worst case).
    payers: Number(get('--payers') ?? 8),
    out: get('--out'),
    reference: !args.includes('--no-reference'),
    tollgate: !args.includes('--reference-only'),
    // viem's default for the chain (half its 2 s block) polls less and answers later; the same CPU a
    // settlement (2026-11-30: 17.5 against 15.4 ms at 90/s offered, 50.5 against 58.7 settled a second).
    referencePollMs: Number(get('--reference-poll-ms') ?? 50),
  }
}

export async function runX402Facilitator(args: string[]): Promise<void> {
  const o = options(args)
  execFileSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--if-stale'], { stdio: 'inherit' })
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-fac-bench-'))
  const chain = await startDevChain({
    chainId: 84532,
    payers: o.payers + 1,
    payerFunding: 10n ** 12n,
    blockTimeSeconds: BLOCK_S,
    gasLimit: GAS_LIMIT,
  })
  const upstream = await startUpstream(30 * 60_000)
  const reader = createPublicClient({ transport: http(chain.rpcUrl) })
  const read = (functionName: 'name' | 'version') =>
    reader.readContract({ address: chain.usdcAddress, abi: tokenAbi, functionName }) as Promise<string>
  const extra = { name: await read('name'), version: await read('version') }
  const results: Record<string, Step[]> = { reference: [] }
  try {
    // The data plane's settler slots count up from 0, the facilitator's group commit's down from 15.
    for (const slot of [0, 1, 2, 3, 12, 13, 14, 15]) {
      const key = settlerSlotKey({ settlerKey: null, treasuryKey: chain.treasury.privateKey as Hex }, slot)!
      await fundDevGas(reader as never, privateKeyToAccount(key).address, 10n ** 20n)
    }
    if (o.tollgate) results.tollgate = await runTollgate(chain, upstream.base, dir, o, extra)
    if (o.reference) results.reference = await runReference(chain, o, extra)
  } finally {
    await upstream.stop()
    await chain.stop()
    rmSync(dir, { recursive: true, force: true })
  }
  const best = (steps: Step[]) =>
    Math.max(0, ...steps.filter((s) => s.sustained).map((s) => s.achieved_per_s))
  const summary = {
    block_interval_s: BLOCK_S,
    block_gas_limit: Number(GAS_LIMIT),
    warm_up_s: o.warmUpSeconds,
    tollgate_sustained_per_s: best(results.tollgate ?? []),
    reference_sustained_per_s: best(results.reference!),
    ratio:
      best(results.reference!) > 0
        ? Math.round((best(results.tollgate ?? []) / best(results.reference!)) * 100) / 100
        : null,
  }
  const out = { command: `npm run bench -- x402-facilitator ${args.join(' ')}`.trim(), summary, results }
  process.stdout.write(`\n${JSON.stringify(out, null, 2)}\n`)
  if (o.out) (await import('node:fs')).writeFileSync(o.out, JSON.stringify(out, null, 2))
}

/** tollgate's steps: its facilitator over HTTP with the merchant's key, the server's database metered. */
async function runTollgate(
  chain: DevChain,
  upstream: string,
  dir: string,
  o: ReturnType<typeof options>,
  extra: { name: string; version: string },
): Promise<Step[]> {
  const t = await startTollgate({
    name: 'warm',
    dir,
    chain: devChainOf(chain),
    upstream,
    watch: true,
    runtime: 'built',
    jobs: true,
    profileDir: process.env.BENCH_PROFILE_DIR,
  })
  try {
    const terms = requirements(chain, chain.treasury.address, extra)
    const signed = signer(payerKeys(chain, o.payers), terms)
    // The load's own HTTP client: undici's Pool, not the global fetch, whose request and stream objects
    // cost this process ~800 µs of CPU a request (two a payment) on the 2 cores tollgate, PostgreSQL and
    // anvil share with it: 56 % of a core at 350 payments a second (top), more than anvil. Its CPU is
    // metered as `client` beside the others'. No connection limit: a /settle waits for its block (seconds),
    // so the connections in use are the rate times that wait, as with fetch.
    const pool = new Pool(t.base)
    const headers = { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' }
    const pay =
      (bodies: string[]): Pay =>
      async (i) => {
        const post = async (path: string) => {
          const r = await pool.request({
            path: `/api/v1/facilitator/${path}`,
            method: 'POST',
            headers,
            body: bodies[i]!,
          })
          return (await r.body.json()) as { isValid?: boolean; success?: boolean }
        }
        if ((await post('verify')).isValid !== true) return false
        return (await post('settle')).success === true
      }
    try {
      return await stepUp(
        chain,
        o.rates,
        o.seconds,
        o.warmUpSeconds,
        async (n) => pay(await signed(n)),
        {
          server: () => withChildren(t.pid ? [t.pid] : []),
          // On a PostgreSQL server, its backends for this run's databases count too.
          ...(process.env.BENCH_DATABASE_URL ? { database: () => postgresBackends(`_${process.pid}`) } : {}),
          client: () => [process.pid],
          chain: () => [chain.pid],
        },
        () => rpcRequestsSent(t.adminPort),
      )
    } finally {
      await pool.close()
    }
  } finally {
    await t.stop()
  }
}

/** tollgate_rpc_requests_total summed over methods, from the instance's admin port. */
async function rpcRequestsSent(adminPort: number): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text()
  let total = 0
  for (const line of text.split('\n'))
    if (line.startsWith('tollgate_rpc_requests_total{'))
      total += Number(line.slice(line.lastIndexOf(' ') + 1))
  return total
}

function requirements(chain: DevChain, payTo: Address, extra: { name: string; version: string }) {
  return {
    scheme: 'exact',
    network: NETWORK,
    amount: '1000',
    asset: chain.usdcAddress,
    payTo,
    maxTimeoutSeconds: 300,
    extra,
  }
}

function payerKeys(chain: DevChain, n: number): Hex[] {
  return chain.payers.slice(0, n).map((p) => p.privateKey as Hex)
}

/** Fresh payloads as the published client signs them (the payers in turn), each as the /verify and /settle body. */
function signer(keys: Hex[], terms: ReturnType<typeof requirements>) {
  // The bench's token is not a default asset of the client: allowed by name, up to the price.
  const clients = keys.map((key) =>
    registerExactEvmScheme(new x402Client(), {
      signer: privateKeyToAccount(key) as never,
    }).setSpendControls({
      allowedAssets: [{ network: NETWORK, asset: terms.asset, maxAmountPerPayment: terms.amount }],
    }),
  )
  const required = { x402Version: 2, resource: { url: 'https://bench.example/data' }, accepts: [terms] }
  const one = async (i: number) =>
    JSON.stringify({
      x402Version: 2,
      paymentPayload: await clients[i % clients.length]!.createPaymentPayload(required as never),
      paymentRequirements: terms,
    })
  return async (n: number) => {
    const out: string[] = []
    for (let i = 0; i < n; i += 200)
      out.push(...(await Promise.all(Array.from({ length: Math.min(200, n - i) }, (_, j) => one(i + j)))))
    return out
  }
}

async function stepUp(
  chain: DevChain,
  rates: number[],
  seconds: number,
  warmUpSeconds: number,
  prepare: (n: number) => Promise<Pay>,
  pids: Record<string, () => number[]>,
  rpcSent?: () => Promise<number>,
): Promise<Step[]> {
  const steps: Step[] = []
  if (warmUpSeconds > 0) {
    const rate = rates[0]!
    const warm = await measure(
      chain,
      rate,
      warmUpSeconds,
      await prepare(Math.round(rate * warmUpSeconds)),
      {},
    )
    process.stdout.write(`  warm-up: ${JSON.stringify(warm)}\n`)
  }
  for (const rate of rates) {
    const step = await measure(chain, rate, seconds, await prepare(Math.round(rate * seconds)), pids, rpcSent)
    process.stdout.write(`  ${JSON.stringify(step)}\n`)
    steps.push(step)
    if (!step.sustained) break
  }
  return steps
}

/** Open loop: payment i is due at i / rate; its latency runs from then to its settle's answer. */
async function measure(
  chain: DevChain,
  rate: number,
  seconds: number,
  pay: Pay,
  pids: Record<string, () => number[]>,
  rpcSent?: () => Promise<number>,
) {
  const client = createPublicClient({ transport: http(chain.rpcUrl) })
  const firstBlock = (await client.getBlockNumber()) + 1n
  const n = Math.round(rate * seconds)
  // Only tollgate's steps have a database to meter (the reference has none).
  const statements = pids.database ? await statementsMeterFromEnv() : null
  const rpcBefore = await rpcSent?.()
  const meter = cpuMeter(pids)
  // The payloads are signed before this line (seconds of this process's CPU): a profiler attached to the
  // machine starts after it.
  process.stdout.write(`  measuring ${rate}/s for ${seconds} s\n`)
  const started = performance.now()
  const latencies: number[] = []
  let succeeded = 0
  const all: Promise<void>[] = []
  for (let i = 0; i < n; i++) {
    const due = started + (i * 1000) / rate
    const wait = due - performance.now()
    if (wait > 1) await new Promise((r) => setTimeout(r, wait))
    all.push(
      pay(i)
        .catch(() => false)
        .then((ok) => {
          if (ok) succeeded++
          latencies.push(performance.now() - due)
        }),
    )
  }
  await Promise.all(all)
  const elapsedS = (performance.now() - started) / 1000
  const cpu = meter.stop(Math.max(1, succeeded))
  const stepStatements = await statements?.read(Math.max(1, succeeded))
  const rpcRequests = rpcBefore === undefined ? undefined : (await rpcSent!()) - rpcBefore
  await statements?.end()
  await new Promise((r) => setTimeout(r, BLOCK_S * 1000 + 500))
  const lastBlock = await client.getBlockNumber()
  let transactions = 0
  for (let b = firstBlock; b <= lastBlock; b++)
    transactions += (await client.getBlock({ blockNumber: b })).transactions.length
  latencies.sort((a, b) => a - b)
  const q = (p: number) =>
    Math.round(latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))]!)
  return {
    rate,
    payments: n,
    succeeded,
    achieved_per_s: Math.round((succeeded / elapsedS) * 10) / 10,
    p50_ms: q(0.5),
    p99_ms: q(0.99),
    max_ms: Math.round(latencies[latencies.length - 1] ?? 0),
    transactions,
    tx_per_settlement: succeeded > 0 ? Math.round((transactions / succeeded) * 10_000) / 10_000 : 0,
    ...(rpcRequests === undefined
      ? {}
      : {
          rpc_requests_per_settlement: Math.round((rpcRequests / Math.max(1, succeeded)) * 10_000) / 10_000,
        }),
    cpu_us_per_settlement: cpu,
    ...(stepStatements ? { statements: stepStatements } : {}),
    // Every payment settled and the slowest within the settle wait a merchant's middleware would allow.
    sustained: succeeded === n && q(0.99) < 10_000,
  }
}

/**
 * The reference: its own facilitator key (a funded payer account of the dev chain), nonces handed out locally
 * as a facilitator settling concurrent payments must; payTo the same treasury.
 */
async function runReference(
  chain: DevChain,
  o: ReturnType<typeof options>,
  extra: { name: string; version: string },
): Promise<Step[]> {
  const account = privateKeyToAccount(chain.payers[o.payers]!.privateKey as Hex, { nonceManager })
  const wallet = createWalletClient({
    account,
    chain: { ...baseSepolia, id: chain.chainId, rpcUrls: { default: { http: [chain.rpcUrl] } } } as Chain,
    transport: http(chain.rpcUrl),
    pollingInterval: o.referencePollMs,
  }).extend(publicActions)
  const facilitator = registerFacilitatorScheme(new x402Facilitator(), {
    signer: toFacilitatorEvmSigner({ ...wallet, address: account.address } as never),
    networks: NETWORK,
  })
  const terms = requirements(chain, chain.treasury.address, extra)
  const signed = signer(payerKeys(chain, o.payers), terms)
  return stepUp(
    chain,
    o.referenceRates,
    o.seconds,
    o.warmUpSeconds,
    async (n) => {
      const payloads = (await signed(n)).map((b) => JSON.parse(b).paymentPayload)
      return async (i) => {
        if (!(await facilitator.verify(payloads[i], terms as never)).isValid) return false
        return (await facilitator.settle(payloads[i], terms as never)).success
      }
    },
    { server: () => [process.pid], chain: () => [chain.pid] },
  )
}
