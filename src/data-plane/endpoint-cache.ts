// Endpoints by id, compiled for the hot path (upstream target, 402 challenge). A miss loads from the
// database once however many requests wait for it; a change anywhere invalidates it (NOTIFY or local call).
import { LRUCache } from 'lru-cache'
import { findLiveEndpoint, type LiveEndpointRow } from '../db/endpoints.ts'
import type { Sql } from '../db/sql.ts'
import { BATCH_WITHDRAW_DELAY_S } from './batch-voucher.ts'
import { buildChallenge, type Challenge, type ChallengeChain } from './challenge.ts'
import type { UpstreamTarget } from './proxy.ts'

export interface LiveEndpoint {
  id: string
  accountId: string
  ownerWallet: string
  active: boolean
  priceAtomic: bigint
  /** Lowest price quoted within quote_ttl_ms (accepted until floorUntilMs), or null. */
  floorAtomic: bigint | null
  floorUntilMs: number
  target: UpstreamTarget
  challenge: Challenge
  /** x402 batch-settlement accepted here. */
  batch: boolean
}

/** Cached for unknown ids too (briefly), so random ids cannot hammer the database. */
export const NOT_FOUND = Symbol('not_found')
type Entry = LiveEndpoint | typeof NOT_FOUND

export interface EndpointCacheOptions {
  max: number
  chain: ChallengeChain
  publicUrl(): string
  defaultTimeoutMs: number
  allowPrivate: boolean
  /** x402 `maxTimeoutSeconds` in the 402 accepts (config x402.max_timeout_seconds). */
  maxTimeoutSeconds: number
  /** False when the start-up check found no usable batch-settlement contracts (never offered). */
  batchOffered: boolean
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
  return {
    id: row.id,
    accountId: row.account_id,
    ownerWallet: row.owner_wallet,
    active: row.status === 'active',
    priceAtomic: row.price_atomic,
    floorAtomic: row.quote_floor_atomic,
    floorUntilMs: row.quote_floor_until?.getTime() ?? 0,
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
    challenge: buildChallenge(options.chain, {
      resourceUrl,
      description: row.description ?? row.name ?? `Metered API ${row.id}`,
      priceAtomic: row.price_atomic,
      idField: 'endpoint_id',
      id: row.id,
      maxTimeoutSeconds: options.maxTimeoutSeconds,
      ...(row.batch_settlement && options.batchOffered
        ? { batch: { withdrawDelay: BATCH_WITHDRAW_DELAY_S } }
        : {}),
    }),
    batch: row.batch_settlement && options.batchOffered,
  }
}

/** The least a proof must carry now: the price, or the quoted floor while it holds. */
export function minimumAcceptedAtomic(endpoint: LiveEndpoint, nowMs: number): bigint {
  if (
    endpoint.floorAtomic !== null &&
    nowMs < endpoint.floorUntilMs &&
    endpoint.floorAtomic < endpoint.priceAtomic
  ) {
    return endpoint.floorAtomic
  }
  return endpoint.priceAtomic
}

/**
 * Whether an x402 `exact` amount pays this endpoint now: exactly the price, or exactly the quoted floor while
 * it holds (a client may hold a 402 from before a price rise). `exact` never takes more.
 */
export function exactAmountAccepted(endpoint: LiveEndpoint, amountAtomic: bigint, nowMs: number): boolean {
  if (amountAtomic === endpoint.priceAtomic) return true
  return (
    endpoint.floorAtomic !== null && nowMs < endpoint.floorUntilMs && amountAtomic === endpoint.floorAtomic
  )
}
