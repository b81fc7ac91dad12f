// What each feature costs a paid call when an endpoint (or the instance) uses it: the same call paid by a
// transaction hash as `paid-warm`, with one feature turned on, measured in the same run against its baseline
// (the call without it). A feature an endpoint does not use is built into none of its calls (the answer's
// stages, src/data-plane/stages/); these runs price it where it is used. The pairs (FEATURES) are read by
// featureCosts (bench/report.ts) into the results' `features`.
import { randomBytes } from 'node:crypto'
import { decodePaymentRequiredHeader } from '@x402/core/http'
import { createSIWxPayload, encodeSIWxHeader } from '@x402/extensions/sign-in-with-x'
import type { Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { load, type Measured } from '../load.ts'
import { type Context, settings, type TollgateKind } from './context.ts'
import { inside, readCounters } from './inside.ts'
import type { Scenario } from './scenario.ts'

export interface FeaturePair {
  feature: string
  /** The scenario with the feature on, and the one it is measured against (same run). */
  scenario: string
  baseline: string
  /** What differs besides the feature (another instance, another upstream answer), if anything. */
  note?: string
}

export const FEATURES: readonly FeaturePair[] = [
  { feature: 'discovery counts (listed endpoint)', scenario: 'feature-listed', baseline: 'paid-warm' },
  { feature: 'pricing rules', scenario: 'feature-rules', baseline: 'paid-warm' },
  {
    feature: 'signed receipts (EIP-712, body digest)',
    scenario: 'feature-receipts',
    baseline: 'paid-warm',
    note: 'an instance of its own (RECEIPT_SIGNING_KEY)',
  },
  {
    feature: 'per-address rate limits on',
    scenario: 'feature-rate-limits',
    baseline: 'paid-warm',
    note: 'an instance of its own (rate limits at their defaults)',
  },
  {
    feature: 'a pass (signed in, one use drawn)',
    scenario: 'feature-pass',
    baseline: 'paid-warm',
    note: 'each call a sign-in instead of a transaction hash',
  },
  { feature: 'agent identity (Web Bot Auth)', scenario: 'signed-agent-paid', baseline: 'paid-warm' },
  { feature: 'usage metering (tokens on the stream)', scenario: 'usage-sse', baseline: 'paid-sse' },
  { feature: 'MCP pricing (tool by name)', scenario: 'mcp-tool-call', baseline: 'paid-mcp' },
  {
    feature: 'payment-identifier (answer kept for a retry)',
    scenario: 'feature-payment-identifier',
    baseline: 'x402-v2-after',
    note: 'x402 v2 exact, settled after the answer',
  },
]

/** Proofs per feature run, as many as paid-warm's; and per warm-up run before it (not measured). */
const PROOFS = settings.proofs
export const WARM_PROOFS = Math.round(settings.proofs / 6)

/** The MCP tools/call and the SSE stream, as `mcp-tool-call` and `usage-sse` send them. */
export interface PaidRequest {
  method?: string
  headers?: Record<string, string>
  body?: string
}

/** One paid run: each request its own transaction hash, on `path` of instance `kind` with `options`. */
export function paidScenario(o: {
  name: string
  kind: TollgateKind
  path: string
  proofs: number
  options?: Parameters<NonNullable<Context['tollgates']['warm']>['metered']>[1]
  request?: PaidRequest
  /** Proofs of a warm-up run of the same calls first (its endpoint's path compiled and its plans made). */
  warmProofs?: number
}): Scenario {
  const once = async (ctx: Context, proofs: number) => {
    const t = ctx.tollgates[o.kind]!
    const url = await t.metered(o.path, o.options)
    const before = await readCounters(t.adminPort)
    const m = await load({
      connections: settings.connections,
      durationS: settings.durationS,
      url,
      ...o.request,
      perRequest: { header: 'x-payment', values: ctx.takeProofs(proofs) },
      expectStatus: 200,
    })
    return { ...m, inside: inside(before, await readCounters(t.adminPort)) }
  }
  const warm = o.warmProofs ?? 0
  return {
    name: o.name,
    tollgates: [o.kind],
    proofs: o.proofs + warm,
    ...(warm > 0 ? { warmUp: (ctx: Context) => once(ctx, warm).then(() => {}) } : {}),
    run: (ctx) => once(ctx, o.proofs),
  }
}

/** Rules checked before the default, none matching the bench's GET /data: the price is the default's. */
const RULES = {
  model: 'rules',
  rules: [
    { method: 'POST', path_prefix: '/write', price: 0.01 },
    { path_prefix: '/big', price: 0.005 },
    { method: 'DELETE', path_prefix: '/', price: 0.002 },
  ],
  default_price: 0.001,
}

/** The feature runs on `/data`, each after a warm-up run of its own (the baselines of the stream and MCP runs
 * are in index.ts beside theirs). */
export function featureScenarios(): Scenario[] {
  const on = (
    name: string,
    kind: TollgateKind,
    options?: { listed?: boolean; pricing?: Record<string, unknown> },
  ) => paidScenario({ name, kind, path: '/data', proofs: PROOFS, warmProofs: WARM_PROOFS, options })
  return [
    on('feature-listed', 'warm', { listed: true }),
    on('feature-rules', 'warm', { pricing: RULES }),
    on('feature-receipts', 'receipts'),
    on('feature-rate-limits', 'limited'),
    {
      name: 'feature-pass',
      tollgates: ['warm'],
      // One proof buys the pass of each run.
      proofs: 2,
      warmUp: (ctx) => runPass(ctx, WARM_PROOFS).then(() => {}),
      run: (ctx) => runPass(ctx, PROOFS),
    },
  ]
}

/** A time pass at one proof's price: bought once, then every call signed in (sign-in-with-x). */
const PASS = { price: 0.001, duration_s: 3_600 }

/**
 * The pass bought with one transaction hash, then `count` calls each with its own SIGN-IN-WITH-X header
 * (a nonce is used once), made before the load by the published @x402/extensions helper from the terms the
 * endpoint's 402 declares.
 */
async function runPass(ctx: Context, count: number): Promise<Measured> {
  const t = ctx.tollgates.warm!
  const url = await t.metered('/data', { pass: PASS })
  const id = url.slice(url.lastIndexOf('/') + 1)
  const bought = await fetch(`${t.base}/pass/${id}`, { headers: { 'x-payment': ctx.takeProofs(1)[0]! } })
  if (bought.status !== 200 && bought.status !== 201)
    throw new Error(`feature-pass: the pass was not sold (${bought.status})`)
  await bought.arrayBuffer()
  const r = await fetch(url)
  const required = decodePaymentRequiredHeader(r.headers.get('payment-required')!)
  await r.arrayBuffer()
  const declared = required.extensions?.['sign-in-with-x'] as { info: Record<string, unknown> } | undefined
  if (declared === undefined) throw new Error('feature-pass: the 402 declares no sign-in-with-x')
  const terms = declared.info
  const signer = privateKeyToAccount(ctx.chain.payers[0]!.privateKey as Hex)
  const caip2 = `eip155:${ctx.chain.chainId}`
  const headerSets: Array<Record<string, string>> = []
  for (let i = 0; i < count; i += 200) {
    const batch = Array.from({ length: Math.min(200, count - i) }, async () => {
      const info = { ...terms, nonce: randomBytes(16).toString('hex'), chainId: caip2, type: 'eip191' }
      return { 'sign-in-with-x': encodeSIWxHeader(await createSIWxPayload(info as never, signer, url)) }
    })
    headerSets.push(...(await Promise.all(batch)))
    // A turn of the event loop between batches: the signing is synchronous work chained by promises, so
    // without it no timer or socket event ran for the whole loop, and the next fetch took a kept-alive
    // connection the instance had closed meanwhile ("fetch failed": other side closed).
    await new Promise((r) => setImmediate(r))
  }
  // One signed in by hand first: a refusal names its reason here instead of counting as errors.
  const first = await fetch(url, { headers: headerSets.pop()! })
  if (first.status !== 200) {
    const why = first.headers.get('payment-required')
    throw new Error(
      `feature-pass: a sign-in was refused (${first.status}: ${why ? decodePaymentRequiredHeader(why).error : await first.text()})`,
    )
  }
  await first.arrayBuffer()
  const before = await readCounters(t.adminPort)
  const m = await load({
    connections: settings.connections,
    durationS: settings.durationS,
    url,
    headerSets,
    expectStatus: 200,
  })
  return { ...m, inside: inside(before, await readCounters(t.adminPort)) }
}
