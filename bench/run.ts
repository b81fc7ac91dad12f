// npm run bench: real tollgate instances (own processes, embedded PostgreSQL or BENCH_DATABASE_URL), a real
// anvil, a real upstream (own process), all on 127.0.0.1; autocannon measures each scenario. Every figure is
// also given as a ratio to the upstream called directly in the same run. Bounded: everything stops by itself.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import type { Hex } from 'viem'
import { startDevChain } from '../src/chain/dev-chain.ts'
import { makeProofs } from './proofs.ts'
import { printTable, type ScenarioResult, summarize, writeResults } from './report.ts'
import { type OtlpSink, startOtlpSink } from './targets/otlp-sink.ts'
import { type Child, freePort, ROOT, startTs } from './targets/processes.ts'

const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 8)
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32)
const PROOFS = Number(process.env.BENCH_PROOFS ?? 15_000)
const COLD_PROOFS = Number(process.env.BENCH_COLD_PROOFS ?? 3_000)
const PRICE_ATOMIC = 1_000n // $0.001

interface Instance {
  base: string
  adminPort: number
  post(path: string, body: unknown, key?: string): Promise<any>
}

async function main() {
  const children: Child[] = []
  const dataDir = mkdtempSync(join(tmpdir(), 'tollgate-bench-'))
  const hardStop = setTimeout(() => {
    process.stderr.write('bench: hard time limit reached\n')
    process.exit(2)
  }, 15 * 60_000)
  hardStop.unref()
  const chain = await startDevChain({ payers: 1, payerFunding: 10_000_000_000n })
  // BENCH_TRACING=1: the instances export traces (every call sampled) to a stand-in collector in this process.
  const sink: OtlpSink | null = process.env.BENCH_TRACING === '1' ? await startOtlpSink() : null

  /** A tollgate process; `watch: false` stops its transfer watcher after start-up, so proofs are cold. */
  async function startTollgate(name: string, watch: boolean): Promise<Instance> {
    const port = await freePort()
    const adminPort = await freePort()
    const configFile = join(dataDir, `${name}.json`)
    writeFileSync(
      configFile,
      JSON.stringify({
        database: { data_dir: join(dataDir, `${name}-pglite`) },
        chain: { poll_interval_ms: watch ? 250 : 3_600_000 },
      }),
    )
    const child = await startTs(
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
        ...(sink ? { OTEL_EXPORTER_OTLP_ENDPOINT: sink.url } : {}),
        ...(process.env.BENCH_DATABASE_URL ? { DATABASE_URL: process.env.BENCH_DATABASE_URL } : {}),
        ...(process.env.BENCH_PROFILE_DIR && watch
          ? { BENCH_NODE_ARGS: `--cpu-prof --cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}` }
          : {}),
      },
      /tollgate listening on/,
    )
    children.push(child)
    const base = `http://127.0.0.1:${port}`
    return {
      base,
      adminPort,
      async post(path, body, key) {
        const r = await fetch(`${base}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
          body: JSON.stringify(body),
        })
        if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`)
        return r.json()
      },
    }
  }

  try {
    const upstream = await startTs('bench/targets/upstream-server.ts', { MAX_MS: '900000' }, /"port"/)
    children.push(upstream)
    const upstreamUrl = `http://127.0.0.1:${JSON.parse(upstream.line).port}`
    const warm = await startTollgate('warm', true)
    const cold = await startTollgate('cold', false)

    const reg = await warm.post('/api/v1/register', {
      wallet_address: chain.payers[0]!.address,
      business_name: 'Bench',
    })
    const ep = await warm.post(
      '/api/v1/endpoints',
      { upstream_url: `${upstreamUrl}/data`, price: '0.001' },
      reg.api_key,
    )
    const payment = await warm.post(
      '/api/v1/payments',
      { amount: 10, description: 'Bench order' },
      reg.api_key,
    )
    const coldReg = await cold.post('/api/v1/register', {
      wallet_address: chain.payers[0]!.address,
      business_name: 'Cold',
    })
    const coldEp = await cold.post(
      '/api/v1/endpoints',
      { upstream_url: `${upstreamUrl}/data`, price: '0.001' },
      coldReg.api_key,
    )

    process.stdout.write(`bench: making ${PROOFS + COLD_PROOFS} payment proofs on anvil…\n`)
    const proofs = await makeProofs({
      rpcUrl: chain.rpcUrl,
      chainId: chain.chainId,
      usdc: chain.usdcAddress,
      payerKey: chain.payers[0]!.privateKey,
      treasury: chain.treasury.address,
      value: PRICE_ATOMIC,
      count: PROOFS + COLD_PROOFS,
    })
    const coldProofs = proofs.splice(PROOFS)
    // Give the warm instance's watcher time to fill its verified-transfer cache ("pre-verified" proofs).
    await new Promise((r) => setTimeout(r, 3_000))
    for (const url of [ep.metered_url, coldEp.metered_url]) {
      for (let i = 0; i < 200; i++) await fetch(url).then((r) => r.arrayBuffer())
    }

    const results: ScenarioResult[] = []
    // CPU time the warm instance spent per request: unlike req/s, it barely moves when other processes
    // share the cores, so it is the figure to compare two builds on a busy machine.
    const cpu: Record<string, number> = {}
    const measured = async (name: string, r: Promise<autocannon.Result>) => {
      const before = await cpuSeconds(warm.adminPort)
      const result = await r
      cpu[name] = Math.round((((await cpuSeconds(warm.adminPort)) - before) * 1e6) / result.requests.total)
      return result
    }
    const ceiling = await run({ url: `${upstreamUrl}/data` })
    results.push(summarize('upstream direct (ceiling)', ceiling, null))
    const ceilingRps = summarize('ceiling', ceiling, null).requests_per_sec
    results.push(
      summarize('402 path (no proof)', await measured('402', run({ url: ep.metered_url })), ceilingRps),
    )
    results.push(
      summarize(
        'paid, pre-verified proofs',
        await measured('paid_warm', runPaid(ep.metered_url, proofs)),
        ceilingRps,
      ),
    )
    results.push(
      summarize(
        'paid, cold verification (RPC per proof)',
        await runPaid(coldEp.metered_url, coldProofs),
        ceilingRps,
      ),
    )
    results.push(
      summarize(
        'checkout status JSON (/pay/:id/status)',
        await measured('checkout_status', run({ url: `${payment.payment_url}/status` })),
        ceilingRps,
      ),
    )
    results.push(
      summarize(
        'management API (GET /api/v1/account)',
        await measured(
          'api_account',
          run({ url: `${warm.base}/api/v1/account`, headers: { authorization: `Bearer ${reg.api_key}` } }),
        ),
        ceilingRps,
      ),
    )

    const metrics = await (await fetch(`http://127.0.0.1:${warm.adminPort}/metrics`)).text()
    const interesting = metrics
      .split('\n')
      .filter((l) =>
        /^tollgate_(cache_lookups_total|verify_outcomes_total|claims_batch_size_(sum|count)|captures_batch_size_(sum|count)|calls_captured_total)/.test(
          l,
        ),
      )
    process.stdout.write(`\nwarm instance:\n${interesting.join('\n')}\n`)
    process.stdout.write(`warm instance CPU per request (µs): ${JSON.stringify(cpu)}\n`)
    if (sink) process.stdout.write(`tracing on: ${sink.spans()} spans exported so far\n`)
    const table = printTable(results)
    const file = writeResults(
      join(ROOT, 'bench', 'results'),
      {
        date: new Date().toISOString(),
        node: process.version,
        connections: CONNECTIONS,
        duration_s: DURATION_S,
        proofs: PROOFS,
        cold_proofs: COLD_PROOFS,
        database: process.env.BENCH_DATABASE_URL ? 'postgresql server' : 'embedded pglite',
        tracing: sink !== null,
        cpu_us_per_request: cpu,
        table,
      },
      results,
    )
    process.stdout.write(`results: ${file}\n`)
  } finally {
    for (const c of children.reverse()) await c.stop()
    await sink?.close()
    await chain.stop()
    rmSync(dataDir, { recursive: true, force: true })
  }
}

async function cpuSeconds(adminPort: number): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text()
  const m = /^tollgate_process_cpu_seconds_total (\S+)/m.exec(text)
  return m ? Number(m[1]) : Number.NaN
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

main().catch((err) => {
  process.stderr.write(`bench failed: ${err?.stack ?? err}\n`)
  process.exit(1)
})
