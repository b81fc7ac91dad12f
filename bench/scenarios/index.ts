// Every scenario: what it needs started, how many proofs it uses, and one load run. Ratios are to `direct`.
import { load, type Measured } from '../load.ts'
import { paced } from '../paced.ts'
import { BENCH_SIGNER } from '../targets/agent-directory.ts'
import { type Context, settings, type TollgateKind } from './context.ts'
import { featureScenarios, paidScenario, WARM_PROOFS } from './features.ts'
import { inside, readCounters } from './inside.ts'
import { prepareMpp, runMppCharge, runMppReference } from './mpp.ts'
import type { Scenario } from './scenario.ts'
import { runUpto, runUptoReference } from './upto.ts'
import { runX402 } from './x402.ts'
import { runX402Batch } from './x402-batch.ts'
import { runX402Reference } from './x402-reference.ts'
import { runX402V2 } from './x402-v2.ts'

export type { Scenario }

/**
 * Authorizations (or permits) paid before each x402 scenario and its reference, the same number to both.
 * A measured run of 1,500 lasts ~2-3 s for tollgate: without it, compiling and connecting weighed on it
 * (384 calls/s over 1,500 against 497 over 6,000 in one sitting); the reference's run lasts ~20 s.
 */
const X402_WARM_UP = Number(process.env.BENCH_X402_WARM_UP ?? 300)
function warmedBy(run: (ctx: Context, count: number) => Promise<unknown>): Scenario['warmUp'] {
  return X402_WARM_UP > 0 ? (ctx) => run(ctx, X402_WARM_UP).then(() => {}) : undefined
}

/** Calls of each x402 v2 run (settled after the answer, so a run of a few seconds at the server's rate). */
const X402_V2_CALLS = Number(process.env.BENCH_X402_V2 ?? 3_000)

const base = () => ({ connections: settings.connections, durationS: settings.durationS })

/** Tokens at $0.1 / $0.05 / $0.4 per million, ceiling $0.001 (one bench proof): ~$0.00014 per call. */
const USAGE_SSE_PRICING = {
  model: 'usage',
  unit: 'tokens',
  max_price: 0.001,
  input_price_per_million: 0.1,
  cached_input_price_per_million: 0.05,
  output_price_per_million: 0.4,
}

/** The OpenAI-style stream as a client asks for it (usage-sse and its baseline). */
const SSE_REQUEST = {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'm', stream: true }),
}

/** One MCP tools/call, as the SDK client sends it once a session is open (stateless server: no session). */
const MCP_CALL = {
  method: 'POST',
  headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
  body: JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { name: 'weather', arguments: { city: 'Lyon' } },
  }),
}

function paid(kind: TollgateKind, path: string, proofs: number, name: string, warmProofs = 0): Scenario {
  return paidScenario({ name, kind, path, proofs, warmProofs })
}

/** The scenario's rate over another's of the same run, as `ratio_to_<other>`. */
function withRatioTo(s: Scenario, other: string): Scenario {
  const key = `ratio_to_${other.replaceAll('-', '_')}`
  return {
    ...s,
    run: async (ctx) => {
      const m = await s.run(ctx)
      if ('skipped' in m) return m
      const rps = ctx.rps.get(other)
      return { ...m, [key]: rps ? Math.round((m.rps / rps) * 1000) / 1000 : null }
    },
  }
}

/**
 * A verified agent: the endpoint prices the bench's signer at its own price and blocks every other caller, so
 * each measured answer (402, or 200 paid) passed the signature check against the warm directory cache; an
 * unverified one would be a 403 and count as an error. Each request carries its own signature (a nonce is
 * used once), made before the load by mppx's Web Bot Auth signer.
 */
const AGENT_RULES = [
  { match: 'signer', signer: BENCH_SIGNER, action: 'endpoint_price' },
  { match: 'unsigned', action: 'block' },
]
const SIGNATURES = Number(process.env.BENCH_SIGNATURES ?? 20_000)

