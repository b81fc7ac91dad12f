// Endpoints by id, compiled for the hot path (upstream target, 402 challenge). A miss loads from the
// database once however many requests wait for it; a change anywhere invalidates it (NOTIFY or local call).
import { LRUCache } from 'lru-cache'
import { findLiveEndpoint, type LiveEndpointRow } from '../db/endpoints.ts'
import type { Sql } from '../db/sql.ts'
import { bazaarExtension, resourceMetadata } from '../discovery/listing.ts'
import { mcpFromStored } from '../mcp/config.ts'
import { mcpBodyPricing } from '../mcp/tool-pricing.ts'
import type { BodyPricing } from '../pricing/body-price.ts'
import { presentPricing } from '../pricing/input.ts'
import { pricingFromStored, ruleIndex, type UsagePricing } from '../pricing/model.ts'
import type { Offers } from '../schemes/registry.ts'
import type { OfferQuery, Quote } from '../schemes/scheme.ts'
import { buildChallenge } from './challenge.ts'
import type { UpstreamTarget } from './proxy.ts'
import { OFFER_RECEIPT, type ReceiptSigner, signedOffers } from './receipt-signer.ts'

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
  /** Its x402 `exact` payments are settled before the answer (its own choice, or the process default). */
  settleBeforeAnswer: boolean
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
  const url = new URL(row.upstream_url)
  const resourceUrl = `${options.publicUrl()}/m/${row.id}`
  const description = row.description ?? row.name ?? `Metered API ${row.id}`
  // Opt-in schemes the owner turned on for this endpoint.
  const enabled = new Set<string>(row.batch_settlement ? ['batch-settlement'] : [])
  const pricing = pricingFromStored(row.pricing, row.price_atomic)
  const note = pricing.model === 'fixed' ? undefined : presentPricing(pricing)
  // A listed endpoint tells catalogs how to call it in every 402 (built once, like the rest of the 402).
  const listing = row.listed
    ? {
        resourceMetadata: resourceMetadata(row.discovery),
        extensions: { bazaar: bazaarExtension(row.discovery) },
      }
    : {}
  // One 402 per price, built once: the schemes' offers for that amount.
  const quote = (amountAtomic: bigint, varies: boolean, floor: boolean, what = description): Quote => {
    const { offers, notOffered } = options.offers({
      amountAtomic,
      varies,
      maxTimeoutSeconds: options.maxTimeoutSeconds,
      enabled,
    })
    const extensions: Record<string, unknown> = { ...listing.extensions }
    if (options.signer) {
      const accepts = offers.flatMap((o) => (o.v2 ? [o.v2] : []))
      const validUntil = Math.floor(Date.now() / 1000) + (options.offerValiditySeconds ?? 300)
      extensions[OFFER_RECEIPT] = signedOffers(options.signer, resourceUrl, accepts, validUntil)
    }
    return {
      amountAtomic,
      // A price change keeps the last quoted price acceptable for a while (fixed prices only).
      floorAtomic: floor ? row.quote_floor_atomic : null,
      floorUntilMs: floor ? (row.quote_floor_until?.getTime() ?? 0) : 0,
      varies,
      challenge: buildChallenge({
        resourceUrl,
        description: what,
        idField: 'endpoint_id',
        id: row.id,
        offers,
        notOffered,
        pricing: note,
        resourceMetadata: listing.resourceMetadata,
        extensions,
      }),
    }
  }
  let quoteFor: LiveEndpoint['quoteFor']
  if (pricing.model === 'rules') {
    const rules = pricing.rules
    const quotes = rules.map((r) => quote(r.priceAtomic, false, false))
    const fallback = quote(pricing.defaultAtomic, false, false)
    quoteFor = (method, subPath) => {
      const i = ruleIndex(rules, method, subPath)
      return i < 0 ? fallback : quotes[i]!
    }
  } else {
    const only =
      pricing.model === 'usage'
        ? quote(pricing.maxAtomic, true, false)
        : quote(pricing.priceAtomic, false, true)
    quoteFor = () => only
  }
  return {
    id: row.id,
    resourceUrl,
    accountId: row.account_id,
    ownerWallet: row.owner_wallet,
    active: row.status === 'active',
    target: {
      origin: url.origin,
      basePath: url.pathname.replace(/\/+$/, ''),
      host: url.host,
      injectHeaders: Object.entries(row.upstream_headers).map(
        ([k, v]) => [k.toLowerCase(), v] as [string, string],
      ),
      timeoutMs: row.timeout_ms ?? options.defaultTimeoutMs,
      allowPrivate: options.allowPrivate,
    },
    quoteFor,
    usage: pricing.model === 'usage' ? pricing : null,
    pricingModel: pricing.model,
    settleBeforeAnswer:
      row.x402_settlement === null
        ? (options.settleBeforeAnswerByDefault ?? false)
        : row.x402_settlement === 'before_answer',
    bodyPricing:
      row.mcp === null
        ? null
        : mcpBodyPricing(mcpFromStored(row.mcp), (amount, varies, tool) =>
            quote(amount, varies, false, tool === null ? description : `${description} · tool ${tool}`),
          ),
  }
}
