// Endpoints by id, compiled for the hot path (upstream target, 402 challenge). A miss loads from the
// database once however many requests wait for it; a change anywhere invalidates it (NOTIFY or local call).
import { LRUCache } from 'lru-cache'
import { findLiveEndpoint, type LiveEndpointRow } from '../db/endpoints.ts'
import type { Sql } from '../db/sql.ts'
import { bazaarExtension, resourceMetadata } from '../discovery/listing.ts'
import { mcpBazaarExtension } from '../discovery/mcp-tool.ts'
import type { IdentityRule } from '../identity/rules.ts'
import { rulesFromStored } from '../identity/stored-rules.ts'
import { mcpFromStored } from '../mcp/config.ts'
import { OPEN_SCHEMA } from '../mcp/tool-catalog.ts'
import { mcpBodyPricing } from '../mcp/tool-pricing.ts'
import { scaleByBps } from '../money.ts'
import type { BodyPricing } from '../pricing/body-price.ts'
import { presentPricing } from '../pricing/input.ts'
import { pricingFromStored, ruleIndex, type UsagePricing } from '../pricing/model.ts'
import { type Pass, passFromStored, presentPass } from '../pricing/pass.ts'
import { type SessionTerms, sessionTermsFromStored } from '../pricing/session.ts'
import type { Offers } from '../schemes/registry.ts'
import type { OfferQuery, Quote } from '../schemes/scheme.ts'
import { buildChallenge, type Challenge, v2Header } from '../wire/challenge.ts'
import type { UpstreamTarget } from './proxy.ts'
import { OFFER_RECEIPT, type ReceiptSigner, signedOffers } from './receipt-signer.ts'
import { SIGN_IN_HEADER, type SignIn } from './sign-in.ts'

/** The pass an endpoint sells, compiled: its purchase 402, and the per-call 402's sign-in challenge. */
export interface LivePass {
  terms: Pass
  /** {public url}/pass/{id}: where the pass is bought. */
  purchaseUrl: string
  /** The pass price with its 402 (resource: the purchase URL), paid with any scheme the endpoint takes. */
  quote: Quote
  /** A per-call 402's PAYMENT-REQUIRED header with a fresh sign-in-with-x challenge (one per answer). */
  v2Header(challenge: Challenge, reason: string): string
}

const NO_OPT_IN: ReadonlySet<string> = new Set()

/** The pass offer a pass endpoint's 402 carries (x402 extension `tollgate-pass`, in the body and the header). */
export const PASS_OFFER = 'tollgate-pass'

import type { ToolCatalogs } from './tool-catalogs.ts'

export interface LiveEndpoint {
  id: string
  /** {public url}/m/{id}: what its offers and receipts name. */
  resourceUrl: string
  accountId: string
  ownerWallet: string
  active: boolean
  target: UpstreamTarget
  /** The price of a request by its method and sub-path, with its 402. */
  quoteFor(method: string, subPath: string): Quote
  /** Usage pricing: the call's charge is measured on its answer (src/pricing/meter.ts); null otherwise. */
  usage: UsagePricing | null
  pricingModel: 'fixed' | 'rules' | 'usage'
  /** The price depends on the request body (an MCP endpoint: the tool a `tools/call` names); else null. */
  bodyPricing: BodyPricing | null
  /** The pass it sells; null: none (its 402 is the static one, and a sign-in header is not read). */
  pass: LivePass | null
  /** Its x402 `exact` payments are settled before the answer (its own choice, or the process default). */
  settleBeforeAnswer: boolean
  /** The payment protocols it offers and accepts besides a transaction hash ('x402', 'mpp'). */
  protocols: ReadonlySet<string>
  /** Prices by verified agent identity; null: none (the metered path reads no signature header). */
  identity: LiveIdentityRules | null
  /** WebSocket sessions on its metered URL (src/data-plane/ws-session.ts); null: an upgrade is refused. */
  websocket: SessionTerms | null
  /** In the discovery listing: its paid calls are counted for the listing's observed figures; else not. */
  listed: boolean
}

/** An endpoint's identity rules with the 402 of each price a rule states, built once like every other 402. */
export interface LiveIdentityRules {
  rules: readonly IdentityRule[]
  /** The 402 of rule `rule`'s price for a request whose endpoint price is `base`; base itself otherwise. */
  quoteFor(rule: number, base: Quote): Quote
}

/** Cached for unknown ids too (briefly), so random ids cannot hammer the database. */
export const NOT_FOUND = Symbol('not_found')
type Entry = LiveEndpoint | typeof NOT_FOUND