async function agentUrl(ctx: Context): Promise<string> {
  const url = await ctx.tollgates.warm!.metered('/data', { identityRules: AGENT_RULES })
  // The directory is fetched in the background once the instance starts: wait until its key is held.
  for (let i = 0; i < 200; i++) {
    const [headers] = await ctx.agent!.sign(url, 1)
    if ((await fetch(url, { headers })).status === 402) return url
    await new Promise((r) => setTimeout(r, 50))
  }
  throw new Error('signed-agent: the key directory was never cached')
}

// The signatures are made before the measured run (`prepare`, outside its CPU meter and the quiet wait): the
// measured window holds the load alone, not mppx's signer busy on a core for the seconds before it (tollgate
// and PostgreSQL idled meanwhile, so the figures moved little: 2026-12-01 pairs in docs/benchmarks.md).
function signedAgent402(): Scenario {
  let run: { url: string; headerSets: Array<Record<string, string>> } | null = null
  return {
    name: 'signed-agent',
    tollgates: ['warm'],
    prepare: async (ctx) => {
      const url = await agentUrl(ctx)
      run = { url, headerSets: await ctx.agent!.sign(url, SIGNATURES) }
    },
    run: () => load({ ...base(), ...run!, expectStatus: 402 }),
  }
}

function signedAgentPaid(): Scenario {
  const proofs = Math.round(settings.proofs / 4)
  const warm = Math.round(WARM_PROOFS / 2)
  const signed = async (ctx: Context, count: number) => {
    const url = await agentUrl(ctx)
    return { url, headerSets: await ctx.agent!.sign(url, count) }
  }
  const once = async (ctx: Context, r: { url: string; headerSets: Array<Record<string, string>> }) => {
    const t = ctx.tollgates.warm!
    const before = await readCounters(t.adminPort)
    const m = await load({
      ...base(),
      ...r,
      perRequest: { header: 'x-payment', values: ctx.takeProofs(r.headerSets.length) },
      expectStatus: 200,
    })
    return { ...m, inside: inside(before, await readCounters(t.adminPort)) }
  }
  let measured: { url: string; headerSets: Array<Record<string, string>> } | null = null
  return {
    name: 'signed-agent-paid',
    tollgates: ['warm'],
    proofs: proofs + warm,
    warmUp: async (ctx) => {
      await once(ctx, await signed(ctx, warm))
    },
    prepare: async (ctx) => {
      measured = await signed(ctx, proofs)
    },
    run: (ctx) => once(ctx, measured!),
  }
}

function direct(path: string, name: string): Scenario {
  return { name, run: (ctx) => load({ ...base(), url: `${ctx.upstream.base}${path}`, expectStatus: 200 }) }
}

