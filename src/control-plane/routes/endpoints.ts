// /endpoints: the metered endpoints an owner sells, with their upstream target, price and injected headers.
import * as v from 'valibot'
import { settleBeforeAnswerUnavailable } from '../../config/settle-before-answer.ts'
import {
  deleteEndpoint,
  type EndpointChanges,
  type EndpointRow,
  findOwnedEndpoint,
  insertEndpoint,
  listEndpoints,
  updateEndpoint,
  type X402Settlement,
} from '../../db/endpoints.ts'
import { DiscoveryInput, type StoredDiscovery } from '../../discovery/listing.ts'
import { ApiError } from '../../errors.ts'
import { IdentityRulesInput, toRule } from '../../identity/rules.ts'
import {
  presentRules,
  rulesFromStored,
  rulesToStored,
  type StoredIdentityRule,
} from '../../identity/stored-rules.ts'
import { newId } from '../../ids.ts'
import {
  McpInput,
  McpObject,
  type McpPricing,
  mcpFromStored,
  mcpToStored,
  presentMcp,
  readMcp,
} from '../../mcp/config.ts'
import { configDollars, parseDollars, toDollars } from '../../money.ts'
import {
  PricingError,
  PricingInput,
  PricingObject,
  presentPricing,
  readPricing,
} from '../../pricing/input.ts'
import { headlinePrice, type Pricing, pricingFromStored, pricingToStored } from '../../pricing/model.ts'
import {
  type Pass,
  PassError,
  PassInput,
  PassObject,
  passFromStored,
  passToStored,
  presentPass,
  readPass,
} from '../../pricing/pass.ts'
import {
  DEFAULT_MAX_MESSAGE_BYTES,
  DEFAULT_TOP_UP_WAIT_MS,
  MAX_MESSAGE_BYTES_LIMIT,
  MAX_TOP_UP_WAIT_MS,
  type StoredWebsocket,
  sessionTermsFromStored,
  sessionTermsToStored,
} from '../../pricing/session.ts'
import { checkTargetUrl } from '../../ssrf.ts'
import { Atomic, DeletedObject, Dollars, listOf, Network, Timestamp } from '../api-schemas.ts'
import type { ControlPlaneDeps } from '../deps.ts'
import { listResponse, readPage } from '../pagination.ts'
import type { Route } from '../route.ts'
import { parseBody } from '../validation.ts'

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$/
/** Headers the proxy owns; an owner may not inject these. */
const RESERVED_HEADERS = new Set([
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'te',
  'trailer',
  'x-payment',
  'payment-signature',
  'sign-in-with-x',
  'x-forwarded-for',
  'x-forwarded-host',
  'x-forwarded-proto',
])

const Price = v.union([v.number(), v.string()], 'must be a number or decimal string')
const UpstreamHeaders = v.pipe(
  v.record(
    v.string(),
    v.pipe(v.string('values must be strings'), v.maxLength(4096, 'values must be ≤ 4096 characters')),
  ),
  v.check((h) => Object.keys(h).length <= 20, 'at most 20 headers'),
  v.check((h) => Object.keys(h).every((k) => HEADER_NAME.test(k)), 'header names must be valid HTTP tokens'),
  v.check(
    (h) => Object.keys(h).every((k) => !RESERVED_HEADERS.has(k.toLowerCase())),
    'hop-by-hop, host, framing and payment headers cannot be injected',
  ),
  v.check((h) => Object.values(h).every((x) => !/[\r\n\0]/.test(x)), 'values must not contain CR, LF or NUL'),
)
const TimeoutMs = v.nullable(
  v.pipe(v.number(), v.integer('must be an integer'), v.minValue(100), v.maxValue(300_000)),
)
const OptionalText = (max: number) =>
  v.optional(v.nullable(v.pipe(v.string('must be a string'), v.maxLength(max))))