export interface EndpointCacheOptions {
  max: number
  /** What the registered schemes offer for one price (src/schemes/registry.ts). */
  offers(q: OfferQuery): Offers
  publicUrl(): string
  defaultTimeoutMs: number
  allowPrivate: boolean
  /** x402 `maxTimeoutSeconds` in the 402 accepts (config x402.max_timeout_seconds). */
  maxTimeoutSeconds: number
  /** Signs the 402's offers (x402 offer-receipt); absent: unsigned. */
  signer?: ReceiptSigner
  /** How long a signed offer holds (s); the cache reloads an endpoint well within it. */
  offerValiditySeconds?: number
  /** sign-in-with-x for passes; absent: passes are not sold by this process (tests of other parts). */
  signIn?: SignIn
  /** Keeps the tools a listed MCP endpoint's server lists (discovery); absent: not kept. */
  toolCatalogs?: Pick<ToolCatalogs, 'seen'>
  /** What an endpoint that made no x402_settlement choice gets (settlement.before_answer.enabled). */
  settleBeforeAnswerByDefault?: boolean
}

export function createEndpointCache(sql: Sql, options: EndpointCacheOptions) {
  return new LRUCache<string, Entry>({
    max: options.max,
    // A safety net only: changes arrive through invalidation within a second.
    ttl: 60_000,
    fetchMethod: async (id) => {
      const row = await findLiveEndpoint(sql, id)
      return row ? compileEndpoint(row, options) : NOT_FOUND
    },
  })
}

export type EndpointCache = ReturnType<typeof createEndpointCache>

/**
 * Loads through the cache. A change that lands while a load is in flight deletes the entry, which aborts
 * that load (its answer may predate the change): load again once, after the change.
 */
export async function loadEndpoint(
  cache: EndpointCache,
  id: string,
): Promise<LiveEndpoint | typeof NOT_FOUND> {
  try {
    return (await cache.fetch(id)) ?? NOT_FOUND
  } catch {
    return (await cache.fetch(id)) ?? NOT_FOUND
  }
}

export function compileEndpoint(row: LiveEndpointRow, options: EndpointCacheOptions): LiveEndpoint {
  const resourceUrl = `${options.publicUrl()}/m/${row.id}`
  const description = row.description ?? row.name ?? `Metered API ${row.id}`
  // Opt-in schemes the owner turned on for this endpoint.
  const enabled = new Set<string>(row.batch_settlement ? ['batch-settlement'] : [])
  const protocols = new Set<string>(row.protocols ?? ['x402', 'mpp'])
  const pricing = pricingFromStored(row.pricing, row.price_atomic)
  const note = pricing.model === 'fixed' ? undefined : presentPricing(pricing)
  // A listed endpoint tells catalogs how to call it in every 402 (built once, like the rest of the 402); a
  // listed MCP endpoint describes the tool each 402 prices instead.
  const metadata = row.listed ? resourceMetadata(row.discovery) : undefined
  const httpBazaar = row.listed && row.mcp === null ? bazaarExtension(row.discovery) : undefined
  const sold = passSold(row, options)
  // One 402 per price, built once: the schemes' offers for that amount.
  // `at`: where it is paid (the metered URL, or the pass's purchase URL) and the opt-in schemes offered there.
  const here: { resource: string; schemes: ReadonlySet<string> } = { resource: resourceUrl, schemes: enabled }
  const quote = (
    amountAtomic: bigint,
    varies: boolean,
    floor: boolean,
    what = description,
    bazaar = httpBazaar,
    at = here,
  ): Quote => {
    const { resource, schemes } = at
    const { offers, notOffered } = options.offers({
      amountAtomic,
      varies,
      maxTimeoutSeconds: options.maxTimeoutSeconds,
      enabled: schemes,
      protocols,
    })
    const extensions: Record<string, unknown> = {
      ...(bazaar === undefined ? {} : { bazaar }),
      ...sold?.offer,
    }
    if (options.signer) {
      const accepts = offers.flatMap((o) => (o.v2 ? [o.v2] : []))
      const validUntil = Math.floor(Date.now() / 1000) + (options.offerValiditySeconds ?? 300)
      extensions[OFFER_RECEIPT] = signedOffers(options.signer, resource, accepts, validUntil)
    }
    return {
      amountAtomic,
      // A price change keeps the last quoted price acceptable for a while (fixed prices only).
      floorAtomic: floor ? row.quote_floor_atomic : null,
      floorUntilMs: floor ? (row.quote_floor_until?.getTime() ?? 0) : 0,
      varies,
      challenge: buildChallenge({
        resourceUrl: resource,
        description: what,
        idField: 'endpoint_id',
        id: row.id,
        offers,
        notOffered,
        pricing: note,
        resourceMetadata: metadata,
        extensions,
      }),
    }
  }
  const { quoteFor } = quotesFor(pricing, quote)
  const tools = toolQuoteBook(quote)
  return {
    id: row.id,
    resourceUrl,
    accountId: row.account_id,
    ownerWallet: row.owner_wallet,
    active: row.status === 'active',
    target: upstreamTarget(row, options),
    quoteFor,
    usage: pricing.model === 'usage' ? pricing : null,
    pricingModel: pricing.model,
    // Paid once, by a payment captured whole: the opt-in channel scheme (vouchers per call) is not offered.
    pass:
      sold &&
      livePass(
        sold,
        resourceUrl,
        quote(sold.terms.priceAtomic, false, false, sold.what, httpBazaar, sold.at),
      ),
    protocols,
    settleBeforeAnswer:
      row.x402_settlement === null
        ? (options.settleBeforeAnswerByDefault ?? false)
        : row.x402_settlement === 'before_answer',
    bodyPricing: row.mcp === null ? null : compileMcp(row, options, tools.quote, description),
    identity:
      row.identity_rules === null
        ? null
        : compileIdentity(rulesFromStored(row.identity_rules), tools.requote),
    // Sessions spend prepaid credit measured by usage pricing, or draw a use of a pass (a pass endpoint's
    // sessions open by signing in only): no other endpoint opens one.
    websocket:
      row.websocket === null || row.websocket === undefined || (pricing.model !== 'usage' && !sold)
        ? null
        : sessionTermsFromStored(row.websocket),
    listed: row.listed,
  }
}