export const scenarios: Scenario[] = [
  direct('/data', 'direct'),
  {
    name: 'bare-uws',
    peer: 'bare-uws',
    tollgates: ['warm'],
    run: (ctx) => load({ ...base(), url: `${ctx.bare!.base}/m/x`, expectStatus: 402 }),
  },
  {
    name: 'challenge',
    tollgates: ['warm'],
    run: async (ctx) =>
      load({ ...base(), url: await ctx.tollgates.warm!.metered('/data'), expectStatus: 402 }),
  },
  signedAgent402(),
  signedAgentPaid(),
  {
    name: 'nginx',
    peer: 'nginx',
    run: async (ctx) =>
      ctx.nginx
        ? load({ ...base(), url: `${ctx.nginx.base}/data`, expectStatus: 200 })
        : { skipped: 'nginx not found (/usr/sbin/nginx): apt-get install -y nginx-light' },
  },
  {
    // tollgate's relay alone (proxy() in a bare uWS app, no payment work): a free proxied call, nginx's peer.
    name: 'relay',
    peer: 'bare-relay',
    run: (ctx) => load({ ...base(), url: `${ctx.relay!.base}/data`, expectStatus: 200 }),
  },
  // Warmed up as the feature runs measured against it are (bench/scenarios/features.ts).
  paid('warm', '/data', settings.proofs, 'paid-warm', WARM_PROOFS),
  {
    ...paid('cold', '/data', Math.round(settings.proofs / 5), 'paid-cold'),
    run: (ctx) => runPaidCold(ctx, Math.round(settings.proofs / 5)),
  },
  ...featureScenarios(),
  paid('tsx', '/data', settings.proofs, 'paid-warm-tsx'),
  paid('workers2', '/data', settings.proofs, 'workers-2'),
  {
    name: 'x402',
    tollgates: ['warm'],
    warmUp: warmedBy(runX402),
    run: (ctx) => runX402(ctx, Number(process.env.BENCH_X402 ?? 1_500)),
  },
  {
    // The same calls on an endpoint that chose `x402_settlement: "after"`: the receipts say pending, the
    // leader's batch settles them. `x402` settles before the answer (the default): the pair prices it.
    name: 'x402-after',
    tollgates: ['warm'],
    warmUp: warmedBy((ctx, count) => runX402(ctx, count, true)),
    run: (ctx) => runX402(ctx, Number(process.env.BENCH_X402 ?? 1_500), true),
  },
  {
    // x402 v2 (PAYMENT-SIGNATURE by the published @x402/core client) on the settle-after endpoint:
    // feature-payment-identifier's baseline, the same calls without the extension.
    name: 'x402-v2-after',
    tollgates: ['warm'],
    warmUp: warmedBy((ctx, count) => runX402V2(ctx, count, false)),
    run: (ctx) => runX402V2(ctx, X402_V2_CALLS, false),
  },
  {
    // The same, each payment carrying its own payment-identifier: its answer kept for a retry.
    name: 'feature-payment-identifier',
    tollgates: ['warm'],
    warmUp: warmedBy((ctx, count) => runX402V2(ctx, count, true)),
    run: (ctx) => runX402V2(ctx, X402_V2_CALLS, true),
  },
  {
    // Pay once, call many: one channel per connection, cumulative vouchers signed before the load.
    name: 'x402-batch',
    tollgates: ['warm'],
    run: async (ctx) => {
      const m = await runX402Batch(ctx, Number(process.env.BENCH_BATCH_VOUCHERS ?? 2_500))
      const over = (peer: string) => {
        const rps = ctx.rps.get(peer)
        return rps ? Math.round((m.rps / rps) * 1000) / 1000 : null
      }
      return { ...m, ratio_to_nginx: over('nginx'), ratio_to_x402: over('x402') }
    },
  },
  {
    name: 'x402-reference',
    peer: 'x402-reference',
    warmUp: warmedBy(runX402Reference),
    run: (ctx) => runX402Reference(ctx, Number(process.env.BENCH_X402 ?? 1_500)),
  },
  {
    // MPP's reference server (mppx/express, its evm charge settled on anvil before each answer), paid by
    // credentials built by mppx's client method, one 402 each.
    name: 'mpp-reference',
    peer: 'mpp-reference',
    warmUp: warmedBy(runMppReference),
    prepare: (ctx) => prepareMpp(ctx, 'reference', Number(process.env.BENCH_MPP ?? 1_500)),
    run: (ctx) => runMppReference(ctx, Number(process.env.BENCH_MPP ?? 1_500)),
  },
  {
    // The same credentials through tollgate (Authorization: Payment, settled in the batcher's batches).
    name: 'mpp-charge',
    tollgates: ['warm'],
    warmUp: warmedBy(runMppCharge),
    prepare: (ctx) => prepareMpp(ctx, 'tollgate', Number(process.env.BENCH_MPP ?? 1_500)),
    run: (ctx) => runMppCharge(ctx, Number(process.env.BENCH_MPP ?? 1_500)),
  },
  {
    // The OpenAI-style stream called directly, asking for its usage as tollgate does on the client's behalf.
    name: 'direct-sse',
    run: (ctx) =>
      load({
        ...base(),
        url: `${ctx.upstream.base}/v1/chat/completions`,
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', stream: true, stream_options: { include_usage: true } }),
        expectStatus: 200,
      }),
  },
  // usage-sse's baseline: the same stream at a fixed price (no usage asked for, nothing read on it).
  paidScenario({
    name: 'paid-sse',
    kind: 'warm',
    path: '/v1/chat/completions',
    proofs: Math.round(settings.proofs / 4),
    warmProofs: Math.round(WARM_PROOFS / 2),
    request: SSE_REQUEST,
  }),
  // The same stream priced per token through tollgate: usage asked for, read on the stream and taken out
  // again; each call paid by a transaction hash as a prepaid ceiling (the rest refunded in the payout batch).
  withRatioTo(
    paidScenario({
      name: 'usage-sse',
      kind: 'warm',
      path: '/v1/chat/completions',
      proofs: Math.round(settings.proofs / 4),
      warmProofs: Math.round(WARM_PROOFS / 2),
      options: { pricing: USAGE_SSE_PRICING },
      request: SSE_REQUEST,
    }),
    'direct-sse',
  ),
  {
    // The same stream per token, each call paid by the published x402 upto client (a Permit2 permit for the
    // ceiling, settled after the call for the charge measured on the stream).
    name: 'upto',
    tollgates: ['warm'],
    warmUp: warmedBy(runUpto),
    run: (ctx) => runUpto(ctx, Number(process.env.BENCH_UPTO ?? 1_500)),
  },
  {
    // The x402 reference's upto server on the same stream: reads it whole, declares the amount, settles it
    // in-process before answering.
    name: 'x402-reference-upto',
    peer: 'x402-reference',
    warmUp: warmedBy(runUptoReference),
    run: (ctx) => runUptoReference(ctx, Number(process.env.BENCH_UPTO ?? 1_500)),
  },
  {
    // The published MCP SDK server called directly: one tools/call per request.
    name: 'direct-mcp',
    run: (ctx) => load({ ...base(), url: `${ctx.upstream.base}/mcp`, ...MCP_CALL, expectStatus: 200 }),
  },
  // mcp-tool-call's baseline: the same tools/call on a plain endpoint at a fixed price (the body not read).
  paidScenario({
    name: 'paid-mcp',
    kind: 'warm',
    path: '/mcp',
    proofs: Math.round(settings.proofs / 4),
    warmProofs: Math.round(WARM_PROOFS / 2),
    request: MCP_CALL,
  }),
  // The same tools/call through an MCP endpoint: the JSON-RPC body read, the tool priced by name ($0.001, one
  // bench proof), paid by a transaction hash.
  withRatioTo(
    paidScenario({
      name: 'mcp-tool-call',
      kind: 'warm',
      path: '/mcp',
      proofs: Math.round(settings.proofs / 4),
      warmProofs: Math.round(WARM_PROOFS / 2),
      options: { mcp: { tools: { weather: 0.001 }, default_price: 0.001 } },
      request: MCP_CALL,
    }),
    'direct-mcp',
  ),
  direct('/1k', 'direct-1k'),
  paid('warm', '/1k', Math.round(settings.proofs * 0.6), 'paid-1k'),
  direct('/256k', 'direct-256k'),
  {
    // The same 256 KB answers relayed by nginx (no payment work): paid-256k's peer for CPU per byte relayed.
    name: 'nginx-256k',
    peer: 'nginx',
    run: async (ctx) =>
      ctx.nginx
        ? load({ ...base(), url: `${ctx.nginx.base}/256k`, expectStatus: 200 })
        : { skipped: 'nginx not found (/usr/sbin/nginx): apt-get install -y nginx-light' },
  },
  {
    // The same 256 KB answers through tollgate's relay alone: nginx-256k's peer without the paid call's work.
    name: 'relay-256k',
    peer: 'bare-relay',
    run: (ctx) => load({ ...base(), url: `${ctx.relay!.base}/256k`, expectStatus: 200 }),
  },
  paid('warm', '/256k', Math.round(settings.proofs / 5), 'paid-256k'),
  {
    name: 'half-load-direct',
    run: (ctx) =>
      paced({
        ...base(),
        url: `${ctx.upstream.base}/data`,
        rate: halfRate(ctx),
        warmupS: 1,
        expectStatus: 200,
      }),
  },
  {
    name: 'half-load-paid',
    tollgates: ['warm'],
    proofs: Math.round(settings.proofs * 0.6),
    run: async (ctx) => {
      const t = ctx.tollgates.warm!
      const url = await t.metered('/data')
      const before = await readCounters(t.adminPort)
      const m = await paced({
        ...base(),
        url,
        rate: halfRate(ctx),
        warmupS: 1,
        perRequest: { header: 'x-payment', values: ctx.takeProofs(Math.round(settings.proofs * 0.6)) },
        expectStatus: 200,
      })
      return { ...m, inside: inside(before, await readCounters(t.adminPort)) }
    },
  },
  {
    name: 'payment-create',
    tollgates: ['warm'],
    run: (ctx) =>
      load({
        ...base(),
        url: `${ctx.tollgates.warm!.base}/api/v1/payments`,
        method: 'POST',
        headers: {
          authorization: `Bearer ${ctx.tollgates.warm!.apiKey}`,
          'content-type': 'application/json',
        },
        // Four prices in turn: each price has 9,999 figures (src/books/payments.ts), and one price alone ran out
        // of them within a run once creations passed 2,000/s (every creation after that answered 503), two
        // once creations shared commits and passed 4,000/s. Four keep each price about as full by the run's
        // end as one was in earlier runs (~5,000-10,000 open).
        bodies: [10, 11, 12, 13].map((amount) => JSON.stringify({ amount, description: 'Bench order' })),
        expectStatus: 201,
      }),
  },
  {
    name: 'checkout-page',
    tollgates: ['warm'],
    run: async (ctx) => {
      const t = ctx.tollgates.warm!
      const payment = await t.post('/api/v1/payments', { amount: 10, description: 'Bench order' }, t.apiKey)
      // A browser: agents (no text/html in accept) get the 402 with the payment's requirements instead.
      return load({
        ...base(),
        url: payment.payment_url,
        headers: { accept: 'text/html' },
        expectStatus: 200,
      })
    },
  },
]