const Kind = v.pipe(
  v.picklist(['http', 'mcp'], 'must be "http" or "mcp"'),
  v.description(
    'http (default): priced by price or pricing. mcp: a Streamable HTTP MCP server; `tools/call` is ' +
      'priced per tool by `mcp`, protocol methods pass free',
  ),
)

const Settlement = v.pipe(
  v.nullable(v.picklist(['before_answer', 'after'], 'must be "before_answer", "after" or null')),
  v.description(
    'when an x402 `exact` payment is settled on chain. before_answer: the answer waits until the ' +
      'settlement is mined and its receipt names that transaction (what the published x402 clients read as ' +
      'settled; costs the chain’s block time per call). after: settled in batches after the answer, whose ' +
      'receipt says settlement_pending. null or absent: the service default (settlement.before_answer.enabled)',
  ),
)

const Protocols = v.pipe(
  v.array(v.picklist(['x402', 'mpp'], 'must be "x402" or "mpp"'), 'must be an array of "x402" and "mpp"'),
  v.maxLength(2),
  v.check((l) => new Set(l).size === l.length, 'must not repeat a protocol'),
  v.description(
    'the payment protocols its 402 offers and it accepts besides a transaction hash: x402 (PAYMENT-REQUIRED; ' +
      'X-PAYMENT, PAYMENT-SIGNATURE) and mpp (the Machine Payments Protocol: WWW-Authenticate / Authorization: ' +
      'Payment, method evm, intent charge). Default both',
  ),
)

const IdentityRules = v.pipe(
  v.nullable(IdentityRulesInput),
  v.description(
    'prices by who is calling (Web Bot Auth signatures, docs/agent-identity.md): at most 16 rules ' +
      '{match: signer | keyid | any_verified | unsigned | invalid_signature, signer?, keyid?, action: free | ' +
      'price | multiplier | block | endpoint_price, price?, multiplier?}; the first match decides. null: none',
  ),
)

const WebsocketInput = v.pipe(
  v.nullable(
    v.strictObject({
      max_message_bytes: v.optional(
        v.pipe(
          v.number('must be a number'),
          v.integer('must be an integer'),
          v.minValue(1, 'must be at least 1'),
          v.maxValue(MAX_MESSAGE_BYTES_LIMIT, `must be at most ${MAX_MESSAGE_BYTES_LIMIT}`),
        ),
      ),
      price_per_message: v.optional(Price),
      top_up_wait_ms: v.optional(
        v.pipe(
          v.number('must be a number'),
          v.integer('must be an integer'),
          v.minValue(0, 'must be at least 0'),
          v.maxValue(MAX_TOP_UP_WAIT_MS, `must be at most ${MAX_TOP_UP_WAIT_MS}`),
        ),
      ),
    }),
  ),
  v.description(
    'WebSocket sessions on its metered URL (docs/websockets.md), usage pricing (a payment buys credit ' +
      'spent as the session goes) or a pass (signing in draws one use per session, not metered for money). max_message_bytes (default 1 MiB) closes a session with 1009 past it; ' +
      'price_per_message is charged per message relayed to the client; top_up_wait_ms (default 10,000) is ' +
      'how long a session whose credit is spent waits, paused, for a top-up on the socket before it is ' +
      'closed with 4402. null: upgrades are refused',
  ),
)

const CreateBody = v.strictObject({
  upstream_url: v.pipe(v.string('must be a string'), v.maxLength(2048)),
  kind: v.optional(Kind),
  mcp: v.optional(McpInput),
  /** One fixed price per call; the same as pricing {"model":"fixed"}. One of price and pricing is required. */
  price: v.optional(Price),
  pricing: v.optional(PricingInput),
  name: OptionalText(200),
  description: OptionalText(2000),
  upstream_headers: v.optional(UpstreamHeaders),
  timeout_ms: v.optional(TimeoutMs),
  /** x402 batch-settlement (pay once into a channel, call many): off unless the owner turns it on. */
  batch_settlement: v.optional(v.boolean('must be true or false')),
  x402_settlement: v.optional(Settlement),
  protocols: v.optional(Protocols),
  identity_rules: v.optional(IdentityRules),
  websocket: v.optional(WebsocketInput),
  /** In the public discovery listing (/discovery/resources, /.well-known/x402.json) and the bazaar extension of its 402. */
  listed: v.optional(v.boolean('must be true or false')),
  /** What catalogs show and agents read to call it: service name, tags, icon, method, input and output JSON Schema. */
  discovery: v.optional(v.nullable(DiscoveryInput)),
  /** A pass (N calls, T seconds, or both, at a price): pay once, then sign in with the wallet. */
  pass: v.optional(v.nullable(PassInput)),
})

