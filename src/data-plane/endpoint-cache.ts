// Endpoints by id, compiled for the hot path (upstream target, 402 challenge). A miss loads from the
// database once however many requests wait for it; a change anywhere invalidates it (NOTIFY or local call).
import { LRUCache } from 'lru-cache'
import { findLiveEndpoint, type LiveEndpointRow } from '../db/endpoints.ts'
import type { Sql } from '../db/sql.ts'
import type { Offers } from '../schemes/registry.ts'
import type { OfferQuery, Quote } from '../schemes/scheme.ts'
import { buildChallenge } from './challenge.ts'
import type { UpstreamTarget } from './proxy.ts'

export interface LiveEndpoint {
  id: string
  accountId: string
  ownerWallet: string
  active: boolean
  target: UpstreamTarget
  /** The price of a request by its method and sub-path, with its 402. */
  quoteFor(method: string, subPath: string): Quote
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
  const { offers, notOffered } = options.offers({
    amountAtomic: row.price_atomic,
    varies: false,
    maxTimeoutSeconds: options.maxTimeoutSeconds,
    enabled,
  })
  const quote: Quote = {
    amountAtomic: row.price_atomic,
    floorAtomic: row.quote_floor_atomic,
    floorUntilMs: row.quote_floor_until?.getTime() ?? 0,
    varies: false,
    challenge: buildChallenge({
      resourceUrl,
      description,
      idField: 'endpoint_id',
      id: row.id,
      offers,
      notOffered,
    }),
  }
  return {
    id: row.id,
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
    quoteFor: () => quote,
  }
}