/**
 * Every proof verified over RPC (the cold instance's watcher is idle), the node's HTTP requests counted by
 * tollgate_rpc_requests_total on its admin port before and after: rpc_per_proof (target ≤ 1).
 */
async function runPaidCold(ctx: Context, proofs: number): Promise<Measured> {
  const cold = ctx.tollgates.cold!
  const url = await cold.metered('/data')
  const before = await rpcCounts(cold.adminPort)
  const m = await load({
    ...base(),
    url,
    perRequest: { header: 'x-payment', values: ctx.takeProofs(proofs) },
    expectStatus: 200,
  })
  const after = await rpcCounts(cold.adminPort)
  const paidCalls = Math.max(1, m.requests - m.errors)
  const round = (x: number) => Math.round(x * 1000) / 1000
  return {
    ...m,
    rpc_per_proof: round((after.requests - before.requests) / paidCalls),
    rpc_calls_per_proof: round((after.calls - before.calls) / paidCalls),
  }
}

/**
 * The node's HTTP requests and JSON-RPC calls so far. A scrape runs the readiness check (one lone
 * eth_blockNumber); verification never sends that alone, so lone eth_blockNumber requests are left out.
 */
async function rpcCounts(adminPort: number): Promise<{ requests: number; calls: number }> {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text()
  const sum = (metric: string) => {
    let total = 0
    for (const m of text.matchAll(new RegExp(`^${metric}\\{method="([^"]+)"\\} (\\S+)$`, 'gm'))) {
      if (m[1] !== 'eth_blockNumber') total += Number(m[2])
    }
    return total
  }
  return { requests: sum('tollgate_rpc_requests_total'), calls: sum('tollgate_rpc_calls_total') }
}

/** Half of the paid path's saturation rate (measured earlier in this run), for the added-latency pair. */
function halfRate(ctx: Context): number {
  return Math.max(100, Math.round((ctx.rps.get('paid-warm') ?? 2_000) / 2))
}