const UpdateBody = v.strictObject({
  upstream_url: v.optional(v.pipe(v.string('must be a string'), v.maxLength(2048))),
  /** kind mcp only: replaces the per-tool prices. */
  mcp: v.optional(McpInput),
  /** A fixed price alone turns the pricing back to fixed. */
  price: v.optional(Price),
  pricing: v.optional(PricingInput),
  name: OptionalText(200),
  description: OptionalText(2000),
  upstream_headers: v.optional(UpstreamHeaders),
  timeout_ms: v.optional(TimeoutMs),
  status: v.optional(v.picklist(['active', 'disabled'], 'must be "active" or "disabled"')),
  active: v.optional(v.boolean('must be true or false')),
  /** x402 batch-settlement (pay once into a channel, call many): off unless the owner turns it on. */
  batch_settlement: v.optional(v.boolean('must be true or false')),
  x402_settlement: v.optional(Settlement),
  protocols: v.optional(Protocols),
  identity_rules: v.optional(IdentityRules),
  websocket: v.optional(WebsocketInput),
  /** In the public discovery listing (/discovery/resources, /.well-known/x402.json) and the bazaar extension of its 402. */
  listed: v.optional(v.boolean('must be true or false')),
  /** What catalogs show and agents read to call it: service name, tags, icon, method, input and output JSON Schema. */
  discovery: v.optional(v.nullable(DiscoveryInput)),
  /** A pass (N calls, T seconds, or both, at a price); null stops selling it (passes bought stay valid). */
  pass: v.optional(v.nullable(PassInput)),
})

/**
 * The session terms, refused unless the endpoint is priced by usage (a session spends measured credit) or
 * sells a pass (a session opened by signing in draws one use and is not metered for money: no price per
 * message there).
 */
function readWebsocket(
  raw: v.InferOutput<typeof WebsocketInput> | undefined,
  model: Pricing['model'] | undefined,
  sellsPass: boolean,
  deps: ControlPlaneDeps,
): StoredWebsocket | null | undefined {
  if (raw === undefined || raw === null) return raw
  if (model !== 'usage' && !(sellsPass && model !== undefined))
    throw new ApiError(
      'invalid_parameter',
      'websocket needs usage pricing (pricing.model "usage"), where a session spends credit as it is ' +
        'measured, or a pass, whose sessions draw one use each',
      'websocket',
    )
  if (model !== 'usage' && raw.price_per_message !== undefined)
    throw new ApiError(
      'invalid_parameter',
      'websocket.price_per_message needs usage pricing: a session opened by a pass is not metered for money',
      'websocket.price_per_message',
    )
  const perMessageAtomic =
    raw.price_per_message === undefined
      ? 0n
      : readPrice(raw.price_per_message, deps, 'websocket.price_per_message')
  return sessionTermsToStored({
    maxMessageBytes: raw.max_message_bytes ?? DEFAULT_MAX_MESSAGE_BYTES,
    perMessageAtomic,
    topUpWaitMs: raw.top_up_wait_ms ?? DEFAULT_TOP_UP_WAIT_MS,
  })
}

function readPrice(raw: unknown, deps: ControlPlaneDeps, param = 'price'): bigint {
  const parsed = parseDollars(raw, configDollars(deps.config.proxy.max_price))
  if (!parsed.ok) throw new ApiError('invalid_parameter', `${param} ${parsed.reason}`, param)
  return parsed.atomic
}