/** Where the endpoint's paid calls go, and the headers its owner injects there. */
function upstreamTarget(row: LiveEndpointRow, options: EndpointCacheOptions): LiveEndpoint['target'] {
  const url = new URL(row.upstream_url)
  return {
    origin: url.origin,
    basePath: url.pathname.replace(/\/+$/, ''),
    host: url.host,
    injectHeaders: Object.entries(row.upstream_headers).map(
      ([k, v]) => [k.toLowerCase(), v] as [string, string],
    ),
    timeoutMs: row.timeout_ms ?? options.defaultTimeoutMs,
    allowPrivate: options.allowPrivate,
  }
}

type Bazaar = Record<string, unknown> | undefined
type QuoteBuilder = (
  amountAtomic: bigint,
  varies: boolean,
  floor: boolean,
  what?: string,
  bazaar?: Bazaar,
) => Quote

/**
 * An MCP endpoint's 402s (one per priced tool, resource or prompt) remembered with what each says of itself,
 * so an identity rule's price for a tool keeps the tool's description and bazaar entry in its 402.
 */
function toolQuoteBook(quote: QuoteBuilder) {
  const told = new WeakMap<Quote, { what: string; bazaar: Bazaar }>()
  return {
    quote(amountAtomic: bigint, varies: boolean, floor: boolean, what: string, bazaar: Bazaar): Quote {
      const q = quote(amountAtomic, varies, floor, what, bazaar)
      told.set(q, { what, bazaar })
      return q
    },
    requote(base: Quote, amountAtomic: bigint): Quote {
      const tool = told.get(base)
      return tool === undefined
        ? quote(amountAtomic, false, false)
        : quote(amountAtomic, false, false, tool.what, tool.bazaar)
    },
  }
}

/**
 * Each rule that states its own price (price, multiplier) gets its 402 per endpoint price (an MCP endpoint:
 * per tool price), built the first time a request needs it and kept with that price's 402, as every other 402
 * is kept. Free, block and endpoint_price need none. A usage-priced price keeps its own 402: its charge is what
 * it measures (the rule applies as endpoint_price; see identityDecision).
 */
function compileIdentity(
  rules: IdentityRule[],
  requote: (base: Quote, amountAtomic: bigint) => Quote,
): LiveIdentityRules {
  const byBase = new WeakMap<Quote, Array<Quote | null>>()
  const build = (base: Quote) =>
    rules.map((r) => {
      const a = r.action
      if (base.varies) return null
      if (a.kind === 'price') return requote(base, a.atomic)
      if (a.kind === 'multiplier') return requote(base, scaleByBps(base.amountAtomic, a.bps))
      return null
    })
  return {
    rules,
    quoteFor: (rule, base) => {
      let quotes = byBase.get(base)
      if (quotes === undefined) {
        quotes = build(base)
        byBase.set(base, quotes)
      }
      return quotes[rule] ?? base
    },
  }
}

