// npm run bench: a real tollgate (own process, embedded PostgreSQL or BENCH_DATABASE_URL), a real anvil, a
// real upstream (own process), all on 127.0.0.1; autocannon measures each scenario. Every figure is also
// given as a ratio to the upstream called directly in the same run. Bounded: everything stops by itself.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import type { Hex } from 'viem'
import { startDevChain } from '../src/chain/dev-chain.ts'
import { makeProofs } from './proofs.ts'
import { printTable, type ScenarioResult, summarize, writeResults } from './report.ts'
import { type Child, freePort, ROOT, startTs } from './targets/processes.ts'

const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 8)
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32)
const PROOFS = Number(process.env.BENCH_PROOFS ?? 15_000)
const PRICE_ATOMIC = 1_000n // $0.001

async function main() {
  const children: Child[] = []
  const dataDir = mkdtempSync(join(tmpdir(), 'tollgate-bench-'))
  const hardStop = setTimeout(() => {
    process.stderr.write('bench: hard time limit reached\n')
    process.exit(2)
  }, 15 * 60_000)
  hardStop.unref()
  const chain = await startDevChain({ payers: 1, payerFunding: 10_000_000_000n })
  try {
    const upstream = await startTs('bench/targets/upstream-server.ts', { MAX_MS: '900000' }, /"port"/)
    children.push(upstream)
    const upstreamUrl = `http://127.0.0.1:${JSON.parse(upstream.line).port}`

    const port = await freePort()
    const adminPort = await freePort()
    const configFile = join(dataDir, 'bench.json')
    writeFileSync(
      configFile,
      JSON.stringify({ database: { data_dir: join(dataDir, 'pglite') }, chain: { poll_interval_ms: 250 } }),
    )
    const tollgate = await startTs(
      'src/main.ts',
      {
        PORT: String(port),
        ADMIN_PORT: String(adminPort),
        RPC_URL: chain.rpcUrl,
        USDC_ADDRESS: chain.usdcAddress,
        TREASURY_PRIVATE_KEY: chain.treasury.privateKey,
        ALLOW_PRIVATE_UPSTREAMS: 'true',
        LOG_LEVEL: 'warn',
        TOLLGATE_CONFIG: configFile,
        ...(process.env.BENCH_DATABASE_URL ? { DATABASE_URL: process.env.BENCH_DATABASE_URL } : {}),
        ...(process.env.BENCH_PROFILE_DIR
          ? { BENCH_NODE_ARGS: `--cpu-prof --cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}` }
          : {}),
      },
      /tollgate listening on/,
    )
    children.push(tollgate)
    const base = `http://127.0.0.1:${port}`

    const post = async (path: string, body: unknown, key?: string) => {
      const r = await fetch(`${base}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
        body: JSON.stringify(body),
      })
      if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`)
      return r.json() as Promise<any>
    }
    const reg = await post('/api/v1/register', {
      wallet_address: chain.payers[0]!.address,
      business_name: 'Bench',
    })
    const ep = await post(
      '/api/v1/endpoints',
      { upstream_url: `${upstreamUrl}/data`, price: '0.001' },
      reg.api_key,
    )

    process.stdout.write(`bench: making ${PROOFS} payment proofs on anvil…\n`)
    const proofs = await makeProofs({
      rpcUrl: chain.rpcUrl,
      chainId: chain.chainId,
      usdc: chain.usdcAddress,
      payerKey: chain.payers[0]!.privateKey,
      treasury: chain.treasury.address,
      value: PRICE_ATOMIC,
      count: PROOFS,
    })
    // Give the watcher time to fill the verified-transfer cache ("pre-verified" proofs).
    await new Promise((r) => setTimeout(r, 3_000))
    await warm(ep.metered_url)

    const results: ScenarioResult[] = []
    const ceiling = await run({ url: `${upstreamUrl}/data` })
    results.push(summarize('upstream direct (ceiling)', ceiling, null))
    const ceilingRps = ceiling.requests.average
    results.push(summarize('402 path (no proof)', await run({ url: ep.metered_url }), ceilingRps))
    results.push(summarize('paid, pre-verified proofs', await runPaid(ep.metered_url, proofs), ceilingRps))

    const metrics = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text()
    const interesting = metrics
      .split('\n')
      .filter((l) =>
        /^tollgate_(cache_lookups_total|verify_outcomes_total|claims_batch_size_(sum|count)|captures_batch_size_(sum|count)|calls_captured_total)/.test(
          l,
        ),
      )
    process.stdout.write(`\n${interesting.join('\n')}\n`)
    const table = printTable(results)
    const file = writeResults(
      join(ROOT, 'bench', 'results'),
      {
        date: new Date().toISOString(),
        node: process.version,
        connections: CONNECTIONS,
        duration_s: DURATION_S,
        proofs: PROOFS,
        database: process.env.BENCH_DATABASE_URL ? 'postgresql server' : 'embedded pglite',
        table,
      },
      results,
    )
    process.stdout.write(`results: ${file}\n`)
  } finally {
    for (const c of children.reverse()) await c.stop()
    await chain.stop()
    rmSync(dataDir, { recursive: true, force: true })
  }
}

function run(options: { url: string; headers?: Record<string, string> }): Promise<autocannon.Result> {
  return autocannon({
    url: options.url,
    connections: CONNECTIONS,
    duration: DURATION_S,
    headers: options.headers,
  })
}

/** Each request carries its own proof; the run ends when the proofs are used up or the time is. */
function runPaid(url: string, proofs: Hex[]): Promise<autocannon.Result> {
  let next = 0
  return autocannon({
    url,
    connections: CONNECTIONS,
    amount: proofs.length - 1,
    duration: DURATION_S,
    requests: [
      {
        method: 'GET',
        setupRequest: (req) => {
          const proof = proofs[next++ % proofs.length]!
          return { ...req, headers: { ...req.headers, 'x-payment': proof } }
        },
      },
    ],
  })
}

async function warm(url: string) {
  for (let i = 0; i < 200; i++) await fetch(url).then((r) => r.arrayBuffer())
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${err?.stack ?? err}\n`)
  process.exit(1)
})