/** `pricing`, or `price` alone (= fixed); undefined when neither is given. */
function readPricingInput(
  input: { price?: unknown; pricing?: PricingInput },
  deps: ControlPlaneDeps,
): Pricing | undefined {
  if (input.pricing === undefined) {
    return input.price === undefined
      ? undefined
      : { model: 'fixed', priceAtomic: readPrice(input.price, deps) }
  }
  if (input.price !== undefined && input.pricing.model !== 'fixed')
    throw new ApiError(
      'invalid_parameter',
      'price goes with pricing.model fixed only; set the prices inside pricing',
      'price',
    )
  try {
    return readPricing(input.pricing, input.price, configDollars(deps.config.proxy.max_price))
  } catch (err) {
    if (err instanceof PricingError) throw new ApiError('invalid_parameter', err.message, err.param)
    throw err
  }
}

/** Validated rules in their stored form; an empty list is none (null). */
function storedRules(input: v.InferOutput<typeof IdentityRulesInput> | null | undefined) {
  if (input === null || input === undefined || input.length === 0) return null
  return rulesToStored(input.map(toRule))
}

/**
 * A rule's own price (price, multiplier) fits a fixed or rules price only: a usage-priced call is charged
 * what it measures.
 */
function assertIdentityRulesFit(
  rules: readonly StoredIdentityRule[] | null,
  pricingModel: string,
  kind: 'http' | 'mcp',
): void {
  // An MCP endpoint prices per tool: a rule's price or multiplier applies to each fixed-price tool, resource
  // and prompt, and a usage-priced tool keeps what it measures (src/identity/rules.ts decide).
  if (rules === null || kind === 'mcp') return
  if (pricingModel === 'usage' && rules.some((r) => r.action === 'price' || r.action === 'multiplier'))
    throw new ApiError(
      'invalid_parameter',
      'a usage-priced endpoint is charged what it measures: its identity rules may free, block or keep the endpoint price, not set one',
      'identity_rules',
    )
}

/** Stored without absent keys, so the listing shows only what the owner declared. */
function storedDiscovery(d: DiscoveryInput | null | undefined): StoredDiscovery | null {
  if (d === null || d === undefined) return null
  return Object.fromEntries(Object.entries(d).filter(([, x]) => x !== undefined)) as StoredDiscovery
}

/** `mcp` read into base units, with errors naming the field. */
function readMcpInput(input: McpInput, deps: ControlPlaneDeps): McpPricing {
  try {
    return readMcp(input, configDollars(deps.config.proxy.max_price))
  } catch (err) {
    if (err instanceof PricingError) throw new ApiError('invalid_parameter', err.message, err.param)
    throw err
  }
}

/** `pass` read into base units (null: none), with errors naming the field. */
function readPassInput(input: PassInput | null, deps: ControlPlaneDeps): Pass | null {
  if (input === null) return null
  try {
    return readPass(input, configDollars(deps.config.proxy.max_price))
  } catch (err) {
    if (err instanceof PassError) throw new ApiError('invalid_parameter', err.message, err.param)
    throw err
  }
}

/**
 * A pass draws one use per call, whatever the call costs: an endpoint whose charge is measured per call
 * (usage) or per tool (mcp) cannot sell one.
 */
function assertPassable(pass: Pass | null, pricingModel: string, kind: 'http' | 'mcp'): void {
  if (pass === null) return
  if (kind === 'mcp')
    throw new ApiError('invalid_parameter', 'a pass is sold by HTTP endpoints only, not kind mcp', 'pass')
  if (pricingModel === 'usage')
    throw new ApiError(
      'invalid_parameter',
      'a pass is sold by fixed- or rules-priced endpoints only: a usage-priced call is charged what it measures',
      'pass',
    )
}