/** An MCP endpoint's per-tool 402s; listed, each describes its tool as the server listed it (or as named). */
function compileMcp(
  row: LiveEndpointRow,
  options: EndpointCacheOptions,
  quote: (
    amountAtomic: bigint,
    varies: boolean,
    floor: boolean,
    what: string,
    bazaar: Record<string, unknown> | undefined,
  ) => Quote,
  description: string,
): BodyPricing {
  const catalog = row.listed ? (row.mcp_catalog ?? null) : null
  const byName = new Map((catalog ?? []).map((t) => [t.name, t]))
  const seen = options.toolCatalogs
  return mcpBodyPricing(
    mcpFromStored(row.mcp!),
    (amount, varies, tool, what) => {
      if (tool === null) return quote(amount, varies, false, description, undefined)
      // A priced resource or prompt: named in its 402; catalogs list tools only.
      if (what !== undefined)
        return quote(amount, varies, false, `${description} · ${what} ${tool}`, undefined)
      const listed = byName.get(tool)
      const bazaar = row.listed
        ? mcpBazaarExtension({
            name: tool,
            ...(listed?.description === undefined ? {} : { description: listed.description }),
            inputSchema: listed?.input_schema ?? OPEN_SCHEMA,
          })
        : undefined
      return quote(amount, varies, false, `${description} · tool ${tool}`, bazaar)
    },
    {
      catalog,
      onToolsListed:
        row.listed && seen !== undefined
          ? (tools, complete) => seen.seen(row.id, catalog, tools, complete)
          : null,
    },
  )
}

/** The pass an endpoint sells (null: none, or this process does not sell passes) and its 402 offer. */
function passSold(row: LiveEndpointRow, options: EndpointCacheOptions) {
  const signIn = options.signIn
  if (row.pass === null || signIn === undefined) return null
  const terms = passFromStored(row.pass)
  const purchaseUrl = `${options.publicUrl()}/pass/${row.id}`
  // A pass endpoint's 402 says where the pass is sold and what it holds.
  return {
    terms,
    purchaseUrl,
    signIn,
    offer: { [PASS_OFFER]: { info: presentPass(terms, purchaseUrl) } },
    what: `${row.description ?? row.name ?? `Metered API ${row.id}`} · pass`,
    at: { resource: purchaseUrl, schemes: NO_OPT_IN },
  }
}

function livePass(
  sold: NonNullable<ReturnType<typeof passSold>>,
  resourceUrl: string,
  quote: Quote,
): LivePass {
  return {
    terms: sold.terms,
    purchaseUrl: sold.purchaseUrl,
    quote,
    v2Header: (challenge, reason) => signInHeader(sold.signIn, challenge, reason, resourceUrl),
  }
}

/**
 * The PAYMENT-REQUIRED header of one 402 of a pass endpoint: the precomputed requirement with the
 * sign-in-with-x challenge added to its extensions, fresh for this answer (its nonce is single-use). Only
 * pass endpoints pay this per answer; every other 402 reuses its encoded header. The precomputed text ends
 * with its `extensions` object, which always holds payment-identifier: `}}` closes it and the whole.
 */
function signInHeader(signIn: SignIn, challenge: Challenge, reason: string, resourceUrl: string): string {
  const rest = challenge.v2Rest
  if (!rest.endsWith('}}')) return v2Header(challenge, reason)
  const text =
    `{"x402Version":2,"error":"${reason}"${rest.slice(0, -2)},` +
    `"${SIGN_IN_HEADER}":${signIn.challengeJson(resourceUrl, Date.now())}}}`
  return Buffer.from(text).toString('base64')
}

/** The 402 of each price the model states, built once: a rule's by its method and path, else the one price. */
function quotesFor(
  pricing: ReturnType<typeof pricingFromStored>,
  quote: (amountAtomic: bigint, varies: boolean, floor: boolean) => Quote,
): { quoteFor: LiveEndpoint['quoteFor'] } {
  if (pricing.model === 'rules') {
    const rules = pricing.rules
    const quotes = rules.map((r) => quote(r.priceAtomic, false, false))
    const fallback = quote(pricing.defaultAtomic, false, false)
    return {
      quoteFor: (method, subPath) => {
        const i = ruleIndex(rules, method, subPath)
        return i < 0 ? fallback : quotes[i]!
      },
    }
  }
  const only =
    pricing.model === 'usage'
      ? quote(pricing.maxAtomic, true, false)
      : quote(pricing.priceAtomic, false, true)
  return { quoteFor: () => only }
}