async function readUpstreamUrl(raw: string, deps: ControlPlaneDeps): Promise<string> {
  const checked = await checkTargetUrl(raw, { allowPrivate: deps.config.proxy.allow_private_upstreams })
  if (!checked.ok) {
    const code = checked.reason === 'private_target' ? 'upstream_not_allowed' : 'invalid_upstream_url'
    throw new ApiError(code, `upstream_url: ${checked.message}`, 'upstream_url')
  }
  return checked.url.toString()
}

/** Injected header values are secrets (an upstream's API key): show only enough to recognise them. */
function maskHeaders(headers: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [k, val] of Object.entries(headers)) out[k] = val.length > 8 ? `••••${val.slice(-4)}` : '••••'
  return out
}

export const EndpointObject = v.strictObject({
  id: v.string(),
  object: v.literal('endpoint'),
  name: v.nullable(v.string()),
  description: v.nullable(v.string()),
  upstream_url: v.string(),
  kind: v.picklist(['http', 'mcp']),
  mcp: McpObject,
  upstream_headers: v.pipe(
    v.record(v.string(), v.string()),
    v.description('values masked: only the last 4 characters are shown'),
  ),
  price: v.pipe(Dollars, v.description('the fixed price, the rules’ default, or the usage ceiling')),
  price_atomic: Atomic,
  pricing: PricingObject,
  currency: v.literal('USDC'),
  network: Network,
  status: v.picklist(['active', 'disabled']),
  active: v.boolean(),
  timeout_ms: v.number(),
  batch_settlement: v.boolean(),
  x402_settlement: v.pipe(
    v.picklist(['before_answer', 'after']),
    v.description(
      'when its x402 `exact` payments are settled: the endpoint’s own choice, or the service default when it made none',
    ),
  ),
  protocols: v.pipe(
    v.array(v.picklist(['x402', 'mpp'])),
    v.description('the payment protocols it answers besides a transaction hash (x402, mpp)'),
  ),
  identity_rules: v.pipe(
    v.nullable(
      v.array(
        v.strictObject({
          match: v.picklist(['signer', 'keyid', 'any_verified', 'unsigned', 'invalid_signature']),
          signer: v.optional(v.string()),
          keyid: v.optional(v.string()),
          action: v.picklist(['free', 'multiplier', 'price', 'block', 'endpoint_price']),
          multiplier: v.optional(v.string()),
          price: v.optional(Dollars),
        }),
      ),
    ),
    v.description('its identity rules, the first match deciding (null: none, every caller pays the price)'),
  ),
  websocket: v.pipe(
    v.nullable(
      v.strictObject({
        max_message_bytes: v.number(),
        price_per_message: Dollars,
        price_per_message_atomic: Atomic,
        top_up_wait_ms: v.number(),
      }),
    ),
    v.description('its WebSocket session terms (docs/websockets.md); null: upgrades are refused'),
  ),
  listed: v.boolean(),
  discovery: v.pipe(
    v.nullable(v.record(v.string(), v.unknown())),
    v.description(
      'what the owner declared for discovery (service_name, tags, icon_url, method, body_type, input_schema, input_example, output_schema, output_example)',
    ),
  ),
  pass: PassObject,
  metered_url: v.pipe(v.string(), v.description('{host}/m/{endpoint_id}: callers pay per call here')),
  created_at: Timestamp,
  updated_at: Timestamp,
})

export function presentEndpoint(
  e: EndpointRow,
  deps: ControlPlaneDeps,
): v.InferOutput<typeof EndpointObject> {
  return {
    id: e.id,
    object: 'endpoint',
    name: e.name,
    description: e.description,
    upstream_url: e.upstream_url,
    kind: e.mcp === null ? 'http' : 'mcp',
    mcp: e.mcp === null ? null : presentMcp(mcpFromStored(e.mcp)),
    upstream_headers: maskHeaders(e.upstream_headers),
    price: toDollars(e.price_atomic),
    price_atomic: e.price_atomic.toString(),
    pricing: presentPricing(pricingFromStored(e.pricing, e.price_atomic)),
    currency: 'USDC',
    network: deps.chain.network,
    status: e.status,
    active: e.status === 'active',
    timeout_ms: e.timeout_ms ?? deps.config.proxy.upstream_timeout_ms,
    batch_settlement: e.batch_settlement,
    x402_settlement: e.x402_settlement ?? defaultSettlement(deps),
    protocols: (e.protocols ?? ['x402', 'mpp']) as Array<'x402' | 'mpp'>,
    identity_rules: e.identity_rules === null ? null : presentRules(rulesFromStored(e.identity_rules)),
    websocket: e.websocket === null || e.websocket === undefined ? null : presentWebsocket(e.websocket),
    listed: e.listed,
    discovery: (e.discovery as Record<string, unknown> | null) ?? null,
    pass: e.pass === null ? null : presentPass(passFromStored(e.pass), `${deps.publicUrl()}/pass/${e.id}`),
    metered_url: `${deps.publicUrl()}/m/${e.id}`,
    created_at: e.created_at.toISOString(),
    updated_at: e.updated_at.toISOString(),
  }
}

function presentWebsocket(w: StoredWebsocket) {
  const terms = sessionTermsFromStored(w)
  return {
    max_message_bytes: terms.maxMessageBytes,
    price_per_message: toDollars(terms.perMessageAtomic),
    price_per_message_atomic: terms.perMessageAtomic.toString(),
    top_up_wait_ms: terms.topUpWaitMs,
  }
}

/** What an endpoint that made no choice gets: the service's configured default. */
function defaultSettlement(deps: ControlPlaneDeps): X402Settlement {
  return deps.config.settlement.before_answer.enabled ? 'before_answer' : 'after'
}

/**
 * The endpoint's choice, refused when it asks to settle before the answer and this service cannot (no
 * settler key): accepting it would promise receipts that name a mined transaction and never deliver them.
 */
function readSettlement(
  raw: X402Settlement | null | undefined,
  deps: ControlPlaneDeps,
): X402Settlement | null | undefined {
  if (raw !== 'before_answer') return raw
  const why = settleBeforeAnswerUnavailable(deps.config)
  if (why !== null)
    throw new ApiError(
      'settle_before_answer_unavailable',
      `x402_settlement "before_answer" cannot be honoured here: ${why}`,
      'x402_settlement',
    )
  return raw
}

/** Session terms as they will be, against the pricing and the pass as they will be. */
function assertWebsocketFits(
  raw: v.InferOutput<typeof WebsocketInput> | undefined,
  current: EndpointRow,
  modelAfter: Pricing['model'],
  sellsPass: boolean,
  changes: EndpointChanges,
  deps: ControlPlaneDeps,
): void {
  const model = current.mcp === null ? modelAfter : undefined
  if (raw !== undefined) {
    changes.websocket = readWebsocket(raw, model, sellsPass, deps) ?? null
    return
  }
  if (current.websocket === null) return
  if (model !== 'usage' && !(sellsPass && model !== undefined))
    throw new ApiError(
      'invalid_parameter',
      'this endpoint takes WebSocket sessions, which need usage pricing or a pass: set websocket to null first',
      'pricing',
    )
  if (model !== 'usage' && BigInt(current.websocket.per_message_atomic) !== 0n)
    throw new ApiError(
      'invalid_parameter',
      'this endpoint prices WebSocket messages, which needs usage pricing: set websocket again first',
      'pricing',
    )
}

async function ownedOr404(
  ctx: { db: Parameters<typeof findOwnedEndpoint>[0]; account: { id: string } },
  id: string,
) {
  const endpoint = await findOwnedEndpoint(ctx.db, ctx.account.id, id)
  // Another account's endpoint is indistinguishable from a missing one.
  if (!endpoint) throw new ApiError('not_found', `no endpoint ${id}`, 'id')
  return endpoint
}

export const endpointRoutes: Route[] = [
  {
    method: 'POST',
    path: '/endpoints',
    auth: true,
    idempotent: true,
    doc: {
      summary: 'Put a price on an upstream API; the answer has its metered_url',
      body: CreateBody,
      response: { status: 201, schema: EndpointObject },
    },
    async handler({ body, account, db, deps }) {
      const input = parseBody(CreateBody, body)
      let mcp: McpPricing | null = null
      let pricing: Pricing | undefined
      if (input.kind === 'mcp') {
        if (input.price !== undefined || input.pricing !== undefined)
          throw new ApiError(
            'invalid_parameter',
            'kind mcp is priced per tool: set mcp.tools and mcp.default_price, not price or pricing',
            input.price !== undefined ? 'price' : 'pricing',
          )
        if (input.mcp === undefined)
          throw new ApiError(
            'invalid_parameter',
            'missing field mcp (kind mcp needs mcp.default_price)',
            'mcp',
          )
        mcp = readMcpInput(input.mcp, deps)
        // The headline price of an MCP endpoint is what an unlisted tool costs.
        pricing = { model: 'fixed', priceAtomic: mcp.defaultAtomic }
      } else {
        if (input.mcp !== undefined)
          throw new ApiError('invalid_parameter', 'mcp goes with kind "mcp" only', 'mcp')
        pricing = readPricingInput(input, deps)
      }
      if (pricing === undefined)
        throw new ApiError('invalid_parameter', 'missing field price (or pricing)', 'price')
      const pass = readPassInput(input.pass ?? null, deps)
      assertPassable(pass, pricing.model, input.kind ?? 'http')
      const identityRules = storedRules(input.identity_rules)
      assertIdentityRulesFit(identityRules, pricing.model, input.kind ?? 'http')
      const upstreamUrl = await readUpstreamUrl(input.upstream_url, deps)
      const row = await insertEndpoint(db, {
        id: newId('ep'),
        accountId: account.id,
        name: input.name ?? null,
        description: input.description ?? null,
        upstreamUrl,
        upstreamHeaders: input.upstream_headers ?? {},
        priceAtomic: headlinePrice(pricing),
        pricing: pricingToStored(pricing),
        mcp: mcp === null ? null : mcpToStored(mcp),
        timeoutMs: input.timeout_ms ?? null,
        batchSettlement: input.batch_settlement ?? false,
        x402Settlement: readSettlement(input.x402_settlement, deps) ?? null,
        protocols: input.protocols ?? ['x402', 'mpp'],
        identityRules,
        websocket:
          readWebsocket(
            input.websocket,
            input.kind === 'mcp' ? undefined : pricing.model,
            pass !== null,
            deps,
          ) ?? null,
        listed: input.listed ?? false,
        discovery: storedDiscovery(input.discovery),
        pass: pass === null ? null : passToStored(pass),
      })
      return { status: 201, body: presentEndpoint(row, deps) }
    },
  },
  {
    method: 'GET',
    path: '/endpoints',
    auth: true,
    doc: {
      summary: "The account's endpoints",
      list: true,
      response: { status: 200, schema: listOf(EndpointObject) },
    },
    async handler({ query, account, db, deps }) {
      const page = readPage(query)
      const rows = await listEndpoints(db, {
        accountId: account.id,
        limit: page.limit + 1,
        startingAfter: page.startingAfter,
      })
      return { status: 200, body: listResponse(rows, page, (e) => presentEndpoint(e, deps)) }
    },
  },
  {
    method: 'GET',
    path: '/endpoints/:id',
    auth: true,
    doc: { summary: 'One endpoint', response: { status: 200, schema: EndpointObject } },
    async handler(ctx) {
      return { status: 200, body: presentEndpoint(await ownedOr404(ctx, ctx.params.id!), ctx.deps) }
    },
  },
  {
    method: 'PATCH',
    path: '/endpoints/:id',
    auth: true,
    doc: {
      summary:
        'Change price, target, headers, name, timeout, status (active / disabled), listing, discovery fields, the pass or when x402 payments are settled',
      body: UpdateBody,
      response: { status: 200, schema: EndpointObject },
    },
    async handler(ctx) {
      const { deps } = ctx
      const input = parseBody(UpdateBody, ctx.body)
      const changes: EndpointChanges = {}
      const pricing = readPricingInput(input, deps)
      if (pricing !== undefined) {
        changes.priceAtomic = headlinePrice(pricing)
        changes.pricing = pricingToStored(pricing)
      }
      if (input.upstream_url !== undefined)
        changes.upstreamUrl = await readUpstreamUrl(input.upstream_url, deps)
      if (input.name !== undefined) changes.name = input.name
      if (input.description !== undefined) changes.description = input.description
      if (input.upstream_headers !== undefined) changes.upstreamHeaders = input.upstream_headers
      if (input.timeout_ms !== undefined) changes.timeoutMs = input.timeout_ms
      if (input.batch_settlement !== undefined) changes.batchSettlement = input.batch_settlement
      const settlement = readSettlement(input.x402_settlement, deps)
      if (settlement !== undefined) changes.x402Settlement = settlement
      if (input.protocols !== undefined) changes.protocols = input.protocols
      if (input.identity_rules !== undefined) changes.identityRules = storedRules(input.identity_rules)
      if (input.listed !== undefined) changes.listed = input.listed
      if (input.discovery !== undefined) changes.discovery = storedDiscovery(input.discovery)
      if (input.status !== undefined) changes.status = input.status
      if (input.active !== undefined) changes.status = input.active ? 'active' : 'disabled'
      const pass = input.pass === undefined ? undefined : readPassInput(input.pass, deps)
      if (pass !== undefined) changes.pass = pass === null ? null : passToStored(pass)
      const mcp = input.mcp === undefined ? undefined : readMcpInput(input.mcp, deps)
      const updated = await deps.sql.begin(async (tx) => {
        const current = await ownedOr404({ db: tx, account: ctx.account }, ctx.params.id!)
        if (current.mcp !== null && pricing !== undefined)
          throw new ApiError(
            'invalid_parameter',
            'an MCP endpoint is priced per tool: change mcp, not price or pricing',
            input.price !== undefined ? 'price' : 'pricing',
          )
        if (current.mcp === null && mcp !== undefined)
          throw new ApiError('invalid_parameter', 'mcp goes with kind "mcp" endpoints only', 'mcp')
        if (mcp !== undefined) {
          changes.mcp = mcpToStored(mcp)
          changes.priceAtomic = mcp.defaultAtomic
        }
        // The pass as it will be, against the pricing as it will be.
        const passAfter =
          pass !== undefined ? pass : current.pass === null ? null : passFromStored(current.pass)
        const modelAfter = pricing?.model ?? pricingFromStored(current.pricing, current.price_atomic).model
        assertPassable(passAfter, modelAfter, current.mcp === null ? 'http' : 'mcp')
        const rulesAfter =
          changes.identityRules !== undefined ? changes.identityRules : current.identity_rules
        assertIdentityRulesFit(rulesAfter, modelAfter, current.mcp === null ? 'http' : 'mcp')
        assertWebsocketFits(input.websocket, current, modelAfter, passAfter !== null, changes, deps)
        return updateEndpoint(tx, current, changes, deps.config.proxy.quote_ttl_ms)
      })
      await deps.onEndpointChanged(ctx.params.id!)
      return { status: 200, body: presentEndpoint(updated as EndpointRow, deps) }
    },
  },
  {
    method: 'DELETE',
    path: '/endpoints/:id',
    auth: true,
    doc: { summary: 'Delete an endpoint', response: { status: 200, schema: DeletedObject } },
    async handler({ params, account, deps }) {
      const deleted = await deps.sql.begin((tx) => deleteEndpoint(tx, account.id, params.id!))
      if (!deleted) throw new ApiError('not_found', `no endpoint ${params.id}`, 'id')
      await deps.onEndpointChanged(params.id!)
      return { status: 200, body: { id: params.id, object: 'endpoint', deleted: true } }
    },
  },
]
